import type { Clock } from "../clock.js";

export interface FailureLimiterOptions {
  /** Failures allowed per key within the window; the next attempt is refused. */
  maxFailures: number;
  windowMs: number;
  clock: Clock;
  /** Keys tracked at most; the oldest are forgotten first (bounded memory under a flood). */
  maxKeys?: number;
}

/** An attempt the limiter let through: counted against its keys until settled. */
export interface LimitedAttempt {
  /** The attempt failed: it stays counted, as a failure, for the window. */
  fail(): void;
  /** The attempt succeeded (or ended without a verdict): it no longer counts. No-op after fail(). */
  release(): void;
}

export type Admission = { admitted: true; attempt: LimitedAttempt } | { admitted: false; retryAfterSeconds: number };

/**
 * Slows down guessing at the token endpoint: after `maxFailures` failures within `windowMs` for a
 * key (a client id, a source address), further attempts are refused until the oldest failure
 * leaves the window. An attempt counts from the moment it is admitted, before its (slow)
 * verification, so parallel guesses cannot all pass the check before the first one fails: at most
 * `maxFailures` attempts per key are in flight or failed within the window. Refused attempts are
 * not counted, so a client recovers one window after its last real failure. In memory: per
 * process, reset by a restart.
 */
export class FailureLimiter {
  private readonly failures = new Map<string, number[]>();
  /** Attempts admitted and not settled yet, per key: each may still turn out a failure. */
  private readonly inFlight = new Map<string, number>();
  private readonly maxKeys: number;

  constructor(private readonly options: FailureLimiterOptions) {
    this.maxKeys = options.maxKeys ?? 100_000;
  }

  /** Admits an attempt when every key has room for one more failure; else the seconds to wait. */
  admit(keys: readonly string[]): Admission {
    const now = this.options.clock.now();
    let waitMs = 0;
    for (const key of keys) {
      const times = this.recent(key, now);
      if (times.length + (this.inFlight.get(key) ?? 0) < this.options.maxFailures) continue;
      const oldest = times[0];
      // Full of failures: until the oldest leaves the window. Full of attempts still in flight:
      // they settle within a second, and their verdicts decide.
      const keyWaitMs = times.length >= this.options.maxFailures && oldest !== undefined ? oldest + this.options.windowMs - now : 1000;
      waitMs = Math.max(waitMs, keyWaitMs);
    }
    if (waitMs > 0) return { admitted: false, retryAfterSeconds: Math.ceil(waitMs / 1000) };
    for (const key of keys) this.inFlight.set(key, (this.inFlight.get(key) ?? 0) + 1);
    let settled = false;
    const settle = (failed: boolean): void => {
      if (settled) return;
      settled = true;
      for (const key of keys) {
        const pending = (this.inFlight.get(key) ?? 1) - 1;
        if (pending > 0) this.inFlight.set(key, pending);
        else this.inFlight.delete(key);
      }
      if (failed) this.recordFailure(keys);
    };
    return { admitted: true, attempt: { fail: () => settle(true), release: () => settle(false) } };
  }

  private recordFailure(keys: readonly string[]): void {
    const now = this.options.clock.now();
    for (const key of keys) {
      const times = this.recent(key, now);
      times.push(now);
      if (times.length > this.options.maxFailures) times.shift();
      this.failures.delete(key); // re-insert: Map order is then least recently failed first
      this.failures.set(key, times);
    }
    while (this.failures.size > this.maxKeys) {
      const first = this.failures.keys().next();
      if (first.done === true) break;
      this.failures.delete(first.value);
    }
  }

  private recent(key: string, now: number): number[] {
    const times = this.failures.get(key);
    if (times === undefined) return [];
    // A failure stamped after `now` was counted before the clock stepped back: forgotten, or the
    // key would wait the step's length (a day's step: 429 with Retry-After 86460, for good
    // credentials from the same address too).
    const kept = times.filter((t) => t > now - this.options.windowMs && t <= now);
    if (kept.length === 0) this.failures.delete(key);
    else this.failures.set(key, kept);
    return kept;
  }
}
