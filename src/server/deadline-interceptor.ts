import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";

/**
 * A call whose client's deadline (`grpc-timeout`, `connect-timeout-ms`) has passed by the time its
 * handler would begin is not run: DEADLINE_EXCEEDED, which its client was going to read anyway.
 * connect-es aborts the call's signal at the deadline, but a handler that does not look at it ran
 * to the end: `connect-timeout-ms: 0` on a Create answered 200 and created the app. A handler
 * that has begun runs to its end (the store's work is short and not cut halfway).
 */
export function passedDeadlineInterceptor(): Interceptor {
  return (next) => async (req) => {
    if (req.signal.aborted) {
      const reason = ConnectError.from(req.signal.reason);
      if (reason.code === Code.DeadlineExceeded) throw reason;
    }
    return next(req);
  };
}
