import type { Interceptor } from "@connectrpc/connect";
import type { Logger } from "../logger.js";
import { callWithOutcome } from "./call-outcome.js";
import { isMalformedRequestMessage } from "./connect-refusals.js";
import type { UnobservedAnswer } from "./http-server.js";
import { requestFactsKey, type RequestFacts } from "./request-context.js";
import { operationName } from "./operation-name.js";

/**
 * One log line per operation, on every protocol: procedure, protocol, outcome, duration.
 * Never the message bodies: they can carry personal data.
 */
export function loggingInterceptor(log: Logger): Interceptor {
  return (next) => async (req) => {
    const started = performance.now();
    const facts = req.contextValues.get(requestFactsKey);
    const fields = {
      requestId: facts.requestId,
      protocol: facts.protocol,
      procedure: operationName(req.method),
    };
    // A stream (Health Watch) is logged when it ends, with its outcome and its whole duration, as
    // the metrics count it.
    return callWithOutcome(next, req, (code, error) => {
      // A streaming call's message that does not decode (gRPC's `internal`, see
      // malformedStreamMessageInterceptor) is the client's: health and reflection take no token,
      // so an error line each would let anyone fill the error log.
      const level = isMalformedRequestMessage(error) ? "info" : rpcLogLevel(code);
      log[level]({ ...fields, ...callerOf(facts), code, durationMs: elapsed(started), ...(level === "error" ? { err: error } : {}) }, "rpc");
    });
  };
}

/**
 * The level of an operation's line: `error` for what the server must answer for (internal,
 * unknown, and unavailable: the store failing, see storeUnavailableInterceptor, which operators
 * must see), `info` for the rest (a client's mistake or departure is no server error).
 */
export function rpcLogLevel(code: string): "error" | "info" {
  return code === "internal" || code === "unknown" || code === "unavailable" ? "error" : "info";
}

/**
 * The line of an API answer no interceptor saw (`HttpServer`'s `onUnobservedAnswer`), in the
 * interceptor's shape: a REST body that does not parse is logged like a handler's refusal.
 */
export function logUnobservedAnswer(log: Logger, answer: UnobservedAnswer): void {
  const { facts, code, status, seconds } = answer;
  const fields = {
    requestId: facts.requestId,
    protocol: facts.protocol,
    procedure: facts.operation ?? "unknown",
    code,
    ...(status === undefined ? {} : { status }),
    durationMs: Math.round(seconds * 100_000) / 100,
  };
  // Info, whatever the code: the request never reached a handler, so what went wrong was the
  // client's (connect-es calls a protobuf body it cannot parse `internal`), and an unauthenticated
  // client must not be able to fill the error log. A failure of the server there is logged apart.
  log.info(fields, "rpc");
}

/** The caller's client id, once its token was verified (an unauthenticated call has none). */
function callerOf(facts: RequestFacts): { clientId?: string } {
  return facts.clientId === undefined ? {} : { clientId: facts.clientId };
}

function elapsed(started: number): number {
  return Math.round((performance.now() - started) * 100) / 100;
}
