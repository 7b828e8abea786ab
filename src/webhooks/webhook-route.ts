import type { Logger } from "../logger.js";
import type { RawRoute } from "../server/http-server.js";
import { refuseMethod, writeJson, writeJsonError } from "../server/json-error.js";
import type { NodeRequest, NodeResponse } from "../server/node-http.js";
import type { RequestFacts } from "../server/request-context.js";
import { isStoreUnavailable } from "../store/store-errors.js";
import type { BodySource } from "./body-reader.js";
import { webhookPathPrefix } from "./endpoint-url.js";
import type { WebhookOutcome, WebhookPipeline } from "./pipeline.js";
import { Rejection } from "./rejection.js";

/** Listener ids are 24 characters (144 random bits, base64url); a longer one is no listener's. */
const maxLoggedListenerIdLength = 64;

/** Told each request's verdict: a stable reason (`accepted`, `signature_mismatch`, ...) and the status. */
export type VerdictObserver = (reason: string, status: number) => void;

/**
 * `POST /api/v1/webhooks/incoming/{listener_id}`: runs the pipeline on the raw request, answers
 * its verdict (Connect's JSON error shape for every refusal). Not behind
 * bearer auth: each listener authenticates its own requests.
 */
export function webhookRoute(
  pipeline: WebhookPipeline,
  log: Logger,
  onVerdict: VerdictObserver = () => {},
): RawRoute {
  return {
    path: webhookPathPrefix,
    async handle(req: NodeRequest, res: NodeResponse, facts: RequestFacts): Promise<void> {
      const path = (req.url ?? "").split("?", 1)[0] ?? "";
      const listenerId = path.slice(webhookPathPrefix.length);
      if (req.method !== "POST") {
        // A verdict like the pipeline's: counted and logged (a sender's GET went unseen).
        onVerdict("method_not_allowed", 405);
        log.info(
          { requestId: facts.requestId, listenerId: listenerId.slice(0, maxLoggedListenerIdLength), status: 405, reason: "method_not_allowed", method: (req.method ?? "").slice(0, 32) },
          "webhook refused",
        );
        refuseMethod(res, req.method, path, ["POST"]);
        return;
      }
      let outcome: WebhookOutcome;
      try {
        outcome = await pipeline.run({
          listenerId,
          peerAddress: facts.peerAddress,
          headers: req.headers,
          rawHeaders: req.rawHeaders,
          body: bodySource(req, facts),
        });
      } catch (e) {
        // The server answers a store failure with 503 (nothing was recorded); count it with the verdicts.
        if (isStoreUnavailable(e)) onVerdict("store_unavailable", 503);
        throw e;
      }
      const { verdict } = outcome;
      if (verdict instanceof Rejection) {
        onVerdict(verdict.reason, verdict.status);
        log.info(
          {
            requestId: facts.requestId,
            // As sent (an unknown one too), cut: the path is the sender's to make as long as it likes.
            listenerId: listenerId.slice(0, maxLoggedListenerIdLength),
            status: verdict.status,
            reason: verdict.reason,
            eventId: outcome.facts.eventId,
            sourceIp: outcome.facts.sourceIp,
          },
          "webhook refused",
        );
        // A body left unread is discarded once the answer is sent (HTTP/2: the stream is closed).
        writeJsonError(res, verdict.code, verdict.message, verdict.status);
        return;
      }
      onVerdict("accepted", 200);
      log.debug({ requestId: facts.requestId, eventId: verdict.eventId, executionId: verdict.executionId }, "webhook accepted");
      writeJson(res, 200, { eventId: verdict.eventId, executionId: verdict.executionId });
    },
  };
}

function bodySource(req: NodeRequest, facts: RequestFacts): BodySource {
  const header = req.headers["content-length"];
  const declared = header === undefined || !/^\d+$/.test(header) ? undefined : Number(header);
  return { declaredLength: declared, stream: req, cutByDeadline: () => facts.cutByDeadline === true };
}
