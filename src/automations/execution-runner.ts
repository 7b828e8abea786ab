import type { JsonValue } from "@bufbuild/protobuf";
import type { Clock } from "../clock.js";
import { cutText } from "../cut-text.js";
import { logInOneWrite, type Logger } from "../logger.js";
import type { Execution, StepRecord } from "../store/executions-repository.js";
import { isStoreDamaged, isStoreUnavailable } from "../store/store-errors.js";
import type { Store } from "../store/store.js";
import { boundedErrorText } from "./error-text.js";
import type { ProgramCache } from "./program-cache.js";
import { runStep } from "./run-step.js";
import { StepContext } from "./step-context.js";
import type { StepDefinition } from "./step-definition.js";

export interface ExecutionRunnerOptions {
  store: Store;
  clock: Clock;
  log: Logger;
  programs: ProgramCache;
}

/** How much one transaction of the worker may do. */
export interface BatchLimits {
  /** Claims and steps, at most. */
  maxUnits: number;
  /** Stop taking more once this much time went by (the batch blocks the event loop). */
  maxMs: number;
}

/** The execution being run: claimed (RUNNING) and part-way through its steps. */
interface InProgress {
  execution: Execution;
  steps: StepDefinition[];
  context: StepContext;
  /** The next step to run. */
  position: number;
  /** When it was claimed (its start time unless it was started before a crash). */
  claimedAt: number;
  /** Whether the store already says RUNNING (written only when a batch ends part-way through it). */
  markedRunning: boolean;
}

/** How many of the oldest unfinished executions a batch reads at once (see ExecutionRunner.upcoming). */
const claimReadAhead = 32;
/**
 * Most executions handed over and held in memory to be claimed, and most bytes of their triggers
 * as received (a parsed JSON body takes a few times its bytes); past either, a backlog stays in
 * the store until read, `claimReadAhead` at a time. At full webhook load the worker falls
 * thousands of executions behind the acceptances (it catches up once the load eases): with 4,096
 * at most, reading the rest back was 4-5% of the request thread's time (bench/README.md).
 */
const maxHandedOver = 32_768;
const maxHandedOverBytes = 16 * 1024 * 1024;

interface LogLine {
  fields: Record<string, unknown>;
  message: string;
}

/**
 * Runs executions step by step, durably, in one serial order: the oldest unfinished execution's
 * steps, then the next execution's. Each step's action and its step record commit in the same
 * transaction, so after a crash a step either happened and is recorded, or neither; a resumed
 * execution starts at its first step without a record, and a finished step never runs again
 * (its record's primary key would also refuse a second one, rolling the action back).
 *
 * A batch runs several consecutive units of that order (claims and steps) in one transaction, so
 * a commit (the expensive part: every dirtied page goes to the WAL) is shared by many steps. The
 * order and every step's atomicity are unchanged; a crash or a store error rolls the whole batch
 * back, which is the same as its steps not having run yet.
 */
export class ExecutionRunner {
  private readonly versions = new Map<string, StepDefinition[]>();
  private current: InProgress | undefined;
  /**
   * The oldest unfinished executions not yet claimed, oldest first: read from the store up to
   * `claimReadAhead` at a time (one statement for many claims instead of one each), or handed over
   * by `committed()` as this process creates them. Only the runner changes an execution once it
   * exists, so what is read stays true until it is claimed.
   */
  private upcoming: Execution[] = [];
  /** The index of the next one to claim in `upcoming` (a queue without shift()'s copying). */
  private nextUpcoming = 0;
  /** The trigger bytes of each execution in `upcoming` that was handed over (0 for those read from the store). */
  private upcomingBytes: number[] = [];
  /** The sum of `upcomingBytes` from `nextUpcoming` on: what the handed-over executions not yet claimed hold. */
  private heldBytes = 0;
  /**
   * True while `upcoming` holds every unfinished execution not yet claimed: the last read of the
   * store found fewer than it asked for, and every execution committed since was handed over.
   * Then the runner needs no read to claim (the new execution comes with the acceptance that
   * created it, its trigger already parsed) and none to learn the queue is empty. Reading the
   * oldest unfinished executions back was 5% of the thread's time at full webhook load.
   */
  private upcomingIsWholeQueue = false;
  /** The newest execution id in `upcoming` (read or handed over): ids grow with time, so anything older was seen. */
  private newestSeenId = "";
  private queueEmptied = false;
  /** The execution the running unit works on (a claim's or a step's): the one to fail if the unit throws. */
  private inHand: Execution | undefined;
  /** The position of the step of `inHand` the running unit runs (undefined for a claim), to name it if the unit throws. */
  private stepInHand: number | undefined;

  constructor(private readonly options: ExecutionRunnerOptions) {}

  /**
   * A new execution, committed: queued in memory when the runner knows the whole queue (else the
   * next read finds it). `triggerBytes`: the size of its trigger as received (the webhook body).
   */
  committed(execution: Execution, triggerBytes: number): void {
    if (!this.upcomingIsWholeQueue) return;
    if (execution.id <= this.newestSeenId) {
      // Ids grow with time within a process, but one created after a restart under a clock set
      // back sorts before the executions written earlier: the store, not `upcoming`, has it right.
      this.upcomingIsWholeQueue = false;
      return;
    }
    if (this.upcoming.length - this.nextUpcoming >= maxHandedOver || this.heldBytes + triggerBytes > maxHandedOverBytes) {
      this.upcomingIsWholeQueue = false; // a backlog: the store holds it, and is read once `upcoming` is done
      return;
    }
    this.upcoming.push(execution);
    this.upcomingBytes.push(triggerBytes);
    this.heldBytes += triggerBytes;
    this.newestSeenId = execution.id;
  }

  /** The store may hold unfinished executions the runner was not handed: read it before the next claim. */
  rereadQueue(): void {
    this.forgetUpcoming();
    this.upcomingIsWholeQueue = false;
  }

  /** True when the last batch stopped because no unfinished execution was left (not at its limits). */
  get drained(): boolean {
    return this.queueEmptied;
  }

  /** True when a claimed execution has a step left to run (the next unit is a step, not a claim). */
  get hasStepToRun(): boolean {
    return this.current !== undefined;
  }

  /**
   * Runs units (a claim of the oldest unfinished execution, one that a crash left RUNNING first;
   * or the next step of the claimed one) in one transaction, until `limits` or `stopping()` say
   * stop or nothing is left. Returns how many units ran: 0 when there was no work. Log steps'
   * lines are written after the commit, all in one write (the record is the durable result; the
   * line is a courtesy, written at most once). An execution stopped between steps stays RUNNING
   * and is resumed by the next claim.
   */
  runBatch(limits: BatchLimits, stopping: () => boolean): number {
    const { store, log } = this.options;
    const lines: LogLine[] = [];
    const started = performance.now();
    let units = 0;
    this.queueEmptied = false;
    try {
      // Nothing to claim, read without a write transaction: an idle worker took the database's
      // write lock at every poll, and waited out another process's lock (5 s on the one thread,
      // an error line) with no execution at all.
      if (this.current === undefined && this.oldestUnclaimed() === undefined) {
        this.queueEmptied = true;
        return 0;
      }
      store.transaction(() => {
        while (units < limits.maxUnits && !stopping() && (units === 0 || performance.now() - started < limits.maxMs)) {
          this.inHand = this.current?.execution;
          this.stepInHand = undefined;
          if (this.current === undefined) {
            const claimed = this.claim(lines);
            if (claimed === undefined) {
              this.queueEmptied = true;
              break;
            }
            units++;
            this.current = claimed === "finished" ? undefined : claimed;
            continue;
          }
          units++;
          this.stepInHand = this.current.position;
          if (this.runNextStep(this.current, lines)) this.current = undefined;
        }
        // An execution claimed and finished within the batch goes from PENDING to its end in one
        // write; one the batch leaves part-way is recorded RUNNING, so a restart resumes it.
        const { current } = this;
        if (current !== undefined && !current.markedRunning) {
          store.executions.markRunning(current.execution.id, current.claimedAt);
          current.markedRunning = true;
        }
      });
    } catch (e) {
      // Rolled back: what `current` holds was not recorded, and what the batch claimed is unclaimed
      // again; the next claim reads the queue from the store.
      const culprit = this.inHand;
      const culpritStep = this.stepInHand;
      this.inHand = undefined;
      this.stepInHand = undefined;
      this.current = undefined;
      this.rereadQueue();
      if (culprit === undefined || !isFaultOfTheExecution(e)) throw e; // the store failing: the worker tries again later
      this.failOnInternalError(culprit, culpritStep, e);
      return units;
    }
    this.inHand = undefined;
    logInOneWrite(log, () => {
      for (const line of lines) log.info(line.fields, line.message);
    });
    return units;
  }

  /**
   * What the next unit will work on, without running it: the claimed execution's next step, or
   * the claim of the oldest unfinished execution; undefined when no execution is left.
   */
  nextUnit(): { execution: Execution; step: { position: number; name: string } | "claim" } | undefined {
    const { current } = this;
    if (current !== undefined) {
      const name = current.steps[current.position]?.name ?? "";
      return { execution: current.execution, step: { position: current.position, name } };
    }
    const execution = this.oldestUnclaimed();
    return execution === undefined ? undefined : { execution, step: "claim" };
  }

  /**
   * Ends `execution` FAILED with `reason`, and `step` FAILED with `stepError`, in a transaction of
   * its own, without running more of it; the queue goes on after it.
   */
  abandon(execution: Execution, step: { position: number; name: string }, stepError: string, reason: string): void {
    this.endWithFailedStep(execution, step, stepError, reason);
    if (this.current?.execution.id === execution.id) this.current = undefined;
    this.rereadQueue();
  }

  /** Empties `upcoming` (whether it is the whole queue is the caller's to say). */
  private forgetUpcoming(): void {
    this.upcoming = [];
    this.upcomingBytes = [];
    this.nextUpcoming = 0;
    this.heldBytes = 0;
  }

  /** The oldest unfinished execution not claimed yet, read from the store when `upcoming` is used up. */
  private oldestUnclaimed(): Execution | undefined {
    if (this.nextUpcoming === this.upcoming.length) {
      this.forgetUpcoming();
      if (!this.upcomingIsWholeQueue) {
        this.upcoming = this.options.store.executions.oldestUnfinished(claimReadAhead);
        this.upcomingBytes = this.upcoming.map(() => 0);
        this.upcomingIsWholeQueue = this.upcoming.length < claimReadAhead;
        // What `upcoming` now holds, not the newest ever seen: an execution dated ahead (made
        // before a restart under a clock set back since) stops holding later handovers off once run.
        this.newestSeenId = this.upcoming.at(-1)?.id ?? "";
      }
    }
    return this.upcoming[this.nextUpcoming];
  }

  /** Claims the oldest unfinished execution and loads where it stands ("finished" when nothing is left to run). */
  private claim(lines: LogLine[]): InProgress | "finished" | undefined {
    const { store, clock } = this.options;
    const execution = this.oldestUnclaimed();
    if (execution !== undefined) {
      this.heldBytes -= this.upcomingBytes[this.nextUpcoming] ?? 0;
      this.nextUpcoming++;
    }
    this.inHand = execution;
    if (this.nextUpcoming >= 1024) {
      // Under steady load the queue may never run empty: drop what was claimed.
      this.upcoming = this.upcoming.slice(this.nextUpcoming);
      this.upcomingBytes = this.upcomingBytes.slice(this.nextUpcoming);
      this.nextUpcoming = 0;
    }
    if (execution === undefined) return undefined;
    const claimedAt = clock.now();
    const steps = this.stepsOf(execution);
    if (steps === undefined) {
      this.finish(execution, "FAILED", `automation version ${execution.automationVersion} no longer exists`);
      return "finished";
    }
    // A PENDING execution has no step records (its claim commits before, or with, its first step).
    const done = execution.state === "PENDING" ? [] : store.executions.steps(execution.id);
    if (execution.state === "RUNNING") {
      lines.push({ fields: { executionId: execution.id, fromStep: done.length }, message: "resuming automation execution" });
    }
    const failed = done.find((s) => s.state === "FAILED");
    if (failed !== undefined || done.length >= steps.length) {
      // The last step's record and the execution's end commit together; this is a safety net.
      this.finish(execution, failed === undefined ? "SUCCEEDED" : "FAILED", failed === undefined ? "" : stepError(failed));
      return "finished";
    }
    const context = new StepContext(execution.trigger);
    for (const record of done) if (record.output !== undefined) context.addOutput(record.name, record.output);
    return { execution, steps, context, position: done.length, claimedAt, markedRunning: execution.state === "RUNNING" };
  }

  /**
   * One step, written in the batch's transaction; true when the execution ended with it. No
   * savepoint of its own: a step's failure is an outcome (recorded), and anything that throws
   * (the store failing, a second record of the same step) rolls the whole batch back anyway.
   */
  private runNextStep(current: InProgress, lines: LogLine[]): boolean {
    const { store, clock, programs } = this.options;
    const { execution, steps, context, position, claimedAt } = current;
    const step = steps[position];
    if (step === undefined) return true;
    const last = position === steps.length - 1;
    const startedAt = clock.now();
    const outcome = runStep(store, startedAt, step, programs, context);
    const finishedAt = clock.now();
    const record: StepRecord = { position, name: step.name, ...outcome, startedAt, finishedAt };
    store.executions.recordStep(execution.id, record);
    if (outcome.state === "FAILED") store.executions.finish(execution.id, "FAILED", stepError(record), finishedAt, claimedAt);
    else if (last) store.executions.finish(execution.id, "SUCCEEDED", "", finishedAt, claimedAt);
    current.position++;
    if (record.output !== undefined) context.addOutput(step.name, record.output);
    if (step.action.kind === "log" && record.state === "SUCCEEDED") {
      lines.push({
        fields: { automationId: execution.automationId, executionId: execution.id, step: step.name, ...loggedOutput(record.output ?? null) },
        message: "automation log",
      });
    }
    return record.state === "FAILED" || last;
  }

  /**
   * A unit threw something that is neither a step's failure (those are outcomes, recorded) nor
   * the store's: a bug, or data the code did not expect. Tried again, it would throw again, and
   * the worker runs executions in order, so it would hold every execution queued behind it for
   * good. The batch is rolled back; its execution alone is ended FAILED, in a transaction of its
   * own, and the others run again as they were.
   */
  private failOnInternalError(execution: Execution, position: number | undefined, error: unknown): void {
    const { log } = this.options;
    const name = position === undefined ? undefined : this.stepsOf(execution)?.[position]?.name;
    const step = position === undefined || name === undefined ? undefined : { position, name };
    const reason = boundedErrorText(`internal error: ${error instanceof Error ? `${error.name}: ${error.message}` : String(error)}`);
    log.error({ err: error, executionId: execution.id, automationId: execution.automationId, step: step?.name }, "automation execution failed on an internal error");
    this.endWithFailedStep(execution, step, reason, reason);
  }

  /**
   * Ends `execution` FAILED with `executionError`, and records `step` (when known) FAILED with
   * `stepError`, so that its steps show which one it ended in (they showed every step PENDING).
   * Should recording the step throw too (the bug may be in that very write), the execution is
   * ended alone: ended it must be, or it would hold the queue behind it.
   */
  private endWithFailedStep(
    execution: Execution,
    step: { position: number; name: string } | undefined,
    stepError: string,
    executionError: string,
  ): void {
    const { store, clock } = this.options;
    const now = clock.now();
    const failedStep: StepRecord | undefined =
      step === undefined ? undefined : { ...step, state: "FAILED", output: undefined, error: stepError, startedAt: now, finishedAt: now };
    try {
      store.transaction(() => {
        if (failedStep !== undefined) store.executions.recordStep(execution.id, failedStep);
        this.finish(execution, "FAILED", executionError);
      });
    } catch (e) {
      if (failedStep === undefined || !isFaultOfTheExecution(e)) throw e;
      store.transaction(() => this.finish(execution, "FAILED", executionError));
    }
  }

  private finish(execution: Execution, state: "SUCCEEDED" | "FAILED", error: string): void {
    const { store, clock } = this.options;
    store.executions.finish(execution.id, state, error, clock.now());
  }

  private stepsOf(execution: Execution): StepDefinition[] | undefined {
    const key = `${execution.automationId}@${execution.automationVersion}`;
    let steps = this.versions.get(key);
    if (steps === undefined) {
      steps = this.options.store.automations.versionSteps(execution.automationId, execution.automationVersion);
      if (steps === undefined) return undefined;
      // Versions never change, so caching them is safe; the bound keeps memory flat.
      if (this.versions.size >= 1000) this.versions.clear();
      this.versions.set(key, steps);
    }
    return steps;
  }
}

/** An error that is this execution's own (it would recur on every attempt), not the store failing or its file damaged. */
function isFaultOfTheExecution(error: unknown): boolean {
  return !isStoreUnavailable(error) && !isStoreDamaged(error);
}

/** The execution's error for its failed step: within maxErrorLength too, the step's name and all. */
function stepError(step: StepRecord): string {
  return boundedErrorText(`step "${step.name}" failed: ${step.error}`);
}

/**
 * The most characters of a log step's output its "automation log" line carries; the execution
 * holds all of it. Lines carried outputs whole: 100 steps echoing a 10 KB context wrote 1 MB of
 * log an execution, 4.4 GB in a minute of Executes.
 */
const maxLoggedOutputChars = 4_096;

/**
 * A log step's output for its line, always a string (a number, list or map as its JSON text), so
 * that the field has one type in every line (a log store's index takes the first type it sees and
 * refuses or drops the others); cut when long, saying how much was left out.
 */
function loggedOutput(output: JsonValue): { message: string } {
  return { message: cutText(typeof output === "string" ? output : JSON.stringify(output), maxLoggedOutputChars) };
}
