import type { StreamResponse, UnaryRequest, StreamRequest, UnaryResponse } from "@connectrpc/connect";
import { outcomeCodeName } from "./outcome-codes.js";
import { requestFactsKey } from "./request-context.js";

/**
 * Runs the rest of an interceptor chain and tells `ended`, exactly once, how the call came out: a
 * unary call when it returns or throws, a streaming response when its last message is taken or
 * it fails, or, since a cancelled stream may never be iterated again, when the call's signal
 * aborts (with its reason: the client gone, `canceled`, or the deadline passed,
 * `deadline_exceeded`; also when the request deadline cut a request whose body was late, which
 * aborts the signal as `canceled`). What the logging and metrics interceptors both need.
 */
export async function callWithOutcome(
  next: (req: UnaryRequest | StreamRequest) => Promise<UnaryResponse | StreamResponse>,
  req: UnaryRequest | StreamRequest,
  ended: (code: string, error?: unknown) => void,
): Promise<UnaryResponse | StreamResponse> {
  let done = false;
  const facts = req.contextValues.get(requestFactsKey);
  const end = (code: string, error?: unknown): void => {
    if (done) return;
    done = true;
    ended(facts.cutByDeadline === true ? "deadline_exceeded" : code, error);
  };
  let res;
  try {
    res = await next(req);
  } catch (e) {
    end(outcomeCodeName(e, req.signal), e);
    throw e;
  }
  if (!res.stream) {
    end("ok");
    return res;
  }
  req.signal.addEventListener("abort", () => end(outcomeCodeName(req.signal.reason, req.signal)), { once: true });
  return { ...res, message: followStream(res.message, end, req.signal) } satisfies StreamResponse;
}

async function* followStream<O>(messages: AsyncIterable<O>, ended: (code: string, error?: unknown) => void, signal: AbortSignal): AsyncIterable<O> {
  try {
    yield* messages;
    ended("ok");
  } catch (e) {
    ended(outcomeCodeName(e, signal), e);
    throw e;
  }
}
