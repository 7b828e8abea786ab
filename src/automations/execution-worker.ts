import { setTimeout as sleep } from "node:timers/promises";
import type { Clock } from "../clock.js";
import type { Logger } from "../logger.js";
import type { Execution } from "../store/executions-repository.js";
import type { Store } from "../store/store.js";
import { CrashLoopGuard, type CrashLoopGuardOptions } from "./crash-loop-guard.js";
import { ExecutionRunner, type BatchLimits } from "./execution-runner.js";
import type { ProgramCache } from "./program-cache.js";

export interface ExecutionWorkerOptions {
  store: Store;
  clock: Clock;
  log: Logger;
  programs: ProgramCache;
  /** Test knob (ACCESSD_TEST_STEP_DELAY_MS): wait this long before each step. */
  stepDelayMs?: number;
  /** How often an idle worker looks for work nobody told it about. */
  pollIntervalMs?: number;
  /** How much one transaction may do before the worker commits and yields to requests. */
  batch?: BatchLimits;
  /** After an idle worker is woken, how long it lets new executions gather before it runs them. */
  gatherMs?: number;
  /** How the worker keeps a step that kills the process from being run at every start (CrashLoopGuard). */
  crashLoop?: Partial<CrashLoopGuardOptions>;
}

/**
 * Up to 2 ms of steps per transaction, then the event loop serves the requests that arrived
 * meanwhile: the worker never holds the one JS thread long, and a commit is shared by many steps.
 */
const defaultBatch: BatchLimits = { maxUnits: 256, maxMs: 2 };

/**
 * Once the queue is empty (an idle worker woken by a new execution, or a batch that ran the last
 * one), the worker waits this long before its next batch, so that the executions accepted
 * meanwhile share its transaction: under a steady stream of webhooks a commit then carries tens of
 * executions instead of a few, and each commit writes every page it dirtied to the WAL (at about
 * 5,800 webhooks/s the server's write transactions, acceptances' and worker's together, went from
 * 1,000 a second to 750 when the worker also gathered after a batch). Executions run
 * asynchronously anyway; 10 ms is not noticed.
 */
const defaultGatherMs = 10;

/**
 * After failed attempts in a row the worker waits the poll interval, then twice that, and so on
 * up to this many poll intervals (30 s by default). A write waits up to busy_timeout (5 s) for a
 * lock another process holds, on the one thread: retried each second, a held lock with work
 * queued stalled every request, /healthz too, five seconds in six; now at most one in seven.
 */
const maxFailurePauseIntervals = 30;

/**
 * The in-process worker: claims unfinished executions one at a time in creation order (so an
 * execution interrupted by a crash is resumed first) and runs them. One worker per database:
 * SQLite serialises writes anyway, and one runner keeps "in order" simple. `notify()` after
 * committing a new execution wakes it at once; otherwise it polls. Work runs in bounded batches
 * (ExecutionRunner.runBatch), each one transaction, with a turn of the event loop between them.
 */
export class ExecutionWorker {
  private readonly runner: ExecutionRunner;
  private readonly store: Store;
  private readonly log: Logger;
  private readonly pollIntervalMs: number;
  private readonly stepDelayMs: number;
  private readonly batch: BatchLimits;
  private readonly gatherMs: number;
  private readonly guard: CrashLoopGuard;
  private loop: Promise<void> | undefined;
  private stopping = false;
  private wake: (() => void) | undefined;
  private idleWaiters: (() => void)[] = [];
  /** Attempts that failed since the last one that did not (pauseAfterFailure). */
  private failedAttempts = 0;

  constructor(options: ExecutionWorkerOptions) {
    this.runner = new ExecutionRunner(options);
    this.store = options.store;
    this.log = options.log;
    this.pollIntervalMs = options.pollIntervalMs ?? 1000;
    this.stepDelayMs = options.stepDelayMs ?? 0;
    // The test knob waits before every step, so each step (and each claim) commits on its own.
    this.batch = this.stepDelayMs > 0 ? { maxUnits: 1, maxMs: Infinity } : (options.batch ?? defaultBatch);
    this.gatherMs = options.gatherMs ?? defaultGatherMs;
    // Careful for as many units as the batch that died could hold, plus the claim that resumes
    // the execution a batch before it left part-way (the test knob's one-unit batches included).
    const carefulUnits = Math.max(defaultBatch.maxUnits, this.batch.maxUnits) + 1;
    this.guard = new CrashLoopGuard(options.store, options.log, { carefulUnits, ...options.crashLoop });
  }

  /** Starts the loop (again, after a stop). */
  start(): void {
    if (this.loop !== undefined) return;
    this.guard.started();
    this.runner.rereadQueue();
    this.loop = this.work();
  }

  /**
   * There is new work (call after the transaction that enqueued it committed): the worker reads
   * the queue from the store again.
   */
  notify(): void {
    this.runner.rereadQueue();
    this.wake?.();
  }

  /**
   * A new execution, just committed by this process (call after the commit, before the event loop
   * turns): the worker runs it without reading it back from the store when it already knows the
   * rest of the queue, and wakes. `triggerBytes`: the size of its trigger as received (what
   * holding it in memory costs, roughly).
   */
  handOff(execution: Execution, triggerBytes: number): void {
    this.runner.committed(execution, triggerBytes);
    this.wake?.();
  }

  /** Resolves once no execution is left unfinished (or the worker stops). For tests and benches. */
  whenIdle(): Promise<void> {
    if (this.loop === undefined || this.stopping) return Promise.resolve();
    return new Promise((resolve) => {
      this.idleWaiters.push(resolve);
      this.notify();
    });
  }

  /**
   * Graceful stop: the running step finishes and is recorded, then the loop ends. An execution
   * stopped between steps stays RUNNING and is resumed at the next start.
   */
  async stop(): Promise<void> {
    this.stopping = true;
    this.wake?.();
    await this.loop;
    this.releaseIdleWaiters();
    if (this.loop !== undefined) {
      try {
        this.guard.stopped();
      } catch (e) {
        // The store failing at the stop: the next start is careful for nothing, no more.
        this.log.error({ err: e }, "automation worker: could not record its graceful stop");
      }
    }
    this.loop = undefined;
    this.stopping = false;
  }

  private async work(): Promise<void> {
    while (!this.stopping) {
      try {
        let units: number;
        if (this.guard.careful) {
          units = await this.runCarefully();
        } else {
          await this.pause();
          if (this.stopping) break;
          units = this.runner.runBatch(this.batch, () => this.stopping);
        }
        if (this.stopping) break;
        if (units === 0) {
          this.releaseIdleWaiters();
          const why = await this.sleep();
          // The safety net for work nobody told this worker about: the poll reads the store.
          if (why === "polled") this.runner.rereadQueue();
          else await this.gather();
        } else if (this.runner.drained) {
          await this.gather();
        }
        this.failedAttempts = 0;
      } catch (e) {
        // The store failing (disk full, locked too long, the file damaged): keep the execution for
        // a later attempt, a poll interval on and longer each time, not at the next execution's
        // hand-off (under load, one error line each: 80 a second).
        this.store.noteDamage(e);
        this.failedAttempts++;
        const retryInMs = this.failurePauseMs();
        this.log.error({ err: e, failedAttempts: this.failedAttempts, retryInMs }, "automation worker: execution attempt failed; retrying");
        await this.pauseAfterFailure(retryInMs);
      }
    }
  }

  /**
   * One unit in a transaction of its own, after a start that followed an unclean stop; a step is
   * marked in the store before it runs, and one that was running when the process died in
   * `maxCarefulAttempts` careful starts in a row ends its execution instead (CrashLoopGuard).
   */
  private async runCarefully(): Promise<number> {
    const unit = this.runner.nextUnit();
    if (unit === undefined) {
      this.guard.ranCarefully(true);
      return 0;
    }
    const { execution, step } = unit;
    if (step !== "claim") {
      const attempts = this.guard.enterStep(execution.id, step.position);
      if (this.guard.exhausted(attempts)) {
        const stepError = `was running when the process died, in ${this.guard.maxCarefulAttempts} starts in a row after an unclean stop (each time alone); it is not run again`;
        const reason = `step "${step.name}" ${stepError}`;
        this.log.error({ executionId: execution.id, automationId: execution.automationId, step: step.name }, `automation execution failed: ${reason}`);
        this.runner.abandon(execution, step, stepError, reason);
        this.guard.ranCarefully();
        return 1;
      }
    }
    await this.pause();
    if (this.stopping) return 0;
    const units = this.runner.runBatch({ maxUnits: 1, maxMs: Infinity }, () => this.stopping);
    this.guard.ranCarefully(units === 0);
    return units;
  }

  /**
   * Between batches: the test knob's delay before a step, or else a turn of the event loop with
   * requests first. A timer (not setImmediate) puts the next batch in the timers phase, before
   * the loop polls for I/O: the requests read in the poll phase are then committed and answered
   * in the check phase right after, never behind a batch of the worker.
   */
  private async pause(): Promise<void> {
    if (this.stepDelayMs === 0) await sleep(0);
    else if (this.runner.hasStepToRun) await sleep(this.stepDelayMs);
  }

  /** Lets new executions gather for gatherMs (see defaultGatherMs). */
  private async gather(): Promise<void> {
    if (this.gatherMs > 0 && !this.stopping) await sleep(this.gatherMs);
  }

  /** The poll interval doubled for each failed attempt in a row after the first, up to maxFailurePauseIntervals of it. */
  private failurePauseMs(): number {
    return this.pollIntervalMs * Math.min(2 ** (this.failedAttempts - 1), maxFailurePauseIntervals);
  }

  /**
   * Waits `ms`, or until stop(). A hand-off (or notify) means a write just committed, so the
   * store takes writes again: the pause then ends at most a poll interval later (executions
   * accepted after a lock ended waited out the rest of a 30 s pause), and no sooner, so that a
   * failure of the worker's own under load is still one attempt, one error line, an interval.
   */
  private async pauseAfterFailure(ms: number): Promise<void> {
    let until = performance.now() + ms;
    while (!this.stopping && performance.now() < until) {
      if ((await this.sleep(until - performance.now())) === "woken") until = Math.min(until, performance.now() + this.pollIntervalMs);
    }
  }

  /** Waits for notify() ("woken") or the poll interval ("polled"). */
  private sleep(ms = this.pollIntervalMs): Promise<"woken" | "polled"> {
    return new Promise((resolve) => {
      const done = (why: "woken" | "polled") => {
        clearTimeout(timer);
        this.wake = undefined;
        resolve(why);
      };
      const timer = setTimeout(() => done("polled"), ms);
      timer.unref();
      this.wake = () => done(this.stopping ? "polled" : "woken");
    });
  }

  private releaseIdleWaiters(): void {
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    for (const resolve of waiters) resolve();
  }
}
