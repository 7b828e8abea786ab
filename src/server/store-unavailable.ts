import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { isStoreUnavailable } from "../store/store-errors.js";

/** What a client is told when the store fails: the request was fine, the service cannot serve it now. */
export const storeUnavailableMessage = "the store is unavailable (disk full, locked or failing); retry later";

/** The Retry-After (seconds) sent with a store failure's 503. */
const storeRetryAfterSeconds = 5;

export const storeUnavailableHeaders = { "retry-after": String(storeRetryAfterSeconds) } as const;

/**
 * Turns a store failure thrown by a handler (or by the authorization interceptor's reads) into
 * UNAVAILABLE (HTTP 503, gRPC status 14, which gRPC clients may retry) instead of an internal
 * error. The SQLite error stays attached as the cause, for the log line. Every failure is shown
 * to `noteFailure` (the store's noteDamage: a damaged file makes the server unready).
 */
export function storeUnavailableInterceptor(noteFailure: (error: unknown) => void = () => {}): Interceptor {
  return (next) => async (req) => {
    try {
      return await next(req);
    } catch (e) {
      noteFailure(e);
      if (!isStoreUnavailable(e)) throw e;
      throw new ConnectError(storeUnavailableMessage, Code.Unavailable, storeUnavailableHeaders, undefined, e);
    }
  };
}
