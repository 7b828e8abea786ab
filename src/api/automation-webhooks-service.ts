import { create } from "@bufbuild/protobuf";
import { durationMs, timestampFromMs, type Duration } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, type ServiceImpl } from "@connectrpc/connect";
import {
  type Automations,
  WebhookDeliverySchema,
  type WebhookDelivery,
} from "../../gen/svc/api/automations/v1/automation_pb.js";
import type { TriggerConfig } from "../automations/trigger-config.js";
import { listingFingerprint, paginate } from "../pagination/index.js";
import type { WebhookDeliveryRecord } from "../store/webhook-deliveries-repository.js";
import { defaultRotationGraceMs, type WebhookSecretStore } from "../webhooks/index.js";
import { invalidArgument, notFound, requireField } from "./errors.js";
import type { ServiceContext } from "./service-context.js";

/** The webhook RPCs of svc.api.automations.v1.Automations; merged with the rest at registration. */
export type AutomationWebhooksImpl = Pick<ServiceImpl<typeof Automations>, "rotateWebhookSecret" | "listWebhookDeliveries">;

/** A grace period longer than this is refused: a leaked old secret should not live for months. */
const maxGraceSeconds = 30n * 86_400n;

/**
 * A rotation's grace period in milliseconds, from 0s to 30 days inclusive. Judged on the Duration
 * itself, not on its milliseconds: `-0.0006s` or 30 days and a nanosecond are outside the range
 * whichever way a conversion would round them.
 */
function gracePeriodMs(grace: Duration | undefined): number {
  if (grace === undefined) return defaultRotationGraceMs;
  const negative = grace.seconds < 0n || grace.nanos < 0;
  const beyond = grace.seconds > maxGraceSeconds || (grace.seconds === maxGraceSeconds && grace.nanos > 0);
  if (negative || beyond) throw invalidArgument("gracePeriod must be between 0s and 30 days");
  return durationMs(grace);
}

export function automationWebhooksService(
  { store, pageTokens }: ServiceContext,
  secrets: WebhookSecretStore,
): AutomationWebhooksImpl {
  const triggerOrThrow = (id: string): TriggerConfig => {
    const automation = store.automations.get(id);
    if (automation === undefined) throw notFound("automation", id);
    return automation.trigger;
  };

  return {
    rotateWebhookSecret(req) {
      const id = requireField(req.id, "id");
      const graceMs = gracePeriodMs(req.gracePeriod);
      return store.transaction(() => {
        const trigger = triggerOrThrow(id);
        if (trigger.kind !== "webhook" || trigger.authMethod !== "HMAC") {
          throw new ConnectError(`automation ${JSON.stringify(id)} has no HMAC webhook trigger`, Code.FailedPrecondition);
        }
        const rotated = secrets.rotate(id, graceMs);
        return {
          webhookSecret: rotated.secret,
          previousSecretExpiresAt: timestampFromMs(rotated.previousExpiresAt),
        };
      });
    },

    listWebhookDeliveries(req) {
      const id = requireField(req.id, "id");
      triggerOrThrow(id);
      const page = paginate(pageTokens, listingFingerprint("webhook_deliveries", id), req, (before, limit) =>
        store.webhooks.deliveries.listBefore(id, before, limit),
      );
      return { list: page.items.map(deliveryMessage), nextPageToken: page.nextPageToken };
    },
  };
}

function deliveryMessage(d: WebhookDeliveryRecord): WebhookDelivery {
  return create(WebhookDeliverySchema, {
    id: d.id,
    eventId: d.eventId,
    status: d.status,
    reason: d.reason,
    sourceIp: d.sourceIp,
    sizeBytes: BigInt(d.sizeBytes),
    receivedAt: timestampFromMs(d.receivedAt),
    executionId: d.executionId,
  });
}
