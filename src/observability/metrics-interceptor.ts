import type { Interceptor } from "@connectrpc/connect";
import { callWithOutcome } from "../server/call-outcome.js";
import { noteRequestFacts, requestFactsKey } from "../server/request-context.js";
import type { Metrics } from "./metrics.js";
import { operationName } from "../server/operation-name.js";

/**
 * Counts and times every API operation on every protocol (REST too: the transcoder calls the same
 * handlers). A streaming response is measured until its last message, or until the client goes
 * away (`canceled`) or its deadline passes, not until it starts (`callWithOutcome`).
 */
export function metricsInterceptor(metrics: Metrics): Interceptor {
  return (next) => async (req) => {
    const started = performance.now();
    const facts = req.contextValues.get(requestFactsKey);
    noteRequestFacts(facts, { observed: true });
    const protocol = facts.protocol;
    const operation = operationName(req.method);
    return callWithOutcome(next, req, (code) => {
      metrics.recordRequest({ protocol, operation, code, seconds: (performance.now() - started) / 1000 });
    });
  };
}
