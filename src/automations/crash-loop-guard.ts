import type { Logger } from "../logger.js";
import type { Store } from "../store/store.js";

/** "running" from the worker's start until its graceful stop, then "stopped". */
export const workerStateSetting = "worker_state";
/** The step a careful worker started last (a CarefulStep as JSON), written before it runs. */
export const carefulStepSetting = "worker_careful_step";

/** A step of an execution, as the careful worker marks it before running it. */
export interface CarefulStep {
  executionId: string;
  /** The step's position in its automation version. */
  position: number;
  /** How many careful starts of this step in a row, this one included. */
  attempts: number;
}

export interface CrashLoopGuardOptions {
  /**
   * How many units (claims and steps) the worker runs one at a time after an unclean stop: at
   * least as many as one batch of the process that died can have held, so that whatever was
   * running when it died is among them (the queue is run in order, and that batch's units are
   * its head).
   */
  carefulUnits: number;
  /** A step that was running when the process died in this many careful starts in a row is not run again. */
  maxCarefulAttempts: number;
}

export const defaultCrashLoopGuardOptions: CrashLoopGuardOptions = { carefulUnits: 257, maxCarefulAttempts: 2 };

/**
 * Keeps one execution from keeping the whole service down. The worker runs the queue in order,
 * and resumes after a crash where it stopped; so a step that kills the process (the heap
 * exhausted, a native crash, the kernel's OOM killer) would be run again at every start, and
 * kill every start: webhooks and API calls included, since they share the process.
 *
 * The hot path does not pay for this: a batch of steps marks nothing. The guard only remembers
 * whether the worker stopped gracefully (one write at its start, one at its stop). After a start
 * that follows an unclean stop, the worker runs its first `carefulUnits` units one transaction at
 * a time, and marks each step in the store (committed) before it runs it. If the process dies
 * again, the next start finds the step it died in; a step found there `maxCarefulAttempts` times
 * in a row is not run again: its execution ends FAILED, saying why, and the queue goes on.
 */
export class CrashLoopGuard {
  private readonly options: CrashLoopGuardOptions;
  private carefulUnitsLeft = 0;
  /** The mark the process before this one left: the step it was running when it died, if it was careful. */
  private markAtStart: CarefulStep | undefined;

  constructor(
    private readonly store: Store,
    private readonly log: Logger,
    options: Partial<CrashLoopGuardOptions> = {},
  ) {
    this.options = { ...defaultCrashLoopGuardOptions, ...options };
  }

  /** The worker starts: careful when the worker before it did not stop gracefully. */
  started(): void {
    const { settings } = this.store;
    const uncleanStop = settings.get(workerStateSetting)?.toString() === "running";
    settings.put(workerStateSetting, Buffer.from("running"));
    this.carefulUnitsLeft = uncleanStop ? this.options.carefulUnits : 0;
    this.markAtStart = uncleanStop ? readMark(settings.get(carefulStepSetting)) : undefined;
    if (uncleanStop) {
      this.log.warn(
        { carefulUnits: this.options.carefulUnits, ...(this.markAtStart === undefined ? {} : { lastCarefulStep: this.markAtStart }) },
        "automation worker: the process before this one stopped without shutting down; the first units run one at a time, each step marked before it runs",
      );
    }
  }

  /** The worker stopped gracefully: the next start need not be careful. */
  stopped(): void {
    this.store.settings.put(workerStateSetting, Buffer.from("stopped"));
    this.carefulUnitsLeft = 0;
  }

  /** True while the worker should run one unit a transaction and mark each step first. */
  get careful(): boolean {
    return this.carefulUnitsLeft > 0;
  }

  /** A careful unit ran (or the queue ran empty: nothing of the batch that died is left). */
  ranCarefully(queueEmpty = false): void {
    this.carefulUnitsLeft = queueEmpty ? 0 : this.carefulUnitsLeft - 1;
  }

  /**
   * Before a careful step runs: marks it in the store (committed) and returns how many careful
   * starts in a row it has had, this one included. Past `maxCarefulAttempts` nothing is written
   * and the caller ends the execution instead of running the step. Attempts count processes, not
   * tries: a step tried again in the same process (its batch rolled back by a store error) is
   * the same attempt.
   */
  enterStep(executionId: string, position: number): number {
    const died = this.markAtStart;
    const attempts = died !== undefined && died.executionId === executionId && died.position === position ? died.attempts + 1 : 1;
    if (attempts > this.options.maxCarefulAttempts) return attempts;
    const mark: CarefulStep = { executionId, position, attempts };
    this.store.settings.put(carefulStepSetting, Buffer.from(JSON.stringify(mark)));
    return attempts;
  }

  /** Whether a step with this many careful starts in a row is given up on. */
  exhausted(attempts: number): boolean {
    return attempts > this.options.maxCarefulAttempts;
  }

  get maxCarefulAttempts(): number {
    return this.options.maxCarefulAttempts;
  }
}

function readMark(value: Buffer | undefined): CarefulStep | undefined {
  if (value === undefined) return undefined;
  try {
    const mark = JSON.parse(value.toString()) as Partial<CarefulStep>;
    if (typeof mark.executionId === "string" && typeof mark.position === "number" && typeof mark.attempts === "number") {
      return { executionId: mark.executionId, position: mark.position, attempts: mark.attempts };
    }
  } catch {
    // A mark that does not parse marks nothing.
  }
  return undefined;
}
