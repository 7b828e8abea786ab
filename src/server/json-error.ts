import type { IncomingMessage, ServerResponse } from "node:http";
import { constants as http2Constants, Http2ServerRequest, Http2ServerResponse } from "node:http2";
import { Code, ConnectError } from "@connectrpc/connect";
import { codeFromString, codeToHttpStatus, codeToString } from "@connectrpc/connect/protocol-connect";
import type { WireProtocol } from "./request-context.js";

export type NodeRequest = IncomingMessage | Http2ServerRequest;
export type NodeResponse = ServerResponse | Http2ServerResponse;

/**
 * True for a request that came over HTTP/2 (a stream of a session), false for one from Node's
 * HTTP/1 parser. Not `httpVersionMajor !== 1`: that parser also hands over request lines that say
 * HTTP/0.9 (`GET /` alone) or HTTP/2.0, and such a request has a socket, not a stream.
 */
export function isHttp2Request(req: NodeRequest): req is Http2ServerRequest {
  return req instanceof Http2ServerRequest;
}

/**
 * A code's name as the JSON error shape and the metrics write it (`not_found`), and the HTTP
 * status Connect pairs with it (connectrpc.com/docs/protocol#error-codes): connect-es's own
 * tables, so accessd's refusals and connect-es's answers never disagree.
 */
export const codeName: (code: Code) => string = codeToString;
export const httpStatusOf: (code: Code) => number = codeToHttpStatus;

/** The code a Connect code name (`not_found`) stands for; Unknown for a name that is none. */
export function codeOfName(name: string): Code {
  return codeFromString(name) ?? Code.Unknown;
}

/**
 * The code an RPC that failed is logged and counted under. Once its client went away (its request
 * signal aborted) that is the reason the signal gives, `canceled` for a reset or a closed
 * connection, whatever error the handler met on its way out: connect-es reported a Watch stream
 * reset before its request message arrived as `unimplemented` ("missing input message").
 */
export function outcomeCodeName(error: unknown, signal: AbortSignal): string {
  // A response stream the client closed before its end (an HTTP/2 reset, a dropped session): its
  // going away can reach the handler as "Premature close" before the signal aborts.
  const prematureClose = (e: unknown): boolean => (e as { code?: unknown } | undefined)?.code === "ERR_STREAM_PREMATURE_CLOSE";
  if (prematureClose(error) || prematureClose((error as { cause?: unknown } | undefined)?.cause)) return codeName(Code.Canceled);
  return codeName(ConnectError.from(signal.aborted ? signal.reason : error).code);
}

/** The code each response was answered with, where no interceptor saw it (see `answeredCodeOf`). */
const answeredCodes = new WeakMap<NodeResponse, string>();

/** Notes the outcome code of an answer that no interceptor counted (a refusal before the handler). */
export function noteAnsweredCode(res: NodeResponse, code: Code): void {
  answeredCodes.set(res, codeName(code));
}

/**
 * The outcome code of an answered response, for the metrics and the log of an answer no
 * interceptor saw: the code noted for it (`writeJsonError` notes every error it writes), `ok` for
 * a success, `canceled` when the answer was not `answered` in full (the client left), else
 * `unknown`.
 */
export function answeredCodeOf(res: NodeResponse, answered: boolean): string {
  const noted = answeredCodes.get(res);
  if (noted !== undefined) return noted;
  if (!answered) return "canceled";
  return res.statusCode >= 200 && res.statusCode < 300 ? "ok" : "unknown";
}

/**
 * Writes Connect's JSON error shape, `{"code": "...", "message": "..."}`. The status defaults to
 * the one Connect pairs with the code; routes outside Connect (REST 405/413/415, webhooks) pass
 * their own.
 */
export function writeJsonError(
  res: NodeResponse,
  code: Code,
  message: string,
  status: number = httpStatusOf(code),
  headers: Record<string, string> = {},
): void {
  if (res.headersSent) {
    // An answer already complete (the request deadline's 408, say) stands. One cut short is
    // aborted; over HTTP/2 with CANCEL: a NO_ERROR reset (what destroy() sends) leaves a Node
    // client that still has body to send waiting for good.
    if (res.writableEnded) return;
    if (res instanceof Http2ServerResponse) res.stream.close(http2Constants.NGHTTP2_CANCEL);
    else res.destroy();
    return;
  }
  const body = JSON.stringify({ code: codeName(code), message });
  noteAnsweredCode(res, code);
  res.writeHead(status, {
    ...headers,
    "content-type": "application/json",
    "content-length": Buffer.byteLength(body),
  });
  res.end(body);
}

/**
 * 405 for a method a path does not serve, with its `Allow` header. RFC 9110 9.3.2: HEAD goes
 * wherever GET does, the same answer without its body (Node leaves the body out).
 */
export function refuseMethod(res: NodeResponse, method: string | undefined, path: string, allowed: readonly string[]): void {
  const allow = allowed.includes("GET") && !allowed.includes("HEAD") ? [...allowed, "HEAD"] : allowed;
  writeJsonError(res, Code.Unimplemented, `${method ?? ""} is not allowed on ${path}; use ${allow.join(", ")}`, 405, {
    allow: allow.join(", "),
  });
}

/**
 * An error answered before (or instead of) connect-es, in the words of the caller's protocol: a
 * gRPC or gRPC-Web client reads `grpc-status`, not the HTTP status (grpc-js turns an HTTP 408 or
 * 404 into UNKNOWN or UNIMPLEMENTED and loses the message), so those get a trailers-only answer
 * (HTTP 200, `grpc-status` and `grpc-message` in the headers, nothing else); a Connect
 * streaming call an end-of-stream message under HTTP 200; everything else Connect's JSON error
 * shape with `status` (see writeJsonError). `rpcProtocol` is the protocol
 * of a request on an RPC path (RequestFacts.protocol), undefined elsewhere: a webhook or REST
 * request that merely says `application/grpc` gets JSON, never a 200.
 */
export function writeErrorInProtocol(
  req: NodeRequest,
  res: NodeResponse,
  rpcProtocol: WireProtocol | undefined,
  code: Code,
  message: string,
  status: number = httpStatusOf(code),
  headers: Record<string, string> = {},
): void {
  const contentType = req.headers["content-type"] ?? "";
  const connectStreaming = rpcProtocol === "connect" && contentType.toLowerCase().startsWith("application/connect+");
  if (res.headersSent || !(connectStreaming || rpcProtocol === "grpc" || rpcProtocol === "grpc-web")) {
    writeJsonError(res, code, message, status, headers);
    return;
  }
  if (connectStreaming) {
    writeConnectEndStream(res, contentType, code, message, headers);
    return;
  }
  // A stream the client reset (or a connection it closed) takes no answer: respond() would throw.
  if (res instanceof Http2ServerResponse ? res.stream.destroyed || res.stream.closed : res.destroyed) return;
  const trailersOnly: Record<string, string> = {
    ...headers,
    "content-type": contentType || `application/${rpcProtocol}`,
    "grpc-status": String(code),
    "grpc-message": grpcMessageHeader(message),
  };
  noteAnsweredCode(res, code);
  if (res instanceof Http2ServerResponse) {
    // One HEADERS frame with END_STREAM, what gRPC calls trailers-only; respond() writes the
    // headers it is given alone, so those already set on `res` (x-request-id) are added.
    const already = res.getHeaders() as Record<string, string>;
    res.stream.respond({ ...already, ...trailersOnly, ":status": 200 }, { endStream: true });
  } else {
    res.writeHead(200, trailersOnly);
    res.end();
  }
}

/**
 * A Connect streaming call's error: HTTP 200 and one EndStreamResponse frame (flags 0x02, then
 * `{"error": {...}}`), the only place a Connect streaming client looks for it (connect-es reads a
 * non-200 answer's HTTP status instead, and a 408 as `unknown`).
 */
function writeConnectEndStream(res: NodeResponse, contentType: string, code: Code, message: string, headers: Record<string, string>): void {
  const endStream = Buffer.from(JSON.stringify({ error: { code: codeName(code), message } }));
  const frame = Buffer.alloc(5 + endStream.length);
  frame[0] = 0x02;
  frame.writeUInt32BE(endStream.length, 1);
  endStream.copy(frame, 5);
  noteAnsweredCode(res, code);
  res.writeHead(200, { ...headers, "content-type": contentType, "content-length": frame.length });
  res.end(frame);
}

/** `text` as the gRPC spec's `grpc-message`: UTF-8, `%` and bytes outside 0x20-0x7E percent-encoded. */
export function grpcMessageHeader(text: string): string {
  let spelled = "";
  for (const byte of Buffer.from(text, "utf8")) {
    spelled += byte >= 0x20 && byte <= 0x7e && byte !== 0x25 ? String.fromCharCode(byte) : `%${byte.toString(16).toUpperCase().padStart(2, "0")}`;
  }
  return spelled;
}

export function writeJson(res: NodeResponse, status: number, value: unknown, headers: Record<string, string> = {}): void {
  const body = JSON.stringify(value);
  res.writeHead(status, { ...headers, "content-type": "application/json", "content-length": Buffer.byteLength(body) });
  res.end(body);
}
