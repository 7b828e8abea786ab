import { constants as http2Constants, Http2ServerResponse } from "node:http2";
import { Code } from "@connectrpc/connect";
import type { NodeResponse } from "./node-http.js";
import { codeName, httpStatusOf, noteAnsweredCode } from "./outcome-codes.js";

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
  const allow = allowed.includes("HEAD") ? allowed : allowed.flatMap((m) => (m === "GET" ? ["GET", "HEAD"] : [m]));
  writeJsonError(res, Code.Unimplemented, `${method ?? ""} is not allowed on ${path}; use ${allow.join(", ")}`, 405, {
    allow: allow.join(", "),
  });
}

export function writeJson(res: NodeResponse, status: number, value: unknown, headers: Record<string, string> = {}): void {
  const body = JSON.stringify(value);
  res.writeHead(status, { ...headers, "content-type": "application/json", "content-length": Buffer.byteLength(body) });
  res.end(body);
}
