import { describe, expect, it } from "vitest";
import type { Store } from "../src/store/store.js";
import type { ExecutionFilter, ExecutionState } from "../src/store/executions-repository.js";
import { Writable } from "node:stream";
import { v7 as uuidv7 } from "uuid";
import { ManualClock } from "../src/clock.js";
import { executionChunkRows, startHousekeeping } from "../src/jobs/housekeeping.js";
import { createLogger } from "../src/logger.js";
import { newId } from "../src/store/ids.js";
import { until } from "./support/served-process.js";
import { inMemoryStores } from "./support/store-fixtures.js";

const stores = inMemoryStores();
const storeWithAutomation = () => stores.withAutomation();

/** The plain answer: a GROUP BY over the whole table. */
function countedFromScratch(store: Store): Record<ExecutionState, number> {
  const counts: Record<ExecutionState, number> = { PENDING: 0, RUNNING: 0, SUCCEEDED: 0, FAILED: 0 };
  const rows = store.db.prepare<[], { state: ExecutionState; n: number }>("SELECT state, COUNT(*) AS n FROM automation_executions GROUP BY state").all();
  for (const row of rows) counts[row.state] = row.n;
  return counts;
}

/** accessd_automation_executions{state}: counted incrementally, never wrong. */
describe("ExecutionsRepository.countByState", () => {
  it("agrees with a full count through thousands of executions created, started and finished in creation order", () => {
    const { store, automationId } = storeWithAutomation();
    const unfinished: string[] = [];
    let seed = 7;
    const random = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
    for (let round = 0; round < 300; round++) {
      store.transaction(() => {
        for (let i = Math.floor(random() * 20); i > 0; i--) {
          const id = newId();
          store.executions.insertPending({ id, automationId, trigger: {}, eventId: "", now: round });
          unfinished.push(id);
        }
        // The worker: the oldest first, sometimes leaving one RUNNING part-way.
        for (let i = Math.floor(random() * 20); i > 0 && unfinished.length > 0; i--) {
          const id = unfinished[0] ?? "";
          if (random() < 0.2) {
            store.executions.markRunning(id, round);
            break;
          }
          store.executions.finish(id, random() < 0.1 ? "FAILED" : "SUCCEEDED", "", round);
          unfinished.shift();
        }
      });
      if (round % 3 === 0) expect(store.executions.countByState()).toEqual(countedFromScratch(store));
    }
    expect(store.executions.countByState()).toEqual(countedFromScratch(store));
  });

  it("does not count what a transaction rolled back, nor settle rows it read inside one", () => {
    const { store, automationId } = storeWithAutomation();
    const first = newId();
    store.transaction(() => store.executions.insertPending({ id: first, automationId, trigger: {}, eventId: "", now: 0 }));
    expect(store.executions.countByState()).toEqual({ PENDING: 1, RUNNING: 0, SUCCEEDED: 0, FAILED: 0 });
    expect(() =>
      store.transaction(() => {
        store.executions.finish(first, "SUCCEEDED", "", 1);
        expect(store.executions.countByState()).toEqual({ PENDING: 0, RUNNING: 0, SUCCEEDED: 1, FAILED: 0 });
        throw new Error("roll back");
      }),
    ).toThrow("roll back");
    expect(store.executions.countByState()).toEqual({ PENDING: 1, RUNNING: 0, SUCCEEDED: 0, FAILED: 0 });
  });

  it("counts again from scratch when ids come out of creation order (the clock stepped back across a restart)", () => {
    const { store, automationId } = storeWithAutomation();
    for (let i = 0; i < 5; i++) {
      const id = newId();
      store.transaction(() => {
        store.executions.insertPending({ id, automationId, trigger: {}, eventId: "", now: 0 });
        store.executions.finish(id, "SUCCEEDED", "", 0);
      });
    }
    expect(store.executions.countByState().SUCCEEDED).toBe(5);
    // An id older than everything settled, created and finished between two scrapes.
    const fromThePast = "00000000-0000-7000-8000-000000000000";
    store.transaction(() => {
      store.executions.insertPending({ id: fromThePast, automationId, trigger: {}, eventId: "", now: 0 });
      store.executions.finish(fromThePast, "FAILED", "", 0);
    });
    expect(store.executions.countByState()).toEqual({ PENDING: 0, RUNNING: 0, SUCCEEDED: 5, FAILED: 1 });
  });
});

const day = 86_400_000;

/** Executions created at `msecs` (by their UUIDv7 ids) in `state`, each with one step record. */
function executionsAt(store: Store, automationId: string, msecs: number, states: readonly ExecutionState[]): string[] {
  return store.transaction(() =>
    states.map((state, i) => {
      const id = uuidv7({ msecs, seq: i });
      store.executions.insertPending({ id, automationId, trigger: { n: i }, eventId: "", now: msecs });
      if (state === "RUNNING") store.executions.markRunning(id, msecs);
      if (state === "SUCCEEDED" || state === "FAILED") {
        store.executions.recordStep(id, { position: 0, name: "s", state: "SUCCEEDED", output: "out", error: "", startedAt: msecs, finishedAt: msecs });
        store.executions.finish(id, state, "", msecs);
      }
      return id;
    }),
  );
}

const stepRecordCount = (store: Store): number =>
  store.db.prepare<[], number>("SELECT COUNT(*) FROM automation_step_executions").pluck().get() ?? 0;

/** ACCESSD_EXECUTION_RETENTION: the automations' history does not grow for good. */
describe("ExecutionsRepository.deleteFinishedBefore", () => {
  it("deletes finished executions created before the time, with their step records, and never an unfinished one", () => {
    const { store, automationId } = storeWithAutomation();
    const now = 100 * day;
    const old = executionsAt(store, automationId, now - 31 * day, ["SUCCEEDED", "FAILED", "PENDING", "RUNNING", "SUCCEEDED"]);
    const recent = executionsAt(store, automationId, now - 29 * day, ["SUCCEEDED", "FAILED", "PENDING"]);
    expect(stepRecordCount(store)).toBe(5);
    expect(store.executions.deleteFinishedBefore(now - 30 * day, 2)).toBe(2);
    expect(store.executions.deleteFinishedBefore(now - 30 * day, 2)).toBe(1);
    expect(store.executions.deleteFinishedBefore(now - 30 * day, 2)).toBe(0);
    const left = store.executions.listAfter({ automationId: "", state: undefined }, undefined, 100).map((e) => e.id);
    expect(left).toEqual([old[2], old[3], ...recent]);
    expect(store.executions.get(old[0] ?? "")).toBeUndefined();
    expect(stepRecordCount(store)).toBe(2); // the recent finished ones'
  });

  it("keeps an execution that waited in the queue past the retention until a retention after it finished", () => {
    const { store, automationId } = storeWithAutomation();
    const now = 100 * day;
    const [waited] = executionsAt(store, automationId, now - 31 * day, ["PENDING"]);
    store.transaction(() => store.executions.finish(waited ?? "", "SUCCEEDED", "", now - day));
    expect(store.executions.deleteFinishedBefore(now - 30 * day, 10)).toBe(0);
    expect(store.executions.get(waited ?? "")?.state).toBe("SUCCEEDED");
    expect(store.executions.deleteFinishedBefore(now + 30 * day, 10)).toBe(1);
  });

  it("keeps countByState exact across deletions, and runs outside a transaction only (its count corrections assume it committed)", () => {
    const { store, automationId } = storeWithAutomation();
    for (let d = 0; d < 10; d++) executionsAt(store, automationId, d * day, ["SUCCEEDED", "FAILED", "SUCCEEDED", d === 3 ? "RUNNING" : "SUCCEEDED"]);
    executionsAt(store, automationId, 10 * day, ["PENDING", "SUCCEEDED"]);
    expect(store.executions.countByState()).toEqual(countedFromScratch(store)); // settles what it can
    for (let d = 1; d <= 11; d++) {
      store.executions.deleteFinishedBefore(d * day, 2);
      expect(store.executions.countByState()).toEqual(countedFromScratch(store));
      // And what was settled before the deletions moves on correctly.
      executionsAt(store, automationId, (10 + d) * day, ["SUCCEEDED"]);
      expect(store.executions.countByState()).toEqual(countedFromScratch(store));
    }
    expect(countedFromScratch(store).RUNNING).toBe(1); // the old RUNNING one is still there
    const before = countedFromScratch(store);
    expect(() => store.transaction(() => store.executions.deleteFinishedBefore(30 * day, 2))).toThrow("outside a transaction");
    expect(countedFromScratch(store)).toEqual(before);
  });

  it("counts finishes since a start: deletions do not lower the count, and it starts at 0", () => {
    const { store, automationId } = storeWithAutomation();
    executionsAt(store, automationId, day, ["SUCCEEDED", "FAILED", "PENDING"]);
    const atStart = store.executions.countByState();
    expect(store.executions.countsWithFinishedTotals(atStart).finished).toEqual({ SUCCEEDED: 0, FAILED: 0 });
    const [pending] = store.executions.listAfter({ automationId: "", state: "PENDING" }, undefined, 1);
    store.transaction(() => store.executions.finish(pending?.id ?? "", "SUCCEEDED", "", day));
    executionsAt(store, automationId, 2 * day, ["FAILED"]);
    expect(store.executions.countsWithFinishedTotals(atStart).finished).toEqual({ SUCCEEDED: 1, FAILED: 1 });
    expect(store.executions.deleteFinishedBefore(3 * day, 10)).toBe(4);
    expect(store.executions.countsWithFinishedTotals(atStart)).toEqual({
      stored: { PENDING: 0, RUNNING: 0, SUCCEEDED: 0, FAILED: 0 },
      finished: { SUCCEEDED: 1, FAILED: 1 },
    });
  });
});

describe("housekeeping of executions", () => {
  it("deletes finished executions past ACCESSD_EXECUTION_RETENTION in chunks, turning the event loop between them, and says how many", async () => {
    const { store, automationId } = storeWithAutomation();
    const clock = new ManualClock(40 * day);
    const recent = executionsAt(store, automationId, 39 * day, ["SUCCEEDED", "FAILED"]);
    const lines: string[] = [];
    const log = createLogger("info", new Writable({ write: (chunk: Buffer, _encoding, done) => (lines.push(chunk.toString()), done()) }));
    const keeping = startHousekeeping({ store, clock, log, eventRetentionMs: day, executionRetentionMs: undefined });
    const job = startHousekeeping({ store, clock, log, eventRetentionMs: day, executionRetentionMs: 30 * day });
    await Promise.all([keeping.firstPass, job.firstPass]);

    // Three chunks of old finished executions, and one in seven of them unfinished.
    const states = Array.from({ length: 3 * executionChunkRows + 10 }, (_, i): ExecutionState => (i % 7 === 0 ? "PENDING" : "SUCCEEDED"));
    const old = executionsAt(store, automationId, 5 * day, states);
    const unfinishedOld = old.filter((_, i) => states[i] === "PENDING");
    expect((await keeping.runOnce()).executions).toBe(0); // forever: nothing goes
    keeping.stop();
    let turns = 0;
    let counting = true;
    const count = () => {
      if (!counting) return;
      turns++;
      setImmediate(count);
    };
    setImmediate(count);
    expect((await job.runOnce()).executions).toBe(old.length - unfinishedOld.length);
    counting = false;
    expect(turns).toBeGreaterThanOrEqual(3); // a turn after each chunk
    expect(store.executions.listAfter({ automationId: "", state: undefined }, undefined, 1000).map((e) => e.id)).toEqual([...unfinishedOld, ...recent]);
    expect(store.executions.countByState()).toEqual(countedFromScratch(store));
    expect((await job.runOnce()).executions).toBe(0);

    await until("the log line is written", () => lines.join("").includes("older than ACCESSD_EXECUTION_RETENTION"), 5_000);
    const said = lines.join("").split("\n").filter((line) => line.includes("ACCESSD_EXECUTION_RETENTION"));
    expect(said.map((line) => JSON.parse(line) as Record<string, unknown>)).toEqual([
      expect.objectContaining({ level: 30, deleted: old.length - unfinishedOld.length, before: new Date(10 * day).toISOString() }),
    ]);
    job.stop();
  });
});

/**
 * ListAutomationExecutions' filters: finished executions come from the finished (state, id)
 * indexes, unfinished ones from the worker's queue index (migration 005); every filter, paged,
 * returns exactly the matching executions in creation order.
 */
describe("ExecutionsRepository.listAfter", () => {
  it("filters by state and automation, paged, whichever index holds the state", () => {
    const { store, automationId } = storeWithAutomation();
    const otherId = newId();
    store.transaction(() => {
      const [template] = store.automations.listAfter(undefined, 1);
      if (template === undefined) throw new Error("no automation");
      store.automations.insert({ ...template, id: otherId });
    });
    const states: ExecutionState[] = ["PENDING", "RUNNING", "SUCCEEDED", "FAILED"];
    const all: { id: string; automationId: string; state: ExecutionState }[] = [];
    store.transaction(() => {
      for (let i = 0; i < 48; i++) {
        const id = newId();
        const owner = i % 3 === 0 ? otherId : automationId;
        const state = states[(i * 7) % 4] ?? "PENDING";
        store.executions.insertPending({ id, automationId: owner, trigger: {}, eventId: "", now: i });
        if (state === "RUNNING") store.executions.markRunning(id, i);
        if (state === "SUCCEEDED" || state === "FAILED") store.executions.finish(id, state, "", i);
        all.push({ id, automationId: owner, state });
      }
    });
    const paged = (filter: ExecutionFilter): string[] => {
      const ids: string[] = [];
      for (let after: string | undefined; ; ) {
        const page = store.executions.listAfter(filter, after, 2);
        ids.push(...page.map((e) => e.id));
        if (page.length < 2) return ids;
        after = page[page.length - 1]?.id;
      }
    };
    for (const owner of ["", automationId, otherId]) {
      for (const state of [undefined, ...states]) {
        const expected = all.filter((e) => (owner === "" || e.automationId === owner) && (state === undefined || e.state === state));
        expect(expected.length).toBeGreaterThan(0);
        expect(paged({ automationId: owner, state })).toEqual(expected.map((e) => e.id));
      }
    }
  });
});

/**
 * Deleting an automation keeps the versions its executions still name (so those can finish and
 * be read), found without an (automation_id) index of the executions (migration 012): the
 * finished ones through their state index, the unfinished ones in the worker's queue.
 */
describe("AutomationsRepository.delete", () => {
  it("keeps the versions a finished or unfinished execution names, and only those", () => {
    const { store, automationId } = storeWithAutomation();
    const [template] = store.automations.listAfter(undefined, 1);
    if (template === undefined) throw new Error("no automation");
    const otherId = newId();
    const execute = (owner: string, end?: "SUCCEEDED" | "FAILED", running = false) => {
      const id = newId();
      store.executions.insertPending({ id, automationId: owner, trigger: {}, eventId: "", now: 1 });
      if (running) store.executions.markRunning(id, 1);
      if (end !== undefined) store.executions.finish(id, end, "", 1);
    };
    store.transaction(() => {
      store.automations.insert({ ...template, id: otherId });
      execute(automationId, "SUCCEEDED"); // version 1
      for (let version = 2; version <= 6; version++) {
        store.automations.update({ ...template, version, updatedAt: version });
        if (version === 2) execute(automationId, "FAILED");
        if (version === 3) execute(automationId);
        if (version === 4) execute(automationId, undefined, true);
        // version 5: no execution of this automation; another automation's execution of its own version 1
        if (version === 5) execute(otherId, "SUCCEEDED");
      }
      expect(store.automations.delete(automationId)).toBe(true);
    });
    const kept = [1, 2, 3, 4, 5, 6].filter((version) => store.automations.versionSteps(automationId, version) !== undefined);
    expect(kept).toEqual([1, 2, 3, 4]);
    expect(store.automations.versionSteps(otherId, 1)).toBeDefined();
  });
});
