import { ConnectError, type Interceptor, type StreamResponse } from "@connectrpc/connect";
import { codeName } from "../server/json-error.js";
import { requestFactsKey } from "../server/request-context.js";
import type { Metrics } from "./metrics.js";

/**
 * Counts and times every API operation on every protocol (REST too: the transcoder calls the same
 * handlers). A streaming response is measured until its last message, not until it starts.
 */
export function metricsInterceptor(metrics: Metrics): Interceptor {
  return (next) => async (req) => {
    const started = performance.now();
    const protocol = req.contextValues.get(requestFactsKey).protocol;
    const operation = `${req.service.typeName}.${req.method.name}`;
    const record = (code: string): void =>
      metrics.recordRequest({ protocol, operation, code, seconds: (performance.now() - started) / 1000 });
    let res;
    try {
      res = await next(req);
    } catch (e) {
      record(codeName(ConnectError.from(e).code));
      throw e;
    }
    if (!res.stream) {
      record("ok");
      return res;
    }
    return { ...res, message: observeStream(res, record) } satisfies StreamResponse;
  };
}

async function* observeStream<O>(res: { message: AsyncIterable<O> }, record: (code: string) => void): AsyncIterable<O> {
  let outcome = "canceled"; // the client went away before the stream ended
  try {
    yield* res.message;
    outcome = "ok";
  } catch (e) {
    outcome = codeName(ConnectError.from(e).code);
    throw e;
  } finally {
    record(outcome);
  }
}
