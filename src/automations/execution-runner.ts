import { setImmediate as yieldToEventLoop, setTimeout as sleep } from "node:timers/promises";
import type { Clock } from "../clock.js";
import type { Logger } from "../logger.js";
import type { Execution, StepRecord } from "../store/executions-repository.js";
import type { Store } from "../store/store.js";
import type { ProgramCache } from "./program-cache.js";
import { runStep } from "./run-step.js";
import { StepContext } from "./step-context.js";
import type { StepDefinition } from "./step-definition.js";

export interface ExecutionRunnerOptions {
  store: Store;
  clock: Clock;
  log: Logger;
  programs: ProgramCache;
  /** Test knob (ACCESSD_TEST_STEP_DELAY_MS): wait this long before each step. 0 in production. */
  stepDelayMs?: number;
}

/**
 * Runs executions step by step, durably. Each step's action and its step record commit in one
 * transaction, so after a crash a step either happened and is recorded, or neither; a resumed
 * execution starts at its first step without a record, and a finished step never runs again
 * (its record's primary key would also refuse a second one, rolling the action back).
 */
export class ExecutionRunner {
  private readonly versions = new Map<string, StepDefinition[]>();

  constructor(private readonly options: ExecutionRunnerOptions) {}

  /** Claims the oldest unfinished execution: one a crash left RUNNING, else the next PENDING. */
  claimNext(): Execution | undefined {
    const { store, clock } = this.options;
    return store.transaction(() => {
      const execution = store.executions.nextUnfinished();
      if (execution !== undefined) store.executions.markRunning(execution.id, clock.now());
      return execution;
    });
  }

  /**
   * Runs the remaining steps of a claimed execution. Between steps it asks `stopping()`; when
   * that is true it returns, leaving the execution RUNNING for the next start to resume.
   */
  async run(execution: Execution, stopping: () => boolean): Promise<void> {
    const { store, log } = this.options;
    const steps = this.stepsOf(execution);
    if (steps === undefined) {
      this.finish(execution, "FAILED", `automation version ${execution.automationVersion} no longer exists`);
      return;
    }
    const done = store.executions.steps(execution.id);
    if (done.length > 0 || execution.state === "RUNNING") {
      log.info({ executionId: execution.id, fromStep: done.length }, "resuming automation execution");
    }
    const failed = done.find((s) => s.state === "FAILED");
    if (failed !== undefined || done.length >= steps.length) {
      // The last step's record and the execution's end commit together; this is a safety net.
      this.finish(execution, failed === undefined ? "SUCCEEDED" : "FAILED", failed === undefined ? "" : stepError(failed));
      return;
    }

    const context = new StepContext(execution.trigger);
    for (const record of done) if (record.output !== undefined) context.addOutput(record.name, record.output);

    for (let position = done.length; position < steps.length; position++) {
      if (stopping()) return;
      const step = steps[position];
      if (step === undefined) break;
      await this.pause();
      const finished = this.runStepDurably(execution, step, position, position === steps.length - 1, context);
      if (finished) return;
    }
  }

  /** One step in one transaction; true when the execution ended with it. */
  private runStepDurably(
    execution: Execution,
    step: StepDefinition,
    position: number,
    last: boolean,
    context: StepContext,
  ): boolean {
    const { store, clock, log, programs } = this.options;
    const startedAt = clock.now();
    const record = store.transaction((): StepRecord => {
      const outcome = runStep(store, startedAt, step, programs, context);
      const finishedAt = clock.now();
      const stepRecord: StepRecord = { position, name: step.name, ...outcome, startedAt, finishedAt };
      store.executions.recordStep(execution.id, stepRecord);
      if (outcome.state === "FAILED") store.executions.finish(execution.id, "FAILED", stepError(stepRecord), finishedAt);
      else if (last) store.executions.finish(execution.id, "SUCCEEDED", "", finishedAt);
      return stepRecord;
    });
    if (record.output !== undefined) context.addOutput(step.name, record.output);
    if (step.action.kind === "log" && record.state === "SUCCEEDED") {
      // After the commit: the record is the durable result; the line is a courtesy and at most once.
      log.info(
        { automationId: execution.automationId, executionId: execution.id, step: step.name, message: record.output },
        "automation log",
      );
    }
    return record.state === "FAILED" || last;
  }

  private finish(execution: Execution, state: "SUCCEEDED" | "FAILED", error: string): void {
    const { store, clock } = this.options;
    store.transaction(() => store.executions.finish(execution.id, state, error, clock.now()));
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

  private async pause(): Promise<void> {
    const delay = this.options.stepDelayMs ?? 0;
    // Yield between steps so that requests are served while a long execution runs.
    if (delay > 0) await sleep(delay);
    else await yieldToEventLoop();
  }
}

function stepError(step: StepRecord): string {
  return `step "${step.name}" failed: ${step.error}`;
}
