import type { Clock } from "../clock.js";
import { newId } from "../store/ids.js";
import type { WebhookDeliveriesRepository } from "../store/webhook-deliveries-repository.js";
import type { DeliveryFacts } from "./pipeline.js";

export interface DeliveryVerdict {
  status: number;
  reason: string;
  executionId: string;
}

export interface DeliveryLogOptions {
  clock: Clock;
  /**
   * Refusals logged per automation and second, at most (a bucket that holds as many). The
   * housekeeping job trims the log every 10 minutes; between two trims a flood of refused requests
   * on a leaked listener id would otherwise add a row per request. The refusals past the bound are
   * still counted in /metrics (accessd_webhook_verdicts_total); acceptances are always logged.
   */
  refusalsPerSecond: number;
}

export const defaultRefusalsPerSecond = 100;

/** Most automations whose refusal budget is remembered; past it the budgets start over. */
const maxBudgets = 10_000;

/**
 * Every request's verdict on a known listener, for Super Admins (ListWebhookDeliveries). Requests
 * to unknown listeners are not stored: they belong to no automation, and storing them would let
 * anyone fill the table. Refusals are logged up to a rate per automation (see DeliveryLogOptions).
 */
export class DeliveryLog {
  private readonly budgets = new Map<string, { tokens: number; refilledAt: number }>();

  constructor(
    private readonly deliveries: WebhookDeliveriesRepository,
    private readonly options: DeliveryLogOptions,
  ) {}

  record(facts: DeliveryFacts, verdict: DeliveryVerdict): void {
    if (facts.automationId === undefined) return;
    if (verdict.status !== 200 && !this.takeRefusalToken(facts.automationId)) return;
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

  private takeRefusalToken(automationId: string): boolean {
    const { refusalsPerSecond, clock } = this.options;
    const now = clock.now();
    let budget = this.budgets.get(automationId);
    if (budget === undefined) {
      if (this.budgets.size >= maxBudgets) this.budgets.clear();
      budget = { tokens: refusalsPerSecond, refilledAt: now };
      this.budgets.set(automationId, budget);
    }
    // No refill for time that went backwards (the clock stepped back): a negative one emptied the
    // budget for the step's length (an hour back: no refusal logged for an hour).
    budget.tokens = Math.min(refusalsPerSecond, budget.tokens + (Math.max(0, now - budget.refilledAt) / 1000) * refusalsPerSecond);
    budget.refilledAt = now;
    if (budget.tokens < 1) return false;
    budget.tokens -= 1;
    return true;
  }
}
