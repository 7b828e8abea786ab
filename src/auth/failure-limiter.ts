import type { Clock } from "../clock.js";

export interface FailureLimiterOptions {
  /** Failures allowed per key within the window; the next attempt is refused. */
  maxFailures: number;
  windowMs: number;
  clock: Clock;
  /** Keys tracked at most; the oldest are forgotten first (bounded memory under a flood). */
  maxKeys?: number;
}

/**
 * Slows down guessing at the token endpoint: after `maxFailures` failures within `windowMs` for a
 * key (a client id, a source address), further attempts are refused until the oldest failure
 * leaves the window. Refused attempts are not counted, so a client recovers one window after
 * its last real failure. In memory: per process, reset by a restart.
 */
export class FailureLimiter {
  private readonly failures = new Map<string, number[]>();
  private readonly maxKeys: number;

  constructor(private readonly options: FailureLimiterOptions) {
    this.maxKeys = options.maxKeys ?? 100_000;
  }

  /** Seconds to wait when any of the keys is over its limit; undefined when all may try. */
  retryAfterSeconds(keys: readonly string[]): number | undefined {
    const now = this.options.clock.now();
    let waitMs = 0;
    for (const key of keys) {
      const times = this.recent(key, now);
      const oldest = times[0];
      if (times.length >= this.options.maxFailures && oldest !== undefined) {
        waitMs = Math.max(waitMs, oldest + this.options.windowMs - now);
      }
    }
    return waitMs > 0 ? Math.ceil(waitMs / 1000) : undefined;
  }

  recordFailure(keys: readonly string[]): void {
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
    const kept = times.filter((t) => t > now - this.options.windowMs);
    if (kept.length === 0) this.failures.delete(key);
    else this.failures.set(key, kept);
    return kept;
  }
}
