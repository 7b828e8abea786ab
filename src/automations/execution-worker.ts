import type { Clock } from "../clock.js";
import type { Logger } from "../logger.js";
import type { Store } from "../store/store.js";
import { ExecutionRunner } from "./execution-runner.js";
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
}

/**
 * The in-process worker: claims unfinished executions one at a time in creation order (so an
 * execution interrupted by a crash is resumed first) and runs them. One worker per database:
 * SQLite serialises writes anyway, and one runner keeps "in order" simple. `notify()` after
 * committing a new execution wakes it at once; otherwise it polls.
 */
export class ExecutionWorker {
  private readonly runner: ExecutionRunner;
  private readonly log: Logger;
  private readonly pollIntervalMs: number;
  private loop: Promise<void> | undefined;
  private stopping = false;
  private wake: (() => void) | undefined;
  private idleWaiters: (() => void)[] = [];

  constructor(options: ExecutionWorkerOptions) {
    this.runner = new ExecutionRunner(options);
    this.log = options.log;
    this.pollIntervalMs = options.pollIntervalMs ?? 1000;
  }

  /** Starts the loop (again, after a stop). */
  start(): void {
    this.loop ??= this.work();
  }

  /** There is new work (call after the transaction that enqueued it committed). */
  notify(): void {
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
    this.loop = undefined;
    this.stopping = false;
  }

  private async work(): Promise<void> {
    while (!this.stopping) {
      try {
        const execution = this.runner.claimNext();
        if (execution === undefined) {
          this.releaseIdleWaiters();
          await this.sleep();
          continue;
        }
        await this.runner.run(execution, () => this.stopping);
      } catch (e) {
        // The store failing (disk full, locked too long): keep the execution for a later attempt.
        this.log.error({ err: e }, "automation worker: execution attempt failed; retrying");
        await this.sleep();
      }
    }
  }

  private sleep(): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.wake = undefined;
        resolve();
      };
      const timer = setTimeout(done, this.pollIntervalMs);
      timer.unref();
      this.wake = done;
    });
  }

  private releaseIdleWaiters(): void {
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    for (const resolve of waiters) resolve();
  }
}
