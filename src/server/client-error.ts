import { STATUS_CODES } from "node:http";
import type { Duplex } from "node:stream";
import { Code } from "@connectrpc/connect";
import { codeName } from "./outcome-codes.js";

/** How a request Node's HTTP/1.1 parser refused (its `clientError`) is answered: status, code, message. */
function refusalOf(errorCode: string | undefined): { status: number; code: Code; message: string } {
  switch (errorCode) {
    case "HPE_HEADER_OVERFLOW":
      return { status: 431, code: Code.ResourceExhausted, message: "the request headers are too large" };
    case "HPE_CHUNK_EXTENSIONS_OVERFLOW":
      return { status: 413, code: Code.ResourceExhausted, message: "the chunk extensions are too large" };
    case "ERR_HTTP_REQUEST_TIMEOUT":
      return { status: 408, code: Code.DeadlineExceeded, message: "the request was not received in time" };
    default:
      return { status: 400, code: Code.InvalidArgument, message: "malformed HTTP request" };
  }
}

/**
 * Answers a request that Node's parser refused (control characters in a header, a bad
 * Content-Length, broken chunking, ...) with the API's JSON error shape instead of Node's bare
 * `400 Bad Request`, then closes the connection. When a response on that socket has already
 * started, writing another would corrupt it, so the socket is only destroyed.
 */
export function answerClientError(error: Error & { code?: string }, socket: Duplex, responseStarted: boolean): void {
  if (error.code === "ECONNRESET" || responseStarted || !socket.writable) {
    socket.destroy();
    return;
  }
  const { status, code, message } = refusalOf(error.code);
  const body = JSON.stringify({ code: codeName(code), message });
  socket.end(
    `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? ""}\r\n` +
      "content-type: application/json\r\n" +
      `content-length: ${Buffer.byteLength(body)}\r\n` +
      "connection: close\r\n\r\n" +
      body,
  );
  socket.once("finish", () => socket.destroy());
}
