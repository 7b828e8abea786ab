import { Writable } from "node:stream";
import { setTimeout as sleep } from "node:timers/promises";
import Database from "better-sqlite3";
import { v7 as uuidv7 } from "uuid";
import { describe, expect, it, vi } from "vitest";
import { CrashLoopGuard, carefulStepSetting, workerStateSetting } from "../src/automations/crash-loop-guard.js";
import { enqueueExecution } from "../src/automations/enqueue-execution.js";
import { ExecutionRunner } from "../src/automations/execution-runner.js";
import { ExecutionWorker } from "../src/automations/execution-worker.js";
import { ProgramCache } from "../src/automations/program-cache.js";
import type { StepDefinition } from "../src/automations/step-definition.js";
import { ManualClock } from "../src/clock.js";
import { createLogger } from "../src/logger.js";
import { Store } from "../src/store/store.js";
import { scratch } from "./support/scratch.js";
import { inMemoryStores } from "./support/store-fixtures.js";

const log = createLogger("silent");
const stores = inMemoryStores();
const { tempDir } = scratch("accessd-worker-");

const logStep = (name: string): StepDefinition => ({ name, skipIfTrueCel: "", action: { kind: "log", messageCel: "ctx.trigger.n" } });

/** A store holding one manual automation whose `steps` are log steps. */
const storeWithAutomation = (steps: StepDefinition[]) => stores.withAutomation(steps);

function enqueue(store: Store, automationId: string, n: number): string {
  return store.transaction(() => enqueueExecution(store, Date.now(), { automationId, trigger: { n } })).id;
}

describe("ExecutionRunner", () => {
  it("writes an execution claimed and finished in one batch from PENDING straight to SUCCEEDED, never RUNNING", () => {
    const { store, automationId } = storeWithAutomation([logStep("a"), logStep("b")]);
    const clock = new ManualClock(1_000);
    const runner = new ExecutionRunner({ store, clock, log, programs: new ProgramCache() });
    const id = enqueue(store, automationId, 1);
    const markRunning = vi.spyOn(store.executions, "markRunning");

    expect(runner.runBatch({ maxUnits: 100, maxMs: 1_000 }, () => false)).toBe(3); // a claim and two steps
    expect(markRunning).not.toHaveBeenCalled();
    expect(store.executions.get(id)).toMatchObject({ state: "SUCCEEDED", startedAt: 1_000, finishedAt: 1_000 });
  });

  it("records RUNNING when a batch ends part-way through an execution, keeping its first start time", () => {
    const { store, automationId } = storeWithAutomation([logStep("a"), logStep("b")]);
    const clock = new ManualClock(1_000);
    const runner = new ExecutionRunner({ store, clock, log, programs: new ProgramCache() });
    const id = enqueue(store, automationId, 1);

    expect(runner.runBatch({ maxUnits: 2, maxMs: 1_000 }, () => false)).toBe(2); // the claim and step "a"
    expect(store.executions.get(id)).toMatchObject({ state: "RUNNING", startedAt: 1_000 });
    expect(store.executions.steps(id).map((s) => s.name)).toEqual(["a"]);

    clock.advance(500);
    expect(runner.runBatch({ maxUnits: 100, maxMs: 1_000 }, () => false)).toBe(1); // step "b"
    expect(store.executions.get(id)).toMatchObject({ state: "SUCCEEDED", startedAt: 1_000, finishedAt: 1_500 });
  });

  it("runs executions in the order they were created, one after the other", () => {
    const { store, automationId } = storeWithAutomation([logStep("a")]);
    const clock = new ManualClock(1_000);
    const runner = new ExecutionRunner({ store, clock, log, programs: new ProgramCache() });
    const ids = [1, 2, 3].map((n) => enqueue(store, automationId, n));
    const finished: string[] = [];
    for (let batch = 0; batch < 3; batch++) {
      clock.advance(1);
      runner.runBatch({ maxUnits: 2, maxMs: 1_000 }, () => false); // one claim and its one step
      finished.push(...ids.filter((id) => store.executions.get(id)?.state === "SUCCEEDED" && !finished.includes(id)));
    }
    expect(finished).toEqual(ids);
    expect(ids.map((id) => store.executions.get(id)?.finishedAt)).toEqual([1_001, 1_002, 1_003]);
  });

  it("reads the queue again once told to: an execution finished elsewhere meanwhile is not run", () => {
    const { store, automationId } = storeWithAutomation([logStep("a")]);
    const runner = new ExecutionRunner({ store, clock: new ManualClock(1_000), log, programs: new ProgramCache() });
    const [first, second, third] = [1, 2, 3].map((n) => enqueue(store, automationId, n)) as [string, string, string];

    expect(runner.runBatch({ maxUnits: 2, maxMs: 1_000 }, () => false)).toBe(2); // claims and runs the first
    store.transaction(() => store.executions.finish(second, "FAILED", "stopped by an operator", 1_000));
    runner.rereadQueue(); // what ExecutionWorker.notify() does
    runner.runBatch({ maxUnits: 100, maxMs: 1_000 }, () => false);

    expect([first, second, third].map((id) => store.executions.get(id)?.state)).toEqual(["SUCCEEDED", "FAILED", "SUCCEEDED"]);
    expect(store.executions.steps(second)).toEqual([]);
  });

  it("runs executions handed over after their commit without reading the queue back, and reads the store when told it holds more", () => {
    const { store, automationId } = storeWithAutomation([logStep("a")]);
    const runner = new ExecutionRunner({ store, clock: new ManualClock(1_000), log, programs: new ProgramCache() });
    const handedOver = () => {
      const execution = store.transaction(() => enqueueExecution(store, Date.now(), { automationId, trigger: { n: 1 } }));
      runner.committed(execution, 8);
      return execution.id;
    };
    expect(runner.runBatch({ maxUnits: 100, maxMs: 1_000 }, () => false)).toBe(0); // read: the queue is empty
    const reads = vi.spyOn(store.executions, "oldestUnfinished");

    const ids = [handedOver(), handedOver(), handedOver()];
    expect(runner.runBatch({ maxUnits: 100, maxMs: 1_000 }, () => false)).toBe(6); // 3 claims, 3 steps
    expect(runner.runBatch({ maxUnits: 100, maxMs: 1_000 }, () => false)).toBe(0);
    expect(reads).not.toHaveBeenCalled();
    expect(ids.map((id) => store.executions.get(id)?.state)).toEqual(["SUCCEEDED", "SUCCEEDED", "SUCCEEDED"]);

    // Created without a handover (another path, or a batch rolled back): found once the store is read.
    const unannounced = enqueue(store, automationId, 2);
    expect(runner.runBatch({ maxUnits: 100, maxMs: 1_000 }, () => false)).toBe(0);
    runner.rereadQueue();
    expect(runner.runBatch({ maxUnits: 100, maxMs: 1_000 }, () => false)).toBe(2);
    expect(reads).toHaveBeenCalled();
    expect(store.executions.get(unannounced)?.state).toBe("SUCCEEDED");
  });

  it("runs a backlog of more than 4,096 executions handed over from memory, without reading the store back", () => {
    // At full webhook load the worker falls thousands behind; reading them back was 4-5% of the thread.
    const { store, automationId } = storeWithAutomation([logStep("a")]);
    const runner = new ExecutionRunner({ store, clock: new ManualClock(1_000), log, programs: new ProgramCache() });
    expect(runner.runBatch({ maxUnits: 100, maxMs: 1_000 }, () => false)).toBe(0); // read: the queue is empty
    const reads = vi.spyOn(store.executions, "oldestUnfinished");

    const executions = store.transaction(() =>
      Array.from({ length: 5_000 }, (_, n) => enqueueExecution(store, Date.now(), { automationId, trigger: { n } })),
    );
    for (const execution of executions) runner.committed(execution, 8);
    let units = 0;
    for (let ran = -1; ran !== 0; units += ran) ran = runner.runBatch({ maxUnits: 1_000, maxMs: 60_000 }, () => false);

    expect(units).toBe(10_000); // a claim and a step each
    expect(reads).not.toHaveBeenCalled();
    expect(store.executions.countByState().SUCCEEDED).toBe(5_000);
  });

  it("leaves in the store what is handed over past 16 MiB of triggers held, and reads it from there", () => {
    const { store, automationId } = storeWithAutomation([logStep("a")]);
    const runner = new ExecutionRunner({ store, clock: new ManualClock(1_000), log, programs: new ProgramCache() });
    expect(runner.runBatch({ maxUnits: 100, maxMs: 1_000 }, () => false)).toBe(0);
    const reads = vi.spyOn(store.executions, "oldestUnfinished");

    const mib = 1024 * 1024;
    const ids = [7 * mib, 7 * mib, 7 * mib].map((bytes, n) => {
      const execution = store.transaction(() => enqueueExecution(store, Date.now(), { automationId, trigger: { n } }));
      runner.committed(execution, bytes); // the third would hold 21 MiB: left to the store
      return execution.id;
    });
    expect(runner.runBatch({ maxUnits: 4, maxMs: 1_000 }, () => false)).toBe(4); // the two held ones
    expect(reads).not.toHaveBeenCalled();
    expect(runner.runBatch({ maxUnits: 100, maxMs: 1_000 }, () => false)).toBe(2);
    expect(reads).toHaveBeenCalled();
    expect(ids.map((id) => store.executions.get(id)?.state)).toEqual(["SUCCEEDED", "SUCCEEDED", "SUCCEEDED"]);

    // Claimed, they hold nothing: the next one handed over is held again.
    reads.mockClear();
    const held = store.transaction(() => enqueueExecution(store, Date.now(), { automationId, trigger: { n: 4 } }));
    runner.committed(held, 15 * mib);
    expect(runner.runBatch({ maxUnits: 100, maxMs: 1_000 }, () => false)).toBe(2);
    expect(reads).not.toHaveBeenCalled();
    expect(store.executions.get(held.id)?.state).toBe("SUCCEEDED");
  });

  it("runs an execution handed over whose id sorts before one it read (created after a restart under a clock set back)", () => {
    const { store, automationId } = storeWithAutomation([logStep("a")]);
    const runner = new ExecutionRunner({ store, clock: new ManualClock(1_000), log, programs: new ProgramCache() });
    // Written before the restart, while the clock was an hour ahead.
    const executionId = uuidv7({ msecs: Date.now() + 3_600_000 });
    store.transaction(() => enqueueExecution(store, Date.now(), { automationId, trigger: { n: 1 }, executionId }));
    expect(runner.runBatch({ maxUnits: 100, maxMs: 1_000 }, () => false)).toBe(2); // read from the store: a claim, a step

    const handOver = (n: number) => {
      const execution = store.transaction(() => enqueueExecution(store, Date.now(), { automationId, trigger: { n } }));
      runner.committed(execution, 8);
      return execution.id;
    };
    const behind = handOver(2);
    expect(behind < executionId).toBe(true);
    expect(runner.runBatch({ maxUnits: 100, maxMs: 1_000 }, () => false)).toBe(2);
    expect(store.executions.get(behind)?.state).toBe("SUCCEEDED");

    // Once the one dated ahead has run, handovers are taken without reading the store again.
    const reads = vi.spyOn(store.executions, "oldestUnfinished");
    const next = handOver(3);
    expect(runner.runBatch({ maxUnits: 100, maxMs: 1_000 }, () => false)).toBe(2);
    expect(store.executions.get(next)?.state).toBe("SUCCEEDED");
    expect(reads).not.toHaveBeenCalled();
  });

  it("writes the log lines of a batch's log steps after its commit, all in one write", () => {
    const { store, automationId } = storeWithAutomation([logStep("a"), logStep("b")]);
    const writes: string[] = [];
    const capturing = createLogger("info", new Writable({ write: (chunk: Buffer, _encoding, done) => done(void writes.push(chunk.toString())) }));
    const runner = new ExecutionRunner({ store, clock: new ManualClock(1_000), log: capturing, programs: new ProgramCache() });
    [1, 2, 3].forEach((n) => enqueue(store, automationId, n));

    expect(runner.runBatch({ maxUnits: 100, maxMs: 1_000 }, () => false)).toBe(9); // 3 claims, 6 steps
    expect(writes).toHaveLength(1);
    const lines = writes[0]!.trim().split("\n").map((line) => JSON.parse(line) as { msg: string; step: string; message: string });
    expect(lines.map((line) => `${line.msg} ${line.step} ${line.message}`)).toEqual(
      [1, 2, 3].flatMap((n) => [`automation log a ${n}`, `automation log b ${n}`]),
    );
  });

  it("cuts a log line's output to 4,096 characters (a list or map: of its JSON), saying how much was left out (100 steps echoing a 10 KB context wrote 1 MB of log a run), and keeps a short one whole", () => {
    const echo = (name: string, messageCel: string): StepDefinition => ({ name, skipIfTrueCel: "", action: { kind: "log", messageCel } });
    const { store, automationId } = storeWithAutomation([echo("text", "ctx.trigger.s"), echo("object", "{'s': ctx.trigger.s}"), echo("short", "{'n': 1}")]);
    const writes: string[] = [];
    const capturing = createLogger("info", new Writable({ write: (chunk: Buffer, _encoding, done) => done(void writes.push(chunk.toString())) }));
    const runner = new ExecutionRunner({ store, clock: new ManualClock(1_000), log: capturing, programs: new ProgramCache() });
    store.transaction(() => enqueueExecution(store, Date.now(), { automationId, trigger: { s: "x".repeat(10_000) } }));
    runner.runBatch({ maxUnits: 100, maxMs: 1_000 }, () => false);
    const lines = writes.join("").trim().split("\n").map((line) => JSON.parse(line) as { step: string; message: unknown });
    expect(lines.map(({ step, message }) => ({ step, message }))).toEqual([
      { step: "text", message: `${"x".repeat(4_096)}… (5904 more characters)` },
      { step: "object", message: `{"s":"${"x".repeat(4_090)}… (5912 more characters)` },
      { step: "short", message: '{"n":1}' },
    ]);
  });

  it("writes a log line's output as a string whatever its type (a number, list or map as its JSON), so the field has one type in every line (a log store indexes the first type it sees)", () => {
    const echo = (name: string, messageCel: string): StepDefinition => ({ name, skipIfTrueCel: "", action: { kind: "log", messageCel } });
    const { store, automationId } = storeWithAutomation([echo("text", "'42'"), echo("number", "42"), echo("bool", "true"), echo("list", "[1, 'a']"), echo("none", "null")]);
    const writes: string[] = [];
    const capturing = createLogger("info", new Writable({ write: (chunk: Buffer, _encoding, done) => done(void writes.push(chunk.toString())) }));
    const runner = new ExecutionRunner({ store, clock: new ManualClock(1_000), log: capturing, programs: new ProgramCache() });
    store.transaction(() => enqueueExecution(store, Date.now(), { automationId, trigger: {} }));
    runner.runBatch({ maxUnits: 100, maxMs: 1_000 }, () => false);
    const lines = writes.join("").trim().split("\n").map((line) => JSON.parse(line) as { message: unknown });
    expect(lines.map(({ message }) => message)).toEqual(["42", "42", "true", '[1,"a"]', "null"]);
  });

  it("ends FAILED, alone, an execution whose unit throws something that is neither a step failure nor the store's, and runs the others", () => {
    const { store, automationId } = storeWithAutomation([logStep("a")]);
    const clock = new ManualClock(1_000);
    const runner = new ExecutionRunner({ store, clock, log, programs: new ProgramCache() });
    const ids = [1, 2, 3].map((n) => enqueue(store, automationId, n));
    // A bug that strikes the second execution every time it is run.
    const recordStep = store.executions.recordStep.bind(store.executions);
    vi.spyOn(store.executions, "recordStep").mockImplementation((executionId, record) => {
      if (executionId === ids[1]) throw new TypeError("a bug");
      recordStep(executionId, record);
    });

    runner.runBatch({ maxUnits: 100, maxMs: 1_000 }, () => false); // rolled back; the culprit ended on its own
    expect(store.executions.get(ids[1]!)).toMatchObject({ state: "FAILED", error: "internal error: TypeError: a bug" });
    expect(store.executions.steps(ids[1]!)).toEqual([]); // the bug was in recording the step: ended alone
    runner.runBatch({ maxUnits: 100, maxMs: 1_000 }, () => false);
    expect([ids[0], ids[2]].map((id) => store.executions.get(id!)?.state)).toEqual(["SUCCEEDED", "SUCCEEDED"]);
  });

  it("records the step a bug struck as FAILED with the internal error, so the execution shows where it ended", () => {
    const { store, automationId } = storeWithAutomation([logStep("a"), logStep("b"), logStep("c")]);
    const runner = new ExecutionRunner({ store, clock: new ManualClock(1_000), log, programs: new ProgramCache() });
    const id = enqueue(store, automationId, 1);
    // A bug that strikes once, when step b is recorded.
    const recordStep = store.executions.recordStep.bind(store.executions);
    let struck = false;
    vi.spyOn(store.executions, "recordStep").mockImplementation((executionId, record) => {
      if (record.name === "b" && !struck) {
        struck = true;
        throw new RangeError("a bug");
      }
      recordStep(executionId, record);
    });
    runner.runBatch({ maxUnits: 100, maxMs: 1_000 }, () => false);
    expect(store.executions.get(id)).toMatchObject({ state: "FAILED", error: "internal error: RangeError: a bug" });
    // Step a's record was rolled back with the batch (its effects too): it shows PENDING, as c does.
    expect(store.executions.steps(id).map((s) => [s.position, s.name, s.state, s.error])).toEqual([[1, "b", "FAILED", "internal error: RangeError: a bug"]]);
  });

  it("leaves every execution as it was, and throws, when the store fails (the worker tries again later)", () => {
    const { store, automationId } = storeWithAutomation([logStep("a")]);
    const runner = new ExecutionRunner({ store, clock: new ManualClock(1_000), log, programs: new ProgramCache() });
    const id = enqueue(store, automationId, 1);
    const full = new Database.SqliteError("database or disk is full", "SQLITE_FULL");
    const recordStep = vi.spyOn(store.executions, "recordStep").mockImplementation(() => {
      throw full;
    });

    expect(() => runner.runBatch({ maxUnits: 100, maxMs: 1_000 }, () => false)).toThrow(full);
    expect(store.executions.get(id)?.state).toBe("PENDING");
    recordStep.mockRestore();
    runner.runBatch({ maxUnits: 100, maxMs: 1_000 }, () => false);
    expect(store.executions.get(id)?.state).toBe("SUCCEEDED");
  });

  it("resumes from the store an execution a batch left RUNNING, as after a restart", () => {
    const { store, automationId } = storeWithAutomation([logStep("a"), logStep("b")]);
    const clock = new ManualClock(1_000);
    const id = enqueue(store, automationId, 1);
    new ExecutionRunner({ store, clock, log, programs: new ProgramCache() }).runBatch({ maxUnits: 2, maxMs: 1_000 }, () => false);

    const restarted = new ExecutionRunner({ store, clock, log, programs: new ProgramCache() });
    expect(restarted.runBatch({ maxUnits: 100, maxMs: 1_000 }, () => false)).toBe(2); // the claim and step "b"
    expect(store.executions.get(id)?.state).toBe("SUCCEEDED");
    expect(store.executions.steps(id).map((s) => s.name)).toEqual(["a", "b"]);
  });
});

describe("ExecutionWorker", () => {
  it("lets new executions gather for gatherMs after it is woken, then runs them in one transaction", async () => {
    const { store, automationId } = storeWithAutomation([logStep("a")]);
    // A batch bound in time (2 ms by default) could split three executions on a busy CI machine.
    const batch = { maxUnits: 256, maxMs: 10_000 };
    const worker = new ExecutionWorker({ store, clock: new ManualClock(), log, programs: new ProgramCache(), gatherMs: 1_000, batch });
    worker.start();
    await sleep(20); // the worker found nothing and sleeps
    const transaction = vi.spyOn(store, "transaction");

    const ids = [enqueue(store, automationId, 1)];
    worker.notify();
    await sleep(100);
    ids.push(enqueue(store, automationId, 2), enqueue(store, automationId, 3));
    worker.notify();
    await sleep(100);
    expect(ids.map((id) => store.executions.get(id)?.state)).toEqual(["PENDING", "PENDING", "PENDING"]);
    const before = transaction.mock.calls.length;

    await worker.whenIdle();
    expect(ids.map((id) => store.executions.get(id)?.state)).toEqual(["SUCCEEDED", "SUCCEEDED", "SUCCEEDED"]);
    // One batch: its transaction and a savepoint per step (nested calls), then an empty batch that found nothing.
    const topLevel = transaction.mock.calls.length - before - ids.length;
    expect(topLevel).toBeLessThanOrEqual(2);
    await worker.stop();
  });

  it("after a batch that ran the last unfinished execution, waits gatherMs before it looks again", async () => {
    const { store, automationId } = storeWithAutomation([logStep("a")]);
    const batchStarts: number[] = [];
    const original = ExecutionRunner.prototype.runBatch;
    const spy = vi.spyOn(ExecutionRunner.prototype, "runBatch").mockImplementation(function (this: ExecutionRunner, ...args) {
      batchStarts.push(performance.now());
      return original.apply(this, args);
    });
    const ids = [enqueue(store, automationId, 1), enqueue(store, automationId, 2)];
    const batch = { maxUnits: 256, maxMs: 10_000 }; // both executions in the first batch, however busy the machine
    const worker = new ExecutionWorker({ store, clock: new ManualClock(), log, programs: new ProgramCache(), gatherMs: 200, batch });
    worker.start();
    await worker.whenIdle();
    await worker.stop();
    spy.mockRestore();

    expect(ids.map((id) => store.executions.get(id)?.state)).toEqual(["SUCCEEDED", "SUCCEEDED"]);
    // The first batch ran both (the queue is then empty); the next look came a gather later, not at once.
    expect(batchStarts.length).toBeGreaterThanOrEqual(2);
    expect((batchStarts[1] ?? 0) - (batchStarts[0] ?? 0)).toBeGreaterThanOrEqual(190);
  });
});

/**
 * ExecutionRunner.runBatch failing as on a database another process holds locked, while `failing`;
 * the time of every attempt.
 */
function lockedBatches(): { attempts: number[]; failing: boolean; restore: () => void } {
  const busy = new Database.SqliteError("database is locked", "SQLITE_BUSY");
  const runBatch = ExecutionRunner.prototype.runBatch;
  const batches = {
    attempts: [] as number[],
    failing: true,
    restore: () => spy.mockRestore(),
  };
  const spy = vi.spyOn(ExecutionRunner.prototype, "runBatch").mockImplementation(function (this: ExecutionRunner, ...args) {
    batches.attempts.push(performance.now());
    if (batches.failing) throw busy;
    return runBatch.apply(this, args);
  });
  return batches;
}

describe("ExecutionWorker when the store fails", () => {
  it("tries again a poll interval later, however many executions are handed over meanwhile (each woke it: an error line each, 80 a second under load)", async () => {
    const { store, automationId } = storeWithAutomation([logStep("a")]);
    const full = new Database.SqliteError("database or disk is full", "SQLITE_FULL");
    const attempts: number[] = [];
    const runBatch = vi.spyOn(ExecutionRunner.prototype, "runBatch").mockImplementation(() => {
      attempts.push(performance.now());
      throw full;
    });
    const worker = new ExecutionWorker({ store, clock: new ManualClock(), log, programs: new ProgramCache(), gatherMs: 0, pollIntervalMs: 300 });
    worker.start();
    const started = performance.now();
    while (performance.now() - started < 700) {
      enqueue(store, automationId, attempts.length);
      worker.notify();
      await sleep(10);
    }
    await worker.stop();
    runBatch.mockRestore();
    expect(attempts.length).toBeGreaterThanOrEqual(2);
    expect(attempts.length).toBeLessThanOrEqual(4); // one at the start, then one each 300 ms
  });

  it("waits twice as long after each failed attempt in a row, up to 30 poll intervals, and a poll interval again once one succeeds (a database locked by another process stalled the thread 5 s in every 6)", async () => {
    const { store, automationId } = storeWithAutomation([logStep("a")]);
    const batches = lockedBatches();
    const { attempts } = batches;
    const writes: string[] = [];
    const capturing = createLogger("info", new Writable({ write: (chunk: Buffer, _encoding, done) => done(void writes.push(chunk.toString())) }));
    const failureLines = () =>
      writes
        .join("")
        .trim()
        .split("\n")
        .map((line) => JSON.parse(line) as { msg: string; failedAttempts: number; retryInMs: number })
        .filter((line) => line.msg.startsWith("automation worker: execution attempt failed"))
        .map((line) => [line.failedAttempts, line.retryInMs]);
    const worker = new ExecutionWorker({ store, clock: new ManualClock(), log: capturing, programs: new ProgramCache(), gatherMs: 0, pollIntervalMs: 5 });
    const id = enqueue(store, automationId, 1);
    worker.start();
    while (attempts.length < 8) await sleep(5);
    expect(failureLines().slice(0, 7)).toEqual([[1, 5], [2, 10], [3, 20], [4, 40], [5, 80], [6, 150], [7, 150]]);
    const gaps = attempts.slice(1, 8).map((at, i) => at - attempts[i]!);
    expect(gaps.every((gap, i) => gap >= [5, 10, 20, 40, 80, 150, 150][i]! - 1), gaps.join(", ")).toBe(true);

    batches.failing = false;
    await worker.whenIdle();
    expect(store.executions.get(id)?.state).toBe("SUCCEEDED");
    // Failing again after a success starts from one poll interval.
    const failedBefore = failureLines().length;
    batches.failing = true;
    enqueue(store, automationId, 2);
    worker.notify();
    while (failureLines().length === failedBefore) await sleep(5);
    expect(failureLines().at(-1)).toEqual([1, 5]);
    await worker.stop();
    batches.restore();
  });

  it("ends a long pause after failures a poll interval after a hand-off, which says a write committed (after a lock ended, new executions waited out the rest of a 30 s pause)", async () => {
    const { store, automationId } = storeWithAutomation([logStep("a")]);
    const batches = lockedBatches();
    const { attempts } = batches;
    // Pauses of 20, 40, ... 600 ms (30 intervals): after seven failures, 600 ms.
    const worker = new ExecutionWorker({ store, clock: new ManualClock(), log, programs: new ProgramCache(), gatherMs: 0, pollIntervalMs: 20 });
    enqueue(store, automationId, 1);
    worker.start();
    while (attempts.length < 7) await sleep(5);
    batches.failing = false;
    const committedAt = performance.now();
    const id = enqueue(store, automationId, 2);
    worker.notify();
    await worker.whenIdle();
    expect(store.executions.get(id)?.state).toBe("SUCCEEDED");
    expect(performance.now() - committedAt).toBeLessThan(400); // a poll interval (20 ms), not the rest of 600
    await worker.stop();
    batches.restore();
  });

  it("takes no write lock while there is nothing to run: another process's lock costs an idle worker nothing (it waited out the busy timeout at every poll, an error line each)", async () => {
    const path = `${tempDir()}/accessd.db`;
    const store = Store.open(path);
    store.db.pragma("busy_timeout = 50");
    const writes: string[] = [];
    const capturing = createLogger("info", new Writable({ write: (chunk: Buffer, _encoding, done) => done(void writes.push(chunk.toString())) }));
    const worker = new ExecutionWorker({ store, clock: new ManualClock(), log: capturing, programs: new ProgramCache(), gatherMs: 0, pollIntervalMs: 20 });
    worker.start(); // (its start and its stop write the worker's state: before and after the lock)
    await sleep(50);
    const holder = new Database(path);
    holder.exec("BEGIN IMMEDIATE");
    try {
      await sleep(300); // some 15 polls
    } finally {
      holder.exec("ROLLBACK");
      holder.close();
    }
    await worker.stop();
    await store.close();
    expect(writes.join("")).not.toContain("execution attempt failed");
  });

  it("notes a damaged file with the store (which then answers not ready), and goes on trying", async () => {
    const { store } = storeWithAutomation([logStep("a")]);
    const damaged = new Database.SqliteError("database disk image is malformed", "SQLITE_CORRUPT");
    const runBatch = vi.spyOn(ExecutionRunner.prototype, "runBatch").mockImplementation(() => {
      throw damaged;
    });
    const heard: unknown[] = [];
    store.onDamaged = (e) => heard.push(e);
    expect(store.ping()).toBe(true);
    const worker = new ExecutionWorker({ store, clock: new ManualClock(), log, programs: new ProgramCache(), gatherMs: 0, pollIntervalMs: 50 });
    worker.start();
    await sleep(200);
    await worker.stop();
    runBatch.mockRestore();
    expect(store.ping()).toBe(false);
    expect(heard).toEqual([damaged]); // once, however many attempts met it in the spell
  });
});

describe("CrashLoopGuard", () => {
  const mark = (store: Store) => JSON.parse(store.settings.get(carefulStepSetting)?.toString() ?? "null") as unknown;

  it("is careful only after a start that no graceful stop followed", () => {
    const { store } = storeWithAutomation([logStep("a")]);
    const first = new CrashLoopGuard(store, log);
    first.started();
    expect(first.careful).toBe(false);
    first.stopped();
    const afterCleanStop = new CrashLoopGuard(store, log);
    afterCleanStop.started();
    expect(afterCleanStop.careful).toBe(false);
    // No stopped(): the process died.
    const afterCrash = new CrashLoopGuard(store, log, { carefulUnits: 2 });
    afterCrash.started();
    expect(afterCrash.careful).toBe(true);
    afterCrash.ranCarefully();
    expect(afterCrash.careful).toBe(true);
    afterCrash.ranCarefully();
    expect(afterCrash.careful).toBe(false);
    const queueEmpty = new CrashLoopGuard(store, log, { carefulUnits: 2 });
    queueEmpty.started();
    queueEmpty.ranCarefully(true);
    expect(queueEmpty.careful).toBe(false);
  });

  it("counts a step's careful starts across processes, not tries within one, and gives up past the limit", () => {
    const { store } = storeWithAutomation([logStep("a")]);
    const start = () => {
      const guard = new CrashLoopGuard(store, log, { maxCarefulAttempts: 2 });
      guard.started(); // never stopped: each one is a process that died
      return guard;
    };
    start();
    const second = start();
    expect(second.enterStep("e1", 0)).toBe(1);
    expect(second.enterStep("e1", 0)).toBe(1); // its batch rolled back and tried again: the same process
    expect(mark(store)).toEqual({ executionId: "e1", position: 0, attempts: 1 });
    const third = start();
    expect(third.enterStep("e1", 0)).toBe(2);
    const fourth = start();
    const attempts = fourth.enterStep("e1", 0);
    expect(fourth.exhausted(attempts)).toBe(true);
    expect(mark(store)).toEqual({ executionId: "e1", position: 0, attempts: 2 });
    expect(fourth.enterStep("e1", 1)).toBe(1); // another step starts over
    expect(fourth.enterStep("e2", 0)).toBe(1);
  });
});

describe("ExecutionWorker after an unclean stop", () => {
  it("marks nothing after a graceful stop; after an unclean one, marks each of its first units' steps before running it, one unit a transaction", async () => {
    const { store, automationId } = storeWithAutomation([logStep("a"), logStep("b")]);
    const worker = () => new ExecutionWorker({ store, clock: new ManualClock(), log, programs: new ProgramCache(), gatherMs: 0, crashLoop: { carefulUnits: 4 } });
    const clean = worker();
    clean.start();
    const first = [enqueue(store, automationId, 1), enqueue(store, automationId, 2)];
    clean.notify();
    await clean.whenIdle();
    await clean.stop();
    expect(first.map((id) => store.executions.get(id)?.state)).toEqual(["SUCCEEDED", "SUCCEEDED"]);
    expect(store.settings.get(carefulStepSetting)).toBeUndefined(); // the hot path pays nothing
    expect(store.settings.get(workerStateSetting)?.toString()).toBe("stopped");

    store.settings.put(workerStateSetting, Buffer.from("running")); // as a process that died leaves it
    const ids = [enqueue(store, automationId, 3), enqueue(store, automationId, 4)];
    const put = vi.spyOn(store.settings, "put");
    const transaction = vi.spyOn(store, "transaction");
    const careful = worker();
    careful.start();
    await careful.whenIdle();
    await careful.stop();
    expect(ids.map((id) => store.executions.get(id)?.state)).toEqual(["SUCCEEDED", "SUCCEEDED"]);
    const marks = put.mock.calls.filter(([name]) => name === carefulStepSetting).map(([, value]) => JSON.parse(value.toString()) as unknown);
    // Four careful units: the first execution's claim and its steps "a" and "b", the second's
    // claim; then its steps run as a batch again, unmarked.
    expect(marks).toEqual([
      { executionId: ids[0], position: 0, attempts: 1 },
      { executionId: ids[0], position: 1, attempts: 1 },
    ]);
    expect(transaction.mock.calls.length).toBeGreaterThanOrEqual(5); // 4 careful units, then a batch
  });

  it("is careful for 257 units by default: a whole batch of the process that died (256) and the claim before it", async () => {
    const { store, automationId } = storeWithAutomation([logStep("a"), logStep("b")]);
    const ids = Array.from({ length: 150 }, (_, i) => enqueue(store, automationId, i));
    store.settings.put(workerStateSetting, Buffer.from("running")); // as a process that died leaves it
    const put = vi.spyOn(store.settings, "put");
    const worker = new ExecutionWorker({ store, clock: new ManualClock(), log, programs: new ProgramCache(), gatherMs: 0 });
    worker.start();
    await worker.whenIdle();
    await worker.stop();
    expect(ids.every((id) => store.executions.get(id)?.state === "SUCCEEDED")).toBe(true);
    const marks = put.mock.calls.filter(([name]) => name === carefulStepSetting).map(([, value]) => JSON.parse(value.toString()) as { executionId: string; position: number });
    // Units come as claim, step "a", step "b": 257 units are 85 whole executions (255 units),
    // then the 86th's claim and its step "a" (256 units would end at that claim, 258 include "b").
    expect(marks).toHaveLength(85 * 2 + 1);
    expect(marks.at(-1)).toEqual({ executionId: ids[85], position: 0, attempts: 1 });
  });

  it("ends the execution whose step was running when the process died in two careful starts in a row, and runs the queue behind it", async () => {
    const { store, automationId } = storeWithAutomation([logStep("a"), logStep("b")]);
    const poisoned = enqueue(store, automationId, 1);
    const next = enqueue(store, automationId, 2);
    // What two careful starts that died in step "b" of `poisoned` leave behind.
    store.transaction(() => {
      store.executions.markRunning(poisoned, 1_000);
      store.executions.recordStep(poisoned, { position: 0, name: "a", state: "SUCCEEDED", output: "1", error: "", startedAt: 1_000, finishedAt: 1_000 });
    });
    store.settings.put(workerStateSetting, Buffer.from("running"));
    store.settings.put(carefulStepSetting, Buffer.from(JSON.stringify({ executionId: poisoned, position: 1, attempts: 2 })));

    const worker = new ExecutionWorker({ store, clock: new ManualClock(), log, programs: new ProgramCache(), gatherMs: 0 });
    worker.start();
    await worker.whenIdle();
    await worker.stop();
    expect(store.executions.get(poisoned)).toMatchObject({
      state: "FAILED",
      error: 'step "b" was running when the process died, in 2 starts in a row after an unclean stop (each time alone); it is not run again',
    });
    // The step it died in shows FAILED, not PENDING.
    expect(store.executions.steps(poisoned).map((s) => [s.name, s.state, s.error])).toEqual([
      ["a", "SUCCEEDED", ""],
      ["b", "FAILED", "was running when the process died, in 2 starts in a row after an unclean stop (each time alone); it is not run again"],
    ]);
    expect(store.executions.get(next)?.state).toBe("SUCCEEDED");
  });
});
