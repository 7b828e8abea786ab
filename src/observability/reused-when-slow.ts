/**
 * `read`, whose result is reused for `reuseMs` after a read that took longer than `slowMs`.
 * Counting the executions reads the whole queue: during a backlog of 500,000, every scrape of the
 * unauthenticated /metrics held the thread 200-260 ms (ten at once, 1.6 s). A quick read (the
 * usual case) is never reused, so the figures are as fresh as the scrape.
 */
export function reusedWhenSlow<T>(read: () => T, slowMs = 20, reuseMs = 5_000): () => T {
  let kept: { value: T; until: number } | undefined;
  return () => {
    const started = performance.now();
    if (kept !== undefined && started < kept.until) return kept.value;
    const value = read();
    const took = performance.now() - started;
    kept = took > slowMs ? { value, until: performance.now() + reuseMs } : undefined;
    return value;
  };
}
