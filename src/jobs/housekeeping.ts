import { familiarForMs } from "../auth/familiar-addresses.js";
import cron, { type Logger as CronLogger, type ScheduledTask } from "node-cron";
import type { Clock } from "../clock.js";
import { ThreadShare } from "../event-loop.js";
import type { Logger } from "../logger.js";
import type { Store } from "../store/store.js";

export interface HousekeepingOptions {
  store: Store;
  clock: Clock;
  log: Logger;
  /** ACCESSD_EVENT_RETENTION: event records (and delivery-log entries) older than this go. */
  eventRetentionMs: number;
  /** ACCESSD_EXECUTION_RETENTION: executions created and finished longer ago than this go; undefined keeps them. */
  executionRetentionMs?: number | undefined;
  /** The delivery log keeps at most this many entries per automation. */
  deliveriesPerAutomation?: number;
  /** node-cron expression; default every ten minutes. */
  schedule?: string;
}

export interface HousekeepingResult {
  events: number;
  deliveries: number;
  executions: number;
  secrets: number;
  /** Addresses clients last got a token from 30 days ago or more (FamiliarAddresses). */
  tokenAddresses: number;
}

export interface Housekeeping {
  /** The pass started with the job (tests await it). */
  firstPass: Promise<void>;
  /** One pass now (or the one under way); resolves with how many rows of each kind were deleted. */
  runOnce(): Promise<HousekeepingResult>;
  /** No further chunk starts; a pass under way ends after its current chunk. */
  stop(): void;
}

export const defaultDeliveriesPerAutomation = 1_000;

/**
 * Rows deleted per transaction. Event records are keyed by random event ids, so a chunk dirties
 * about a page per row: 1,000 of them took 11 ms (p50) to 200 ms (p99) of the one JS thread on
 * the development VM; 250 keep a chunk to a few milliseconds.
 */
export const housekeepingChunkRows = 250;

/**
 * Executions deleted per statement. An execution is more to delete than an event record (its row,
 * four index entries, and its step records with theirs): from 300,000 executions of three steps,
 * chunks of 250 took 4.3 ms (p50) and 21 ms (p90) of the thread, chunks of 50 0.8 and 2.1 ms.
 */
export const executionChunkRows = 64;

/**
 * The most of the JavaScript thread a pass takes while it runs (ThreadShare). Ten minutes of
 * webhooks leave up to millions of delivery-log entries to trim: 1,000,000 took 1.6 s of the
 * thread in 4,000 chunks on the development VM. With only a turn of the event loop between chunks,
 * a pass that began during load at 6,800 webhooks/s (half the maximum) took a chunk of every turn
 * and the server fell behind: the 5 s phases that met a pass had a p99 of 19-199 ms (the slowest
 * answers 200-630 ms) against 4-11 ms in the phases around them; at a tenth, 5-12 ms, like the
 * rest (bench/README.md, 2026-11-27). At a tenth the 1,000,000 entries take about 16 s: still some
 * 60,000 a second, several times what the server can accept.
 */
export const housekeepingThreadShare = 0.1;

/**
 * Deletes webhook event records older than the retention (spec 8: 7 days), trims the delivery
 * log, deletes finished executions past their own retention and drops rotated-out secrets past
 * their grace period. Runs once at start, then on schedule. Deletes go in chunks of
 * `housekeepingChunkRows` (executions: `executionChunkRows`), each its own transaction, resting
 * between them so that a pass takes at most `housekeepingThreadShare` of the thread: a busy
 * listener's ten minutes of deliveries are millions of rows, and one transaction over them would
 * stop every request for seconds.
 */
export function startHousekeeping(options: HousekeepingOptions): Housekeeping {
  const { store, clock, log, eventRetentionMs, executionRetentionMs } = options;
  const perAutomation = options.deliveriesPerAutomation ?? defaultDeliveriesPerAutomation;
  let stopped = false;
  /** Shared by the passes, which run one at a time (runOnce). */
  const share = new ThreadShare(housekeepingThreadShare);

  /**
   * Runs `deleteChunk` (in a transaction of its own, unless it is one statement that is its own)
   * until it deletes fewer than `chunkRows`, resting after each for the job's thread share (also
   * after the last: with 50,000 automations, each one's few rows in its own transactions back to
   * back held the thread 3 s a pass); returns the total.
   */
  const inChunks = async (deleteChunk: () => number, chunkRows = housekeepingChunkRows, inTransaction = true): Promise<number> => {
    let total = 0;
    while (!stopped) {
      const deleted = await share.piece(() => (inTransaction ? store.transaction(deleteChunk) : deleteChunk()));
      total += deleted;
      if (deleted < chunkRows) break;
    }
    return total;
  };

  /** The pass under way, if any: the first pass and a scheduled one do not run side by side. */
  let passUnderWay: Promise<HousekeepingResult> | undefined;
  const runOnce = (): Promise<HousekeepingResult> => {
    passUnderWay ??= runPass().finally(() => {
      passUnderWay = undefined;
    });
    return passUnderWay;
  };

  const runPass = async (): Promise<HousekeepingResult> => {
    const now = clock.now();
    const cutoff = now - eventRetentionMs;
    const { events, deliveries, secrets } = store.webhooks;
    const result: HousekeepingResult = { events: 0, deliveries: 0, executions: 0, secrets: 0, tokenAddresses: 0 };
    result.events = await inChunks(() => events.deleteReceivedBefore(cutoff, housekeepingChunkRows));
    // The delivery log is kept by automation (its primary key), so it is pruned automation by automation.
    for (const automationId of stopped ? [] : deliveries.automationIds()) {
      result.deliveries += await inChunks(() => deliveries.deleteLoggedBefore(automationId, cutoff, housekeepingChunkRows));
      result.deliveries += await inChunks(() => deliveries.trimAutomation(automationId, perAutomation, housekeepingChunkRows));
    }
    if (executionRetentionMs !== undefined) {
      // One DELETE statement a chunk, its own transaction, so the executions' counts for /metrics
      // are corrected knowing it committed (ExecutionsRepository.deleteFinishedBefore).
      const before = now - executionRetentionMs;
      const deleteChunk = () => store.executions.deleteFinishedBefore(before, executionChunkRows);
      result.executions = await inChunks(deleteChunk, executionChunkRows, false);
      // History that the API no longer shows: said where an operator reads (the first pass after
      // an upgrade from a build that kept every execution may delete months of it).
      if (result.executions > 0) {
        log.info(
          { deleted: result.executions, before: new Date(before).toISOString() },
          "deleted finished executions older than ACCESSD_EXECUTION_RETENTION",
        );
      }
    }
    if (!stopped) result.secrets = store.transaction(() => secrets.deleteExpired(now));
    // At most 64 a client: one statement. A client's address is personal data of a kind; kept no
    // longer than it serves.
    if (!stopped) result.tokenAddresses = store.clients.deleteTokenAddressesBefore(now - familiarForMs); // no longer familiar
    return result;
  };

  const runLogged = async (): Promise<void> => {
    try {
      const deleted = await runOnce();
      log.debug({ deleted }, "housekeeping done");
    } catch (e) {
      log.error({ err: e }, "housekeeping failed");
    }
  };

  const firstPass = runLogged();
  const expression = options.schedule ?? "*/10 * * * *";
  /** Slots node-cron found skipped since the last line that said so. */
  let missedSlots = 0;
  const schedule = (): ScheduledTask => {
    // node-cron's own lines (a skipped slot, an overlap) go to the JSON log, not to the console.
    const scheduled = cron.schedule(expression, runLogged, { name: "housekeeping", noOverlap: true, logger: cronLogger(log) });
    // One line per skipped slot, on the console: a step of the clock a year forward wrote 52,560.
    // node-cron skips a slot it reaches more than a second late, so a thread held across one (a
    // write waiting on a lock, a paused VM) lost the pass: the delivery log stayed untrimmed for
    // ten minutes more. The skipped slots, however many, make one pass now.
    scheduled.on("execution:missed", () => {
      if (missedSlots++ > 0) return;
      setImmediate(() => {
        log.warn({ missedSlots }, "housekeeping skipped its scheduled passes (the clock stepped forward, or the thread was held): one runs now");
        missedSlots = 0;
        if (!stopped) void runLogged();
      });
    });
    scheduled.unref(); // never what keeps the process alive
    return scheduled;
  };
  let task = schedule();
  // node-cron plans its passes by the wall clock: after a step back it waits until the clock
  // reaches the pass it expected (an hour back: no pass for an hour), and a step forward makes it
  // walk every slot in between. A step of more than a minute either way starts its plan afresh.
  let wallAhead = Date.now() - performance.now();
  const stepWatch = setInterval(() => {
    const ahead = Date.now() - performance.now();
    const stepMs = ahead - wallAhead;
    wallAhead = ahead;
    if (Math.abs(stepMs) <= clockStepMs) return;
    log.warn({ stepSeconds: Math.round(stepMs / 1000) }, "the wall clock stepped: housekeeping planned afresh");
    void task.destroy();
    task = schedule();
  }, clockStepCheckMs).unref();
  return {
    firstPass,
    runOnce,
    stop: () => {
      stopped = true;
      clearInterval(stepWatch);
      void task.destroy();
    },
  };
}

/** A step of the wall clock against the monotonic one past this re-plans the schedule. */
const clockStepMs = 60_000;
const clockStepCheckMs = 15_000;

/** node-cron's logger, writing to the service's log. */
function cronLogger(log: Logger): CronLogger {
  const line = (level: "debug" | "info" | "warn" | "error") => (message: string | Error, err?: Error) =>
    message instanceof Error ? log[level]({ err: message }, "node-cron") : log[level]({ err }, `node-cron: ${message}`);
  return { debug: line("debug"), info: line("info"), warn: line("warn"), error: line("error") };
}
