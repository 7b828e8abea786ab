import { newId } from "../store/ids.js";
import type { WebhookDeliveriesRepository } from "../store/webhook-deliveries-repository.js";
import type { DeliveryFacts } from "./pipeline.js";

export interface DeliveryVerdict {
  status: number;
  reason: string;
  executionId: string;
}

/**
 * Every request's verdict on a known listener, for Super Admins (ListWebhookDeliveries). Requests
 * to unknown listeners are not stored: they belong to no automation, and storing them would let
 * anyone fill the table.
 */
export class DeliveryLog {
  constructor(private readonly deliveries: WebhookDeliveriesRepository) {}

  record(facts: DeliveryFacts, verdict: DeliveryVerdict): void {
    if (facts.automationId === undefined) return;
    this.deliveries.insert({
      id: newId(),
      automationId: facts.automationId,
      eventId: facts.eventId,
      status: verdict.status,
      reason: verdict.reason,
      sourceIp: facts.sourceIp.slice(0, 64),
      sizeBytes: facts.sizeBytes,
      receivedAt: facts.receivedAt,
      executionId: verdict.executionId,
    });
  }
}
