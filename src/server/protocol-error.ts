import { Http2ServerResponse } from "node:http2";
import type { Code } from "@connectrpc/connect";
import { writeJsonError } from "./json-error.js";
import type { NodeRequest, NodeResponse } from "./node-http.js";
import { codeName, httpStatusOf, noteAnsweredCode } from "./outcome-codes.js";
import type { WireProtocol } from "./request-context.js";

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

/**
 * The longest `grpc-message` sent, in bytes once percent-encoded. A message may quote what the
 * client sent (an `updateMask` path, a CIDR, an unknown JSON key), and a header block has limits:
 * Node's HTTP/2 cannot send one much over 64 KB (a 100,000-character mask reached the client as a
 * reset stream, `internal`, not its INVALID_ARGUMENT), and gRPC's C core (Python, C++, Ruby...)
 * and grpc-java refuse metadata over 8 KiB (a NOT_FOUND quoting 900 CJK characters, 9 bytes each
 * encoded, reached a Python client as RESOURCE_EXHAUSTED). 4 KiB leaves the other headers room.
 * Connect and REST carry the message in the body, whole.
 */
const maxGrpcMessageBytes = 4_096;

/**
 * `text` as the gRPC spec's `grpc-message`: UTF-8, `%` and bytes outside 0x20-0x7E
 * percent-encoded; at most maxGrpcMessageBytes, cut at a character and saying how much was left out.
 */
export function grpcMessageHeader(text: string): string {
  // Each character takes at least a byte: a longer text is cut without encoding it whole.
  if (text.length <= maxGrpcMessageBytes) {
    const whole = percentEncoded(text);
    if (whole.length <= maxGrpcMessageBytes) return whole;
  }
  const reserve = 48; // for "… (N more characters)", encoded
  let spelled = "";
  let kept = 0;
  for (const character of text) {
    const next = percentEncoded(character);
    if (spelled.length + next.length > maxGrpcMessageBytes - reserve) break;
    spelled += next;
    kept += character.length;
  }
  return spelled + percentEncoded(`… (${text.length - kept} more characters)`);
}

function percentEncoded(text: string): string {
  let spelled = "";
  for (const byte of Buffer.from(text, "utf8")) {
    spelled += byte >= 0x20 && byte <= 0x7e && byte !== 0x25 ? String.fromCharCode(byte) : `%${byte.toString(16).toUpperCase().padStart(2, "0")}`;
  }
  return spelled;
}
