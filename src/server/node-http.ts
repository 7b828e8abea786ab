import type { IncomingMessage, ServerResponse } from "node:http";
import { Http2ServerRequest, type Http2ServerResponse } from "node:http2";

/** A request or response of either of the server's HTTP stacks (HTTP/1.1 or h2c). */
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
 * Every value of the header `name` (lower case) as sent, joined with ", " (undefined when it is
 * absent). Node's `req.headers` keeps only the first of some headers sent twice (Authorization
 * among them) and drops the rest, where a proxy in front may have read the last.
 */
export function everyValueOf(rawHeaders: readonly string[], name: string): string | undefined {
  let joined: string | undefined;
  for (let i = 0; i < rawHeaders.length; i += 2) {
    if ((rawHeaders[i] ?? "").toLowerCase() === name) {
      const value = rawHeaders[i + 1] ?? "";
      joined = joined === undefined ? value : `${joined}, ${value}`;
    }
  }
  return joined;
}
