import { Code } from "@connectrpc/connect";
import { type NodeRequest, type NodeResponse, writeJsonError } from "./json-error.js";

/**
 * Cuts a request whose body has not fully arrived `timeoutMs` after its headers (a client that
 * stalls or trickles the body): 408 with the JSON error shape if no response has started, then
 * the request is destroyed, which frees the handler waiting on the body and the connection.
 *
 * Node's own `requestTimeout` is enforced by a periodic check an http.Server starts when it
 * listens; httpolyglot's inner HTTP/1.1 server never listens itself, so that check never runs,
 * and http2 servers have no such timeout at all. This covers both.
 */
export function enforceRequestDeadline(req: NodeRequest, res: NodeResponse, timeoutMs: number): void {
  const timer = setTimeout(() => {
    if (req.complete) return;
    const http1 = req.httpVersionMajor === 1;
    if (res.headersSent) {
      req.destroy();
      return;
    }
    res.once("finish", () => req.destroy());
    writeJsonError(
      res,
      Code.DeadlineExceeded,
      `the request body did not arrive within ${timeoutMs} ms`,
      408,
      http1 ? { connection: "close" } : {},
    );
  }, timeoutMs);
  timer.unref();
  res.once("close", () => clearTimeout(timer));
}
