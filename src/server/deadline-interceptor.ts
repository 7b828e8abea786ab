import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
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
 * The call's timeout as its client sent it, in ms, in its protocol's own header: gRPC's (and
 * gRPC-Web's) `grpc-timeout`, Connect's `connect-timeout-ms`; the other protocol's header, left
 * on a request by a proxy, say, is none of its business (connect-es reads only its own).
 */
function clientTimeoutMs(protocol: WireProtocol, header: Headers): number | undefined {
  if (protocol === "grpc" || protocol === "grpc-web") {
    const match = /^(\d{1,8})([HMSmun])$/.exec(header.get("grpc-timeout") ?? "");
    return match === null ? undefined : Number(match[1]) * grpcTimeoutUnitMs[match[2] as keyof typeof grpcTimeoutUnitMs];
  }
  const connect = protocol === "connect" ? header.get("connect-timeout-ms") : null;
  return connect !== null && /^\d{1,10}$/.test(connect) ? Number(connect) : undefined;
}

const grpcTimeoutUnitMs = { H: 3_600_000, M: 60_000, S: 1_000, m: 1, u: 0.001, n: 0.000001 };
