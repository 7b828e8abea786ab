import { setTimeout as sleep } from "node:timers/promises";

/**
 * Resolves after a turn of the event loop, once the I/O waiting meanwhile has been served: long
 * work on the one JavaScript thread (housekeeping deletes, a search reading many rows) awaits it
 * between pieces so requests are answered in between.
 */
export function yieldToRequests(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/**
 * Runs `judge` once the event loop has read the I/O waiting now. A timer's callback runs before
 * the sockets are read in its turn, so after the thread was held past a timeout (a write waiting
 * on another process's lock, a paused VM) what the clients sent meanwhile lies unread: a timeout
 * that ends or cuts something (an idle connection, a late body) decides here, not in the timer.
 */
export function afterPendingReads(judge: () => void): void {
  setImmediate(judge);
}

/**
 * Holds background work done in pieces (housekeeping's deletes) to a share of the one JavaScript
 * thread while it runs, whatever the load: each piece is timed, and the time it took, scaled by
 * (1 - share) / share, is owed back as sleep. Small debts are only a turn of the event loop
 * (`yieldToRequests`) until they add up to `minSleepMs`, so pieces far shorter than a timer's
 * millisecond still pause for their share. A turn alone between pieces is not enough under load:
 * the work then takes a piece of every turn, as much of the thread as all the requests of the
 * turn together, and requests queue behind it.
 */
export class ThreadShare {
  private owedMs = 0;

  constructor(
    /** The most of the thread's time the work may take, between 0 (exclusive) and 1. */
    private readonly share: number,
    private readonly minSleepMs = 5,
    /**
     * The most of a piece's time counted as its work: a piece is milliseconds, and one the
     * process was paused in (a VM, SIGSTOP) counted the pause, so that a 60 s pause owed 9 minutes
     * of rest at a tenth of the thread.
     */
    private readonly maxPieceMs = 1_000,
  ) {
    if (!(share > 0 && share <= 1)) throw new RangeError(`a thread share is in (0, 1], not ${share}`);
  }

  /** Runs one piece now, then rests for its share before resolving with what it returned. */
  async piece<T>(work: () => T): Promise<T> {
    const started = performance.now();
    const value = work();
    this.owedMs += (Math.min(performance.now() - started, this.maxPieceMs) * (1 - this.share)) / this.share;
    if (this.owedMs < this.minSleepMs) {
      await yieldToRequests();
    } else {
      const owed = this.owedMs;
      this.owedMs = 0;
      await sleep(owed, undefined, { ref: false }); // a resting background job never keeps the process alive
    }
    return value;
  }
}

/**
 * Runs pieces of work one at a time, in the order they were given, each after a turn of the
 * event loop, so that a turn holds at most one piece however many callers wait. For the users
 * search's ranges: each search yielding on its own, eight at once read eight ranges in every
 * turn, and a webhook, which needs a few turns, waited behind all of them at each (a caller with
 * eight rare searches at once put webhooks' p99 at 2.2 s).
 */
export class TakeTurns {
  private last: Promise<unknown> = Promise.resolve();

  take<T>(work: () => T): Promise<T> {
    const turn = this.last.then(async () => {
      await yieldToRequests();
      return work();
    });
    this.last = turn.catch(() => undefined);
    return turn;
  }
}

/**
 * Says in the log when the one thread was held `thresholdMs` or more (a paused VM or SIGSTOP, a
 * write waiting out another process's lock, a long task): a timer every `tickMs` sees how late
 * it fires, which is the hold less at most one tick (`heldMs`, at least that). Every request
 * waited meanwhile; before, only `nodejs_eventloop_lag_max_seconds` showed such a pause, and no
 * line said when. Returns the stop.
 */
export function watchHeldThread(log: { warn(fields: object, message: string): void }, thresholdMs = 1_000, tickMs = 100): () => void {
  let expected = performance.now() + tickMs;
  const timer = setInterval(() => {
    const now = performance.now();
    const lateMs = now - expected;
    expected = now + tickMs;
    if (lateMs >= thresholdMs - tickMs) {
      log.warn({ heldMs: Math.round(lateMs) }, "the thread was held: every request waited (a paused process or VM, a write waiting on another process's lock, or a long task)");
    }
  }, tickMs).unref();
  return () => clearInterval(timer);
}
