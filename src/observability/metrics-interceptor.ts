import type { Interceptor, StreamResponse } from "@connectrpc/connect";
import { outcomeCodeName } from "../server/json-error.js";
import { noteRequestFacts, requestFactsKey } from "../server/request-context.js";
import type { Metrics } from "./metrics.js";

/**
 * Counts and times every API operation on every protocol (REST too: the transcoder calls the same
 * handlers). A streaming response is measured until its last message, or until the client goes
 * away (`canceled`), not until it starts.
 */
export function metricsInterceptor(metrics: Metrics): Interceptor {
  return (next) => async (req) => {
    const started = performance.now();
    const facts = req.contextValues.get(requestFactsKey);
    noteRequestFacts(facts, { observed: true });
    const protocol = facts.protocol;
    const operation = `${req.service.typeName}.${req.method.name}`;
    let recorded = false;
    const record = (code: string): void => {
      if (recorded) return;
      recorded = true;
      metrics.recordRequest({ protocol, operation, code, seconds: (performance.now() - started) / 1000 });
    };
    let res;
    try {
      res = await next(req);
    } catch (e) {
      record(outcomeCodeName(e, req.signal));
      throw e;
    }
    if (!res.stream) {
      record("ok");
      return res;
    }
    // A cancelled stream may never be iterated again, so its end is learned from the signal, with
    // its reason: the client gone (`canceled`) or the deadline passed (`deadline_exceeded`).
    req.signal.addEventListener("abort", () => record(outcomeCodeName(req.signal.reason, req.signal)), { once: true });
    return { ...res, message: observeStream(res.message, record, req.signal) } satisfies StreamResponse;
  };
}

async function* observeStream<O>(messages: AsyncIterable<O>, record: (code: string) => void, signal: AbortSignal): AsyncIterable<O> {
  try {
    yield* messages;
    record("ok");
  } catch (e) {
    record(outcomeCodeName(e, signal));
    throw e;
  }
}
