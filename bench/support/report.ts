/**
 * How a bench file hands its figures to `bench/run.ts`: one `BENCH {json}` line per figure on
 * stdout. Anything else a bench prints is progress, shown as it runs and not recorded.
 */
export interface BenchFigure {
  /** What was measured, e.g. "first page latency (mean)". */
  name: string;
  value: number;
  /** "ms", "req/s", "x", "MiB", ... */
  unit: string;
  /** Conditions worth reading beside the number (concurrency, sizes, protocol). */
  note?: string;
}

export const figurePrefix = "BENCH ";

export function report(figure: BenchFigure): void {
  process.stdout.write(`${figurePrefix}${JSON.stringify(figure)}\n`);
}

/** A progress line (not recorded). */
export function progress(message: string): void {
  process.stdout.write(`  ${message}\n`);
}

/** Seconds each load phase runs; BENCH_DURATION overrides (short runs for smoke tests). */
export function phaseSeconds(fallback: number): number {
  const given = Number(process.env.BENCH_DURATION);
  return Number.isFinite(given) && given > 0 ? given : fallback;
}

export function round(value: number, digits = 2): number {
  const f = 10 ** digits;
  return Math.round(value * f) / f;
}
