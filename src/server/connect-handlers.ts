import type { UniversalHandler, UniversalServerRequest, UniversalServerResponse } from "@connectrpc/connect/protocol";
import { Code, ConnectError, createConnectRouter, createContextValues, type ConnectRouter, type Interceptor } from "@connectrpc/connect";
import {
  compressionBrotli,
  compressionGzip,
  universalRequestFromNodeRequest,
  universalResponseToNodeResponse,
} from "@connectrpc/connect-node";
import type { VerifiedToken } from "../auth/access-tokens.js";
import type { Logger } from "../logger.js";
import { asApiRefusal, refusalWithCode } from "./connect-refusals.js";
import { writeJsonError } from "./json-error.js";
import { discardBody } from "./read-body.js";
import { isHttp2Request, type NodeRequest, type NodeResponse } from "./node-http.js";
import { noteAnsweredCode } from "./outcome-codes.js";
import { grpcMessageHeader } from "./protocol-error.js";
import { operationName } from "./operation-name.js";
import { requestFactsKey, type RequestFacts } from "./request-context.js";

export interface ConnectHandlersOptions {
  interceptors: Interceptor[];
  maxBodyBytes: number;
  routes: (router: ConnectRouter) => void;
  log: Logger;
  /**
   * Checks the request's bearer token before its body is read (`verifyBearer`), for routers whose
   * calls all need one: a call refused so is handed to connect-es with an empty request message,
   * its body thrown away undecoded (`RequestFacts.bearer`).
   */
  checkBearer?: (authorization: string | null) => Promise<VerifiedToken | ConnectError>;
}

/**
 * The Connect router's universal handlers (gRPC, gRPC-Web and Connect for every registered RPC),
 * indexed by request path, plus the Node glue that serves them.
 */
export class ConnectHandlers {
  readonly handlers: readonly UniversalHandler[];
  private readonly byPath: Map<string, UniversalHandler>;
  /** Each RPC's operation name (`package.Service.Method`) by request path, built once. */
  private readonly operations: Map<string, string>;

  constructor(private readonly options: ConnectHandlersOptions) {
    const router = createConnectRouter({
      interceptors: options.interceptors,
      readMaxBytes: options.maxBodyBytes,
      acceptCompression: [compressionGzip, compressionBrotli],
      // An unknown JSON field is a 400 that names it: silently dropping `userID` hides typos.
      jsonOptions: { ignoreUnknownFields: false },
    });
    options.routes(router);
    // A method registered again on its own (with options of its own, such as a smaller body limit)
    // takes the place of the one its service registered, in the router's order.
    this.handlers = [...new Map(router.handlers.map((h) => [h.requestPath, h])).values()];
    this.byPath = new Map(this.handlers.map((h) => [h.requestPath, h]));
    this.operations = new Map(this.handlers.map((h) => [h.requestPath, operationName(h.method)]));
  }

  /** Every RPC's operation name (`package.Service.Method`). */
  operationNames(): IterableIterator<string> {
    return this.operations.values();
  }

  /** The operation (`package.Service.Method`) the path names, if it names an RPC (`/package.Service/Method`). */
  operationOf(path: string): string | undefined {
    return this.operations.get(path);
  }

  async handle(req: NodeRequest, res: NodeResponse, path: string, facts: RequestFacts): Promise<void> {
    const handler = this.byPath.get(path);
    if (handler === undefined) {
      writeJsonError(res, Code.NotFound, `no procedure ${path}`);
      return;
    }
    // HTTP/1.0 may leave Host out, and connect-es builds the request's URL from it: it threw
    // ("unable to determine request authority"), a 500 and an error line for anyone.
    if (!isHttp2Request(req) && req.headers.host === undefined) req.headers.host = "localhost";
    let uReq = universalRequestFromNodeRequest(
      req,
      res,
      undefined,
      createContextValues().set(requestFactsKey, facts),
    );
    if (!isHttp2Request(req)) uReq = { ...uReq, body: bodyKeptOnReturn(req) };
    if (this.options.checkBearer !== undefined) {
      facts.bearer = await this.options.checkBearer(uReq.header.get("authorization"));
      if (facts.bearer instanceof ConnectError) uReq = await withEmptyMessage(uReq, req, this.options.maxBodyBytes);
    }
    uReq = withUtf8JsonBody(uReq);

    try {
      let uRes = await asApiRefusal(await handler(uReq), path);
      // Answered already: the request deadline cut the body with 408 while connect-es read it.
      if (res.headersSent) return;
      if (facts.observed !== true) {
        // Refused before the interceptors (they count and log every call they see): its code, for
        // the HTTP layer's count and line.
        const refusal = await refusalWithCode(uRes);
        uRes = refusal.response;
        if (refusal.code !== undefined) noteAnsweredCode(res, refusal.code);
      }
      const respelled = facts.protocol === "grpc" ? withSpecGrpcMessage(uRes) : facts.protocol === "grpc-web" ? withSpecGrpcWebMessage(uRes) : uRes;
      await universalResponseToNodeResponse(respelled, res);
    } catch (e) {
      if (ConnectError.from(e).code === Code.Aborted) return; // the client went away
      this.options.log.error({ err: e, procedure: path }, "writing the response failed");
    }
  }
}

/**
 * The gRPC response with its `grpc-message` percent-encoded as the gRPC spec says (only `%` and
 * bytes outside 0x20-0x7E), instead of connect-es's `encodeURIComponent`, which also encodes
 * spaces, `:`, `/`, `,` and the like. Both are valid, but grpc-js decodes the message with
 * `decodeURI`, which leaves `%3A`, `%2F`, `%2C`... in place: its users read
 * `missing bearer token%3A send Authorization%3A Bearer ...`. The message sits in the headers of
 * a trailers-only answer, otherwise in the trailers, which are filled once the body is sent.
 */
function withSpecGrpcMessage(response: UniversalServerResponse): UniversalServerResponse {
  respellGrpcMessage(response.header);
  const { body, trailer } = response;
  if (trailer === undefined) return response;
  if (body === undefined || body instanceof Uint8Array) {
    respellGrpcMessage(trailer);
    return response;
  }
  return {
    ...response,
    body: (async function* () {
      yield* body;
      respellGrpcMessage(trailer);
    })(),
  };
}

/**
 * The gRPC-Web response with its `grpc-message` spelled as withSpecGrpcMessage spells it. gRPC-Web
 * sends the trailers in the body, as a last frame (flags 0x80, its length, then `name: value`
 * lines): protobuf-ts's gRPC-Web transport, which does not decode the message, showed its users
 * `app%20%22nope%22%20not%20found`. A trailers-only answer has it in the headers.
 */
function withSpecGrpcWebMessage(response: UniversalServerResponse): UniversalServerResponse {
  respellGrpcMessage(response.header);
  const { body } = response;
  if (body === undefined) return response;
  return {
    ...response,
    body: (async function* () {
      for await (const chunk of body) yield withRespelledTrailerFrame(chunk);
    })(),
  };
}

/** `chunk` with the `grpc-message` of a gRPC-Web trailer frame in it respelled; as it is when it holds no whole frames. */
function withRespelledTrailerFrame(chunk: Uint8Array): Uint8Array {
  const frames: Uint8Array[] = [];
  let changed = false;
  for (let offset = 0; offset < chunk.length; ) {
    if (offset + 5 > chunk.length) return chunk;
    const length = new DataView(chunk.buffer, chunk.byteOffset + offset + 1, 4).getUint32(0);
    const end = offset + 5 + length;
    if (end > chunk.length) return chunk;
    const frame = chunk.subarray(offset, end);
    const flags = chunk[offset] ?? 0;
    const respelled = flags & 0x80 ? respelledTrailerFrame(frame) : frame;
    changed ||= respelled !== frame;
    frames.push(respelled);
    offset = end;
  }
  return changed ? Buffer.concat(frames) : chunk;
}

function respelledTrailerFrame(frame: Uint8Array): Uint8Array {
  const block = Buffer.from(frame.subarray(5)).toString("latin1");
  const lines = block.split("\r\n").map((line) => {
    const match = /^grpc-message:\s*(.*)$/i.exec(line);
    return match === null ? line : `grpc-message: ${specGrpcMessage(match[1] ?? "")}`;
  });
  const respelled = Buffer.from(lines.join("\r\n"), "latin1");
  if (respelled.equals(frame.subarray(5))) return frame;
  const header = Buffer.alloc(5);
  header[0] = frame[0] ?? 0x80;
  header.writeUInt32BE(respelled.length, 1);
  return Buffer.concat([header, respelled]);
}

function respellGrpcMessage(headers: Headers | undefined): void {
  const message = headers?.get("grpc-message");
  if (message === null || message === undefined) return;
  headers?.set("grpc-message", specGrpcMessage(message));
}

/** A `grpc-message` connect-es encoded, encoded as the gRPC spec has it; as it is when it is not connect-es's encoding. */
function specGrpcMessage(message: string): string {
  try {
    return grpcMessageHeader(decodeURIComponent(message));
  } catch {
    return message;
  }
}

/**
 * An HTTP/1.1 request's body for connect-es, read without destroying the request when its reader
 * stops early. connect-es stops reading a gRPC-Web envelope that announces more than readMaxBytes
 * (1 MiB), and connect-node's own iterable then destroyed the request, which destroys the socket
 * with the rest of the body unread: the next request on the keep-alive connection was reset
 * (5 of 6 times). Left alone, the rest is read and thrown away once the answer is out
 * (enforceDeadlines), as REST and Connect unary refusals are.
 */
async function* bodyKeptOnReturn(req: NodeRequest): AsyncGenerator<Uint8Array> {
  for await (const chunk of req.iterator({ destroyOnReturn: false })) yield chunk as Uint8Array;
}

/** An empty request message: JSON `{}` or no bytes, as such, or in one envelope (flags 0, its length, the message). */
const emptyJson = new TextEncoder().encode("{}");
const emptyProto = new Uint8Array(0);
const emptyJsonEnvelope = new Uint8Array([0, 0, 0, 0, emptyJson.length, ...emptyJson]);
const emptyProtoEnvelope = new Uint8Array(5);

/**
 * `uReq` with an empty request message in place of the body its client sent, which is read and
 * thrown away first (`discardBody`), and without the body's `Content-Encoding` and
 * `Content-Length` (the empty message is not compressed; a gRPC envelope says so itself). The
 * call then runs through the interceptors as any other, which refuse it (`RequestFacts.bearer`),
 * count and log it, in its protocol's answer.
 */
async function withEmptyMessage(uReq: UniversalServerRequest, req: NodeRequest, limit: number): Promise<UniversalServerRequest> {
  await discardBody(req, limit);
  const contentType = uReq.header.get("content-type") ?? "";
  const json = /json/i.test(contentType);
  const enveloped = /^application\/(grpc|connect\+)/i.test(contentType);
  const body = enveloped ? (json ? emptyJsonEnvelope : emptyProtoEnvelope) : json ? emptyJson : emptyProto;
  const header = new Headers(uReq.header);
  header.delete("content-encoding");
  header.delete("content-length"); // connect-es holds a body to the length it was sent with
  return {
    ...uReq,
    header,
    body: (async function* () {
      yield body;
    })(),
  };
}

/**
 * `uReq` whose body, a Connect unary JSON one as sent (not compressed), is refused with
 * `invalid_argument` as soon as it is no UTF-8: connect-es's JSON decoding (a TextDecoder that is
 * not fatal) read such bytes as U+FFFD, and a Latin-1 "Café" was stored as "Caf\uFFFD", where
 * REST refuses it.
 */
function withUtf8JsonBody(uReq: UniversalServerRequest): UniversalServerRequest {
  const contentType = uReq.header.get("content-type") ?? "";
  const encoding = uReq.header.get("content-encoding");
  const body = uReq.body;
  if (!/^application\/json\s*(;|$)/i.test(contentType) || (encoding !== null && encoding.trim().toLowerCase() !== "identity")) return uReq;
  if (typeof body !== "object" || body === null || !(Symbol.asyncIterator in body)) return uReq;
  const notUtf8 = () => new ConnectError("request body is not valid UTF-8", Code.InvalidArgument);
  return {
    ...uReq,
    body: (async function* () {
      const decoder = new TextDecoder("utf-8", { fatal: true });
      for await (const chunk of body as AsyncIterable<Uint8Array>) {
        try {
          decoder.decode(chunk, { stream: true });
        } catch {
          throw notUtf8();
        }
        yield chunk;
      }
      try {
        decoder.decode();
      } catch {
        throw notUtf8();
      }
    })(),
  };
}
