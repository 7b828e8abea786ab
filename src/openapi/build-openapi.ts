import type { DescService } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import { codeName } from "../server/outcome-codes.js";
import { fixedPaths, fixedSchemas } from "./fixed-endpoints.js";
import { httpBindingsOf } from "../server/http-bindings.js";
import { operationName } from "../server/operation-name.js";
import { SchemaCollector, type Schema } from "./json-schema.js";
import { rpcOperation } from "./rpc-operations.js";

export interface OpenApiOptions {
  /** The tenant base URL: the server URL and the prefix of the OAuth token URL. */
  baseUrl: string;
  /** Services whose `google.api.http` rules become paths (services without rules add nothing). */
  services: readonly DescService[];
}

/** The API description version (spec 9). */
export const apiVersion = "0.1.0-alpha";

/**
 * The OpenAPI 3.1 document of the REST surface, derived from the descriptors exactly as the REST
 * transcoder derives its routes, plus the webhook and token endpoints. Deterministic: services are
 * taken in name order, so the committed `openapi.json` only changes when the contract does.
 */
export function buildOpenApi(options: OpenApiOptions): Schema {
  const schemas = new SchemaCollector();
  const paths: Record<string, Record<string, Schema>> = {};
  const tags: Schema[] = [];
  const canonicalPaths = new Map<string, string>();
  const services = [...options.services].sort((a, b) => (a.typeName < b.typeName ? -1 : a.typeName > b.typeName ? 1 : 0));
  for (const service of services) {
    const bindings = httpBindingsOf(service);
    if (bindings.length === 0) continue;
    const tag = tagOf(service);
    tags.push({ name: tag, description: `Operations of ${service.typeName}.` });
    const seen = new Map<string, number>();
    for (const binding of bindings) {
      const base = operationName(binding.rpc);
      const n = (seen.get(base) ?? 0) + 1;
      seen.set(base, n);
      const { path, method, operation } = rpcOperation(binding, n === 1 ? base : `${base}_${n}`, tag, schemas);
      (paths[canonicalPath(canonicalPaths, path, operation)] ??= {})[method] = operation;
    }
  }
  Object.assign(paths, fixedPaths());
  tags.push(
    { name: "Webhook", description: "Inbound webhooks that trigger automations." },
    { name: "Authentication", description: "OAuth 2.0 client-credentials tokens for the API." },
  );

  return {
    openapi: "3.1.0",
    info: {
      title: "accessd",
      version: apiVersion,
      description:
        "Access-management API: apps, app entitlements, their owners, users, and automations that external " +
        "systems start with signed webhooks. The same operations are served as gRPC, Connect and gRPC-Web " +
        "(operation names `<package>.<Service>.<Method>`) and as the REST paths below; JSON is proto3 JSON.",
      license: { name: "Apache-2.0", identifier: "Apache-2.0" },
    },
    servers: [{ url: options.baseUrl }],
    security: [{ bearerAuth: [] }, { oauth: [] }],
    tags,
    paths,
    components: {
      schemas: { ...sortedKeys(pageFieldsAlwaysPresent(schemas.components)), ...fixedSchemas, Error: errorSchema() },
      responses: {
        InvalidArgument: errorResponse("The request is malformed (400)."),
        Unauthenticated: errorResponse("No, or an invalid, bearer token (401)."),
        PermissionDenied: errorResponse("The caller's role does not allow the operation (403)."),
        NotFound: errorResponse("A resource named in the path does not exist (404)."),
        RequestTimeout: errorResponse("The request body did not arrive within the request timeout (408)."),
        PayloadTooLarge: errorResponse("The request body is larger than the API's limit, 1 MiB by default (413)."),
        UnsupportedMediaType: errorResponse("The request body is not JSON (415)."),
        Unavailable: errorResponse("The store cannot serve the request now (disk full, locked, failing): retry after the Retry-After seconds (503)."),
        Error: errorResponse("Any other error, in Connect's JSON error shape."),
      },
      securitySchemes: {
        bearerAuth: {
          type: "http",
          scheme: "bearer",
          bearerFormat: "JWT",
          description: "Authorization: Bearer <ACCESS_TOKEN>, an access token from the token endpoint.",
        },
        oauth: {
          type: "oauth2",
          description: "OAuth 2.0 client credentials; the credentials go in the token request body.",
          flows: { clientCredentials: { tokenUrl: `${options.baseUrl}/auth/v1/token`, scopes: {} } },
        },
        webhookSignature: {
          type: "apiKey",
          in: "header",
          name: "Webhook-Signature",
          description: "HMAC listeners: base64url HMAC-SHA256 of `<timestamp>.<event_id>.<body>`.",
        },
        webhookJwt: {
          type: "http",
          scheme: "bearer",
          bearerFormat: "JWT",
          description: "JWT listeners: a JWT signed by a key of the listener's JWKS.",
        },
      },
    },
  };
}

/**
 * OpenAPI treats `/apps/{id}` and `/apps/{app.id}` as the same path and forbids both, so the first
 * path of a shape names the variables and later operations' path parameters are renamed to match,
 * saying which request field they bind.
 */
function canonicalPath(canonical: Map<string, string>, path: string, operation: Schema): string {
  const variable = /\{([^}]+)\}/g;
  const shape = path.replace(variable, "{}");
  const first = canonical.get(shape);
  if (first === undefined) {
    canonical.set(shape, path);
    return path;
  }
  if (first === path) return path;
  const names = [...first.matchAll(variable)].map((m) => m[1]);
  const own = [...path.matchAll(variable)].map((m) => m[1]);
  const parameters = Array.isArray(operation["parameters"]) ? (operation["parameters"] as Schema[]) : [];
  for (const parameter of parameters) {
    const i = own.indexOf(String(parameter["name"]));
    if (parameter["in"] !== "path" || i === -1) continue;
    parameter["description"] = `The request field \`${own[i]}\`.`;
    parameter["name"] = names[i];
  }
  return first;
}

/** "AppEntitlementOwners" -> "App Entitlement Owner", the spec's tag style. */
function tagOf(service: DescService): string {
  return service.name.replace(/s$/, "").replace(/([a-z0-9])([A-Z])/g, "$1 $2");
}

function errorSchema(): Schema {
  const codes = Object.values(Code).filter((c): c is Code => typeof c === "number").map(codeName);
  return {
    type: "object",
    description: "Connect's error shape, on every non-200 answer of the API and webhook routes.",
    properties: {
      code: { type: "string", enum: codes },
      message: { type: "string" },
      details: {
        type: "array",
        items: {
          type: "object",
          properties: { type: { type: "string" }, value: { type: "string", contentEncoding: "base64" }, debug: {} },
        },
      },
    },
    required: ["code"],
  };
}

function errorResponse(description: string): Schema {
  return { description, content: { "application/json": { schema: { $ref: "#/components/schemas/Error" } } } };
}

function sortedKeys<T>(record: Record<string, T>): Record<string, T> {
  return Object.fromEntries(Object.entries(record).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
}

/**
 * Spec 2.5: a list or search response always has `list` and `nextPageToken`, the token an empty
 * string on the last page: never null, never absent (the service writes both every time). The
 * contract declares the token `optional` only so that proto3 JSON writes it even when empty,
 * which the generic field rule would document as `string | null`, not required; SDKs generated
 * from this document would then model a token that may be missing.
 */
function pageFieldsAlwaysPresent(components: Record<string, Schema>): Record<string, Schema> {
  for (const schema of Object.values(components)) {
    const properties = schema["properties"] as Record<string, Schema> | undefined;
    if (properties?.["list"] === undefined || properties["nextPageToken"] === undefined) continue;
    properties["nextPageToken"] = {
      type: "string",
      description: "The page_token of the next page; an empty string when no further page exists.",
    };
    schema["required"] = ["list", "nextPageToken"];
  }
  return components;
}
