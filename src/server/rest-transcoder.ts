import { Http2ServerResponse } from "node:http2";
import type { UniversalHandler } from "@connectrpc/connect/protocol";
import {
  fromJsonString,
  ScalarType,
  type DescField,
  type DescMessage,
  type DescMethod,
  type JsonObject,
  type JsonValue,
} from "@bufbuild/protobuf";
import { Code, ConnectError, createContextValues } from "@connectrpc/connect";
import { universalResponseToNodeResponse } from "@connectrpc/connect-node";
import type { VerifiedToken } from "../auth/access-tokens.js";
import { membersIn, scanJsonText } from "../automations/json-depth.js";
import { httpBindingsOfMethod } from "./http-bindings.js";
import { refuseMethod, writeJsonError } from "./json-error.js";
import type { NodeRequest, NodeResponse } from "./node-http.js";
import { noteAnsweredCode } from "./outcome-codes.js";
import { refusalWithCode } from "./connect-refusals.js";
import { operationName } from "./operation-name.js";
import { matchPathTemplate, parsePathTemplate, type PathBinding, type PathTemplate } from "./path-template.js";
import { BodyTooLargeError, compressedBodyMessage, discardBody, identityOnlyHeaders, nonUtf8Charset, readBody, unsupportedContentEncoding, utf8Text } from "./read-body.js";
import { withRepeatedFieldsPresent } from "./rest-list-fields.js";
import { requestFactsKey, type RequestFacts } from "./request-context.js";

/** One REST route, derived from an RPC's `google.api.http` option. */
interface RestRoute {
  httpMethod: string;
  template: PathTemplate;
  /** "*" (whole message from the body) or "" (no body). */
  body: string;
  rpc: DescMethod;
  /** The RPC's operation name (`package.Service.Method`), for the metrics and the log. */
  operation: string;
  handler: UniversalHandler;
  /** Fields bound by the path: they cannot also come from the query. */
  pathFields: Set<string>;
  /** The request's `page_size` field, for a List or Search (found once, when the routes are built). */
  pageSizeField: DescField | undefined;
  /** The most bytes of its body (the API's, or the RPC's own in `bodyLimits`). */
  maxBodyBytes: number;
}

export interface RestTranscoderOptions {
  /** Largest request body accepted. */
  maxBodyBytes: number;
  /** As ConnectHandlersOptions' `checkBearer`: a call refused so is not parsed (its body thrown away). */
  checkBearer?: (authorization: string | null) => Promise<VerifiedToken | ConnectError>;
  /** As ConnectHandlersOptions' `bodyLimits`, by the RPC's request path. */
  bodyLimits?: ReadonlyMap<string, number>;
}

/**
 * Serves the REST surface (`/api/v1/...`) by translating each request into a Connect unary call
 * on the very handler that serves gRPC and Connect, so interceptors, validation and errors are
 * shared by all protocols. The routes come from the descriptors' `google.api.http` options; no
 * route is written by hand.
 *
 * The request message is assembled as proto3 JSON (body, then path variables, then query
 * parameters) and handed to the handler already parsed; protobuf-es decodes it and refuses
 * unknown fields and wrong types with invalid_argument (400), as for Connect. A body is also run
 * through protobuf-es's string decoder first, for the one check JSON.parse cannot make (a key
 * given twice).
 */
export class RestTranscoder {
  private readonly routes: RestRoute[];

  constructor(
    handlers: readonly UniversalHandler[],
    private readonly options: RestTranscoderOptions,
  ) {
    this.routes = handlers.flatMap((handler) => routesOf(handler, options.bodyLimits?.get(handler.requestPath) ?? options.maxBodyBytes));
    // Most literal template first, so /api/v1/search/users beats /api/v1/users/{id}-like shapes.
    this.routes.sort((a, b) => b.template.literalCount - a.template.literalCount);
  }

  /**
   * Handles the request when its path is a REST route; answers 404 for unknown paths and 405
   * for a known path with another method.
   */
  async handle(req: NodeRequest, res: NodeResponse, facts: RequestFacts): Promise<void> {
    const url = req.url ?? "/";
    const queryStart = url.indexOf("?");
    const path = queryStart === -1 ? url : url.slice(0, queryStart);

    const found = this.matchRoute(req.method, path);
    if (found === "malformed") {
      writeJsonError(res, Code.InvalidArgument, `path ${path} has a malformed percent-escape`);
      return;
    }
    if (found.match === undefined) {
      if (found.allowed.size === 0) writeJsonError(res, Code.NotFound, `no operation at ${req.method ?? ""} ${path}`);
      else refuseMethod(res, req.method, path, [...found.allowed]);
      return;
    }
    const { route, bindings } = found.match;

    facts.operation = route.operation;
    if (this.options.checkBearer !== undefined) facts.bearer = await this.options.checkBearer(req.headers.authorization ?? null);
    let message: JsonObject = {};
    try {
      if (facts.bearer instanceof ConnectError) await discardBody(req, this.options.maxBodyBytes); // refused by the interceptor
      else message = await this.assembleMessage(req, route, bindings, queryStart === -1 ? undefined : url.slice(queryStart + 1));
    } catch (e) {
      if (e instanceof BodyTooLargeError) {
        writeJsonError(res, Code.ResourceExhausted, e.message, 413);
      } else if (e instanceof RestRequestError) {
        writeJsonError(res, Code.InvalidArgument, e.message, e.status, e.headers);
      } else {
        throw e;
      }
      return;
    }

    // Cancels the call when the client goes away first. Not after a finished response: aborting
    // builds a DOMException with its stack trace (about 12 us a request, issue 7).
    const abort = new AbortController();
    res.once("close", () => {
      if (!res.writableFinished) abort.abort();
    });
    // A client that reset its HTTP/2 stream after sending the body: nobody to answer, and the call
    // is not run (as over gRPC and Connect); it ran, and writing its answer failed with an error
    // line any client could cause, the call counted twice (canceled, then its own code).
    if (clientGone(res)) return;
    const response = await route.handler({
      httpVersion: req.httpVersion,
      method: "POST",
      url: `http://${req.headers.host ?? "localhost"}${route.handler.requestPath}`,
      header: forwardedHeaders(req),
      body: message,
      signal: abort.signal,
      contextValues: createContextValues().set(requestFactsKey, facts),
    });
    let answered = await withRepeatedFieldsPresent(response, route.rpc.output);
    if (facts.observed !== true) {
      // Refused by connect-es's decoder before the interceptors (an unknown field, an enum name
      // that is none): its code, for the HTTP layer's count and line.
      const refusal = await refusalWithCode(answered);
      answered = refusal.response;
      if (refusal.code !== undefined) noteAnsweredCode(res, refusal.code);
    }
    // A HEAD answer has no body. Node leaves it out over HTTP/1.1 itself, but over HTTP/2 the
    // stream of a HEAD request ends with its headers, and writing the body after them broke the
    // answer (the client saw the stream end without headers).
    try {
      await universalResponseToNodeResponse(req.method === "HEAD" ? { ...answered, body: undefined } : answered, res);
    } catch (e) {
      if (ConnectError.from(e).code === Code.Aborted) return; // the client went away meanwhile
      throw e;
    }
  }

  /**
   * The route serving `method` on `path` (HEAD where GET is), or the methods the path's routes
   * take (none: no such path); "malformed" for a path with a bad percent-escape.
   */
  private matchRoute(
    method: string | undefined,
    path: string,
  ): { match?: { route: RestRoute; bindings: PathBinding[] }; allowed: Set<string> } | "malformed" {
    const segments = path.slice(1).split("/");
    const allowed = new Set<string>();
    try {
      for (const route of this.routes) {
        const bindings = matchPathTemplate(route.template, segments);
        if (bindings === undefined) continue;
        allowed.add(route.httpMethod);
        if (route.httpMethod === method || (method === "HEAD" && route.httpMethod === "GET")) {
          return { match: { route, bindings }, allowed };
        }
      }
    } catch {
      return "malformed";
    }
    return { allowed };
  }

  /** The RPC's request message as JSON: the body, then the path's fields, then the query's. */
  private async assembleMessage(req: NodeRequest, route: RestRoute, bindings: PathBinding[], query: string | undefined): Promise<JsonObject> {
    const message = await this.requestJson(req, route);
    for (const binding of bindings) setField(message, route.rpc.input, binding.fieldPath, binding.value, "path");
    if (query !== undefined) applyQuery(message, route, parseQuery(query));
    if (route.pageSizeField !== undefined) clampPageSizeToInt32(message, route.pageSizeField);
    return message;
  }

  private async requestJson(req: NodeRequest, route: RestRoute): Promise<JsonObject> {
    if (route.body === "") return {};
    const encoding = unsupportedContentEncoding(req.headers["content-encoding"]);
    if (encoding !== undefined) throw new RestRequestError(compressedBodyMessage(encoding), 415, identityOnlyHeaders);
    const contentType = req.headers["content-type"];
    if (contentType !== undefined && !/^application\/([a-z.+-]*\+)?json\s*(;|$)/i.test(contentType)) {
      throw new RestRequestError(`Content-Type must be application/json, not ${contentType}`, 415);
    }
    const charset = contentType === undefined ? undefined : nonUtf8Charset(contentType);
    if (charset !== undefined) throw new RestRequestError(`JSON bodies are read as UTF-8: charset=${charset} is not taken`, 415);
    const bytes = await readBody(req, route.maxBodyBytes);
    if (bytes.length === 0) return {};
    // A leading byte order mark is dropped, as by Connect's decoder and the webhooks, so a body
    // reads the same on every protocol.
    const text = utf8Text(bytes);
    if (text === undefined) throw new RestRequestError("request body is not valid UTF-8");
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch (e) {
      throw new RestRequestError(`request body is not valid JSON: ${(e as Error).message}`);
    }
    if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) {
      throw new RestRequestError("request body must be a JSON object");
    }
    // Only a body with a name given twice is decoded to name it: the check decoded every body
    // whole, as the handler does again (an Execute with a 64 KB context: 2.5-10 ms more). One
    // nested deeper than protobuf decoders go is the handler's to refuse (membersIn would run out
    // of stack: a 500).
    const shape = scanJsonText(text, maxDecodedDepth);
    if (!shape.deeperThanLimit && shape.members !== membersIn(parsed)) refuseDuplicateKeys(route.rpc.input, text);
    return parsed as JsonObject;
  }
}

/** Deeper than any message decodes (protobuf-es stops at 100 nested messages). */
const maxDecodedDepth = 200;

class RestRequestError extends Error {
  constructor(
    message: string,
    readonly status = 400,
    readonly headers: Readonly<Record<string, string>> = {},
  ) {
    super(message);
  }
}

function routesOf(handler: UniversalHandler, maxBodyBytes: number): RestRoute[] {
  return httpBindingsOfMethod(handler.method).map((binding) => {
    if (binding.body !== "" && binding.body !== "*") {
      throw new Error(`${operationName(handler.method)}: body "${binding.body}" is not supported`);
    }
    const template = parsePathTemplate(binding.path);
    const pathFields = new Set(
      template.segments.flatMap((s) => ("fieldPath" in s ? [s.fieldPath.join(".")] : [])),
    );
    const pageSizeField = handler.method.input.fields.find((f) => f.name === "page_size");
    const operation = operationName(handler.method);
    return { httpMethod: binding.method, template, body: binding.body, rpc: handler.method, operation, handler, pathFields, pageSizeField, maxBodyBytes };
  });
}

function findField(message: DescMessage, name: string): DescField | undefined {
  return message.fields.find((f) => f.name === name || f.jsonName === name);
}

/**
 * The query's parameters. A percent-escape that is malformed or no UTF-8 (`%C3%28`) is a 400, as
 * in the path: URLSearchParams read it as U+FFFD, and `automation_id=%C3%28` listed nothing.
 */
function parseQuery(query: string): URLSearchParams {
  if (query.includes("%")) {
    try {
      decodeURIComponent(query);
    } catch {
      throw new RestRequestError("the query has a malformed percent-escape (each is %XX, and together they spell UTF-8)");
    }
  }
  return new URLSearchParams(query);
}

function applyQuery(message: JsonObject, route: RestRoute, query: URLSearchParams): void {
  if (route.body === "*") {
    if ([...query.keys()].length > 0) {
      throw new RestRequestError(`${route.httpMethod} ${route.template.source} takes its fields in the body, not the query`);
    }
    return;
  }
  const grouped = new Map<string, string[]>();
  for (const [name, value] of query) {
    const values = grouped.get(name) ?? [];
    values.push(value);
    grouped.set(name, values);
  }
  /** The name each field was given under: `page_size` and `pageSize` are one field, given once. */
  const givenAs = new Map<string, string>();
  for (const [name, values] of grouped) {
    const fieldPath = name.split(".");
    const field = protoPath(route.rpc.input, fieldPath);
    if (route.pathFields.has(field)) {
      throw new RestRequestError(`query parameter ${name} is already given by the path`);
    }
    const earlier = givenAs.get(field);
    if (earlier !== undefined) {
      throw new RestRequestError(`query parameters ${earlier} and ${name} name the same field; give it once`);
    }
    givenAs.set(field, name);
    setField(message, route.rpc.input, fieldPath, values, "query");
  }
}

/** The dotted proto-name path of a (proto- or JSON-named) field path, for comparisons. */
function protoPath(message: DescMessage, fieldPath: readonly string[]): string {
  return dottedPath(message, fieldPath, "name");
}

/** A (proto- or JSON-named) field path written with each field's proto or JSON name. */
function dottedPath(message: DescMessage, fieldPath: readonly string[], naming: "name" | "jsonName"): string {
  const names: string[] = [];
  let current: DescMessage | undefined = message;
  for (const part of fieldPath) {
    const field: DescField | undefined = current === undefined ? undefined : findField(current, part);
    names.push(field?.[naming] ?? part);
    current = field?.fieldKind === "message" ? field.message : undefined;
  }
  return names.join(".");
}

/** Sets the field at `fieldPath` in the proto3 JSON object, converting text to its JSON form. */
function setField(
  root: JsonObject,
  message: DescMessage,
  fieldPath: readonly string[],
  raw: string | readonly string[],
  source: "path" | "query",
): void {
  let target = root;
  let descriptor = message;
  const shown = fieldPath.join(".");
  for (let i = 0; i < fieldPath.length; i++) {
    const field = findField(descriptor, fieldPath[i] ?? "");
    if (field === undefined) {
      throw new RestRequestError(`unknown ${source} parameter ${shown}`);
    }
    if (i < fieldPath.length - 1) {
      if (field.fieldKind !== "message") throw new RestRequestError(`${source} parameter ${shown} is not a message field`);
      const next = moveToJsonName(target, field);
      if (next !== undefined && (typeof next !== "object" || Array.isArray(next))) {
        // `{"app": "x"}` on POST /api/v1/apps/{app.id}: a wrong type, which Connect's decoder refuses too.
        throw new RestRequestError(`field ${dottedPath(message, fieldPath.slice(0, i + 1), "jsonName")} must be a JSON object, not ${jsonKind(next)}`);
      }
      const child: JsonObject = next ?? {};
      target[field.jsonName] = child;
      target = child;
      descriptor = field.message;
      continue;
    }
    // The path's value replaces the body's, under either name (as gRPC-gateway's does).
    if (source === "path") moveToJsonName(target, field);
    const values = typeof raw === "string" ? [raw] : raw;
    if (field.fieldKind === "list") {
      if (field.listKind === "message") throw new RestRequestError(`${source} parameter ${shown} cannot be set from text`);
      target[field.jsonName] = values.map((v) => textToJson(field.listKind === "enum" ? "enum" : field.scalar, v));
      return;
    }
    if (values.length > 1) throw new RestRequestError(`${source} parameter ${shown} is given more than once`);
    const value = values[0] ?? "";
    // `?page_size=` (a form or SDK that writes unset fields empty): the field's default, as an
    // absent one, like the empty `page_token=` that asks for the first page (spec 4.3 rule 4).
    const textual = field.fieldKind === "scalar" && (field.scalar === ScalarType.STRING || field.scalar === ScalarType.BYTES);
    if (value === "" && (field.fieldKind === "enum" || (field.fieldKind === "scalar" && !textual))) return;
    if (field.fieldKind === "scalar" && numericScalars.has(field.scalar) && !decimalNumber.test(value)) {
      // protobuf-es reads numbers with Number(), which takes 0x10 and 0b11 too; proto3 JSON does not.
      throw new RestRequestError(`${source} parameter ${shown} is not a decimal number: ${value.slice(0, 64)}`);
    }
    if (field.fieldKind === "scalar") target[field.jsonName] = textToJson(field.scalar, value);
    else if (field.fieldKind === "enum") target[field.jsonName] = textToJson("enum", value);
    else if (field.fieldKind === "message" && field.message.typeName.startsWith("google.protobuf.")) {
      // Well-known types whose JSON form is a string: Timestamp, Duration, FieldMask, wrappers.
      target[field.jsonName] = value;
    } else throw new RestRequestError(`${source} parameter ${shown} cannot be set from text`);
    return;
  }
}

/**
 * The value the body gives `field` under its JSON or its proto name, moved to the JSON name (so
 * the path's value set there replaces it, not stands beside it); undefined when absent or null
 * (proto3 JSON's "unset"). Both names given: left for the decoder, which refuses a field set twice.
 */
function moveToJsonName(target: JsonObject, field: DescField): JsonValue | undefined {
  if (field.name !== field.jsonName && field.name in target && !(field.jsonName in target)) {
    target[field.jsonName] = target[field.name] ?? null;
    delete target[field.name];
  }
  return target[field.jsonName] ?? undefined;
}

function jsonKind(value: JsonValue): string {
  if (Array.isArray(value)) return "an array";
  return typeof value === "string" ? "a string" : typeof value === "number" ? "a number" : typeof value === "boolean" ? "a boolean" : "null";
}

/**
 * A JSON body may give a field twice (`{"userId":"a","userId":"b"}`): JSON.parse keeps the last
 * silently, while Connect's decoder refuses it. REST refuses it too, with protobuf-es's own check
 * (its string decoder; the message it builds is thrown away, the handler decodes the assembled one).
 */
function refuseDuplicateKeys(input: DescMessage, text: string): void {
  try {
    fromJsonString(input, text, { ignoreUnknownFields: true });
  } catch (e) {
    const message = (e as Error).message;
    if (message.includes("duplicate object key")) throw new RestRequestError(message);
    // Any other fault of the body is the handler's to name, in its own words.
  }
}

const numericScalars = new Set([
  ScalarType.INT32, ScalarType.INT64, ScalarType.UINT32, ScalarType.UINT64, ScalarType.SINT32, ScalarType.SINT64,
  ScalarType.FIXED32, ScalarType.FIXED64, ScalarType.SFIXED32, ScalarType.SFIXED64, ScalarType.FLOAT, ScalarType.DOUBLE,
]);

/** A number as proto3 JSON writes one in a string: decimal, with a fraction and an exponent, or NaN and the infinities. */
const decimalNumber = /^(-?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?|NaN|-?Infinity)$/;

const int32Max = 2 ** 31 - 1;
const int32Min = -(2 ** 31);

/**
 * Spec 4.3: a `page_size` above 100 returns 100 items, below 10 returns 10, whatever the integer.
 * The contract's field is an int32, so an integer beyond its range (`?page_size=99999999999`)
 * would be refused by the decoder; REST callers get it clamped like any other large size. Not a
 * number, or not an integer: left for the decoder to refuse.
 */
function clampPageSizeToInt32(message: JsonObject, field: DescField): void {
  for (const key of new Set([field.jsonName, field.name])) {
    const given = message[key];
    // A number, or the text of one (the query's, or a JSON string): 1e999 and 400 nines are
    // integers too, however JSON.parse and Number round them (to Infinity).
    const value = typeof given === "string" && /^-?\d+(\.\d+)?([eE][+-]?\d+)?$/.test(given) ? Number(given) : given;
    if (typeof value !== "number" || !(Number.isInteger(value) || value === Infinity || value === -Infinity)) continue;
    if (value > int32Max) message[key] = int32Max;
    else if (value < int32Min) message[key] = int32Min;
  }
}

/**
 * Text from a URL -> the proto3 JSON value protobuf-es parses. Numbers stay strings (proto3 JSON
 * accepts "25" for an int32, and the parser refuses "abc" with a message naming the field).
 */
function textToJson(type: ScalarType | "enum", text: string): JsonValue {
  if (type === ScalarType.BOOL) {
    if (text === "true" || text === "1") return true;
    if (text === "false" || text === "0") return false;
    return text;
  }
  if (type === "enum" && /^-?\d+$/.test(text)) return Number(text);
  return text;
}

/**
 * The request's headers as the Connect handler gets them: the body's framing and encoding are
 * the transcoder's (the JSON is rewritten, and completed on the way back, so it stays plain), and
 * Connect's and gRPC's own headers are not REST's (`Connect-Timeout-Ms: abc` was a 400 "protocol
 * error").
 */
function forwardedHeaders(req: NodeRequest): Headers {
  const header = new Headers();
  for (const [name, value] of Object.entries(req.headers)) {
    if (name.startsWith(":") || value === undefined) continue;
    if (name === "content-length" || name === "content-encoding" || name === "transfer-encoding" || name === "accept-encoding") continue;
    if (name.startsWith("connect-") || name.startsWith("grpc-")) continue;
    header.set(name, Array.isArray(value) ? value.join(", ") : value);
  }
  header.set("content-type", "application/json");
  return header;
}

/** Whether the client closed the connection or reset the stream (HTTP/2) before its answer. */
function clientGone(res: NodeResponse): boolean {
  return res instanceof Http2ServerResponse ? res.stream.destroyed : res.destroyed;
}
