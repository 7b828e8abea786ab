import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import type { Logger } from "../logger.js";
import { outcomeCodeName } from "./json-error.js";
import { requestFactsKey } from "./request-context.js";

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
      procedure: `${req.service.typeName}.${req.method.name}`,
    };
    try {
      const res = await next(req);
      log.info({ ...fields, code: "ok", durationMs: elapsed(started) }, "rpc");
      return res;
    } catch (e) {
      const error = ConnectError.from(e);
      const code = outcomeCodeName(e, req.signal);
      // Unavailable: the store failing (storeUnavailableInterceptor), which operators must see.
      const serverSide = error.code === Code.Internal || error.code === Code.Unknown || error.code === Code.Unavailable;
      const level = serverSide && code !== "canceled" ? "error" : "info";
      log[level]({ ...fields, code, durationMs: elapsed(started), ...(level === "error" ? { err: e } : {}) }, "rpc");
      throw e;
    }
  };
}

function elapsed(started: number): number {
  return Math.round((performance.now() - started) * 100) / 100;
}
