import type { DescField, DescMessage } from "@bufbuild/protobuf";
import { parsePathTemplate } from "../server/path-template.js";
import type { HttpBinding } from "../server/http-bindings.js";
import { apiBodyLimits } from "../api/body-limits.js";
import { operationName } from "../server/operation-name.js";
import { isRequired, isWellKnown, scalarSchema, type Schema, type SchemaCollector } from "./json-schema.js";

/** An OpenAPI operation at an OpenAPI path, for one REST binding of an RPC. */
export interface PathOperation {
  /** OpenAPI path: the template with `{app.id}` variables (no `=*`). */
  path: string;
  /** Lower-case, as OpenAPI path items key them. */
  method: string;
  operation: Schema;
}

/**
 * RPCs that answer 404 for an id in their body rather than their path: the resource it names does
 * not exist (Clients.Create for an unknown `userId`).
 */
const notFoundForBodyReference: ReadonlySet<string> = new Set(["svc.api.iam.v1.Clients.Create"]);

/** Nested request messages are offered as dotted query parameters down to this depth. */
const maxQueryDepth = 3;

/**
 * The operation as the REST transcoder serves it: path variables bind (possibly nested) fields by
 * proto name; with `body: "*"` the rest of the request message is the JSON body, otherwise every
 * other field is a query parameter (proto name; the transcoder accepts the JSON name too).
 */
export function rpcOperation(binding: HttpBinding, operationId: string, tag: string, schemas: SchemaCollector): PathOperation {
  const { rpc } = binding;
  const template = parsePathTemplate(binding.path);
  const pathFields = template.segments.flatMap((s) => ("fieldPath" in s ? [s.fieldPath] : []));
  const path =
    "/" + template.segments.map((s) => ("literal" in s ? s.literal : `{${s.fieldPath.join(".")}}`)).join("/");

  const parameters: Schema[] = pathFields.map((fieldPath) => ({
    name: fieldPath.join("."),
    in: "path",
    required: true,
    schema: parameterSchema(resolveField(rpc.input, fieldPath), schemas),
  }));
  const bound = new Set(pathFields.map((p) => p.join(".")));
  if (binding.body === "") parameters.push(...queryParameters(rpc.input, [], bound, schemas, new Set()));

  const operation: Schema = {
    operationId,
    summary: `${rpc.parent.name}.${rpc.name}`,
    tags: [tag],
  };
  if (parameters.length > 0) operation["parameters"] = parameters;
  if (binding.body === "*") {
    const topLevelBound = new Set(pathFields.filter((p) => p.length === 1).map((p) => p[0]));
    operation["requestBody"] = {
      // The transcoder reads an absent body as `{}`: only a request with a REQUIRED field in its
      // body needs one (Publish, RotateWebhookSecret, Execute do not).
      required: rpc.input.fields.some((f) => !topLevelBound.has(f.name) && isRequired(f)),
      content: {
        "application/json": {
          schema:
            topLevelBound.size === 0
              ? schemas.messageRef(rpc.input)
              : schemas.objectSchema(rpc.input, (f) => !topLevelBound.has(f.name)),
        },
      },
    };
  }
  operation["responses"] = {
    "200": { description: "OK", content: { "application/json": { schema: schemas.messageRef(rpc.output) } } },
    "400": { $ref: "#/components/responses/InvalidArgument" },
    "401": { $ref: "#/components/responses/Unauthenticated" },
    "403": { $ref: "#/components/responses/PermissionDenied" },
    ...(pathFields.length > 0 || notFoundForBodyReference.has(operationName(rpc))
      ? { "404": { $ref: "#/components/responses/NotFound" } }
      : {}),
    ...(binding.body === "" ? {} : bodyRefusals(apiBodyLimits.get(`/${rpc.parent.typeName}/${rpc.name}`))),
    "503": { $ref: "#/components/responses/Unavailable" },
    default: { $ref: "#/components/responses/Error" },
  };
  return { path, method: binding.method.toLowerCase(), operation };
}

/** The answers to a request body refused before its handler: too slow, too large (`limitBytes`), not JSON. */
function bodyRefusals(limitBytes: number | undefined): Schema {
  return {
    "408": { $ref: "#/components/responses/RequestTimeout" },
    "413":
      limitBytes === undefined
        ? { $ref: "#/components/responses/PayloadTooLarge" }
        : { description: `The request body is larger than ${limitBytes} bytes (this operation's limit).`, content: { "application/json": { schema: { $ref: "#/components/schemas/Error" } } } },
    "415": { $ref: "#/components/responses/UnsupportedMediaType" },
  };
}

function resolveField(message: DescMessage, fieldPath: readonly string[]): DescField {
  let current = message;
  let field: DescField | undefined;
  for (const name of fieldPath) {
    field = current.fields.find((f) => f.name === name);
    if (field === undefined) throw new Error(`${message.typeName} has no field ${fieldPath.join(".")}`);
    if (field.fieldKind === "message") current = field.message;
  }
  if (field === undefined) throw new Error(`empty field path in a template of ${message.typeName}`);
  return field;
}

function queryParameters(
  message: DescMessage,
  prefix: readonly string[],
  bound: ReadonlySet<string>,
  schemas: SchemaCollector,
  visiting: Set<string>,
): Schema[] {
  visiting.add(message.typeName);
  const parameters: Schema[] = [];
  for (const field of message.fields) {
    const fieldPath = [...prefix, field.name];
    if (bound.has(fieldPath.join("."))) continue;
    if (field.fieldKind === "map" || (field.fieldKind === "list" && field.listKind === "message")) continue;
    if (field.fieldKind === "message" && !isWellKnown(field.message)) {
      if (fieldPath.length < maxQueryDepth && !visiting.has(field.message.typeName)) {
        parameters.push(...queryParameters(field.message, fieldPath, bound, schemas, visiting));
      }
      continue;
    }
    const schema = parameterSchema(field, schemas);
    parameters.push({
      name: fieldPath.join("."),
      in: "query",
      required: false,
      schema,
      ...(field.fieldKind === "list" ? { style: "form", explode: true } : {}),
    });
  }
  visiting.delete(message.typeName);
  return parameters;
}

/** The schema of a field's value as URL text carries it: a scalar is never null there. */
function parameterSchema(field: DescField, schemas: SchemaCollector): Schema {
  return field.fieldKind === "scalar" ? scalarSchema(field.scalar) : schemas.fieldSchema(field);
}
