import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { parseTimeout as parseConnectTimeout } from "@connectrpc/connect/protocol-connect";
import { parseTimeout as parseGrpcTimeout } from "@connectrpc/connect/protocol-grpc";
import { requestFactsKey, type WireProtocol } from "./request-context.js";

/**
 * A call whose client's deadline (`grpc-timeout`, `connect-timeout-ms`) has passed by the time its
 * handler would begin is not run: DEADLINE_EXCEEDED, which its client was going to read anyway.
 * connect-es aborts the call's signal at the deadline, but a handler that does not look at it ran
 * to the end: `connect-timeout-ms: 0` on a Create answered 200 and created the app. Its timer has
 * not fired yet for a deadline that passed a moment ago (`grpc-timeout: 1n`, `1u`, `1m` created
 * the app while the client read DEADLINE_EXCEEDED), so the deadline is also read from the header,
 * counted from the request's arrival. A handler that has begun runs to its end (the store's work
 * is short and not cut halfway).
 */
export function passedDeadlineInterceptor(): Interceptor {
  return (next) => async (req) => {
    if (req.signal.aborted) {
      const reason = ConnectError.from(req.signal.reason);
      if (reason.code === Code.DeadlineExceeded) throw reason;
    }
    const { receivedAt, protocol } = req.contextValues.get(requestFactsKey);
    const timeoutMs = clientTimeoutMs(protocol, req.header);
    if (receivedAt !== undefined && timeoutMs !== undefined && performance.now() - receivedAt >= timeoutMs) {
      throw new ConnectError("the operation timed out", Code.DeadlineExceeded);
    }
    return next(req);
  };
}

/**
 * The call's timeout as its client sent it, in ms, in its protocol's own header (read by
 * connect-es's own parsers): gRPC's (and gRPC-Web's) `grpc-timeout`, Connect's
 * `connect-timeout-ms`; the other protocol's header, left on a request by a proxy, say, is none
 * of its business (connect-es reads only its own). A malformed one is connect-es's to refuse.
 */
function clientTimeoutMs(protocol: WireProtocol, header: Headers): number | undefined {
  if (protocol === "grpc" || protocol === "grpc-web") return parseGrpcTimeout(header.get("grpc-timeout"), Number.MAX_SAFE_INTEGER).timeoutMs;
  if (protocol === "connect") return parseConnectTimeout(header.get("connect-timeout-ms"), Number.MAX_SAFE_INTEGER).timeoutMs;
  return undefined;
}
