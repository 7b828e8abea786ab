import cron from "node-cron";
import type { Clock } from "../clock.js";
import type { Logger } from "../logger.js";
import type { Store } from "../store/store.js";

export interface WebhookHousekeepingOptions {
  store: Store;
  clock: Clock;
  log: Logger;
  /** ACCESSD_EVENT_RETENTION: event records (and delivery-log entries) older than this go. */
  retentionMs: number;
  /** The delivery log keeps at most this many entries per automation. */
  deliveriesPerAutomation?: number;
  /** node-cron expression; default every ten minutes. */
  schedule?: string;
}

export interface HousekeepingResult {
  events: number;
  deliveries: number;
  secrets: number;
}

export interface WebhookHousekeeping {
  /** One pass now; returns how many rows of each kind were deleted. */
  runOnce(): HousekeepingResult;
  stop(): void;
}

export const defaultDeliveriesPerAutomation = 1_000;

/**
 * Deletes webhook event records older than the retention (spec 2.4: 7 days), trims the delivery
 * log and drops rotated-out secrets past their grace period. Runs once at start, then on schedule.
 */
export function startWebhookHousekeeping(options: WebhookHousekeepingOptions): WebhookHousekeeping {
  const { store, clock, log, retentionMs } = options;
  const perAutomation = options.deliveriesPerAutomation ?? defaultDeliveriesPerAutomation;

  const runOnce = (): HousekeepingResult => {
    const now = clock.now();
    const cutoff = now - retentionMs;
    return store.transaction(() => ({
      events: store.webhooks.events.deleteReceivedBefore(cutoff),
      deliveries: store.webhooks.deliveries.trim(perAutomation, cutoff),
      secrets: store.webhooks.secrets.deleteExpired(now),
    }));
  };

  const runLogged = () => {
    try {
      const deleted = runOnce();
      log.debug({ deleted }, "webhook housekeeping done");
    } catch (e) {
      log.error({ err: e }, "webhook housekeeping failed");
    }
  };

  runLogged();
  const task = cron.schedule(options.schedule ?? "*/10 * * * *", runLogged, { name: "webhook-housekeeping", noOverlap: true });
  task.unref(); // never what keeps the process alive
  return {
    runOnce,
    stop: () => void task.destroy(),
  };
}
