import { describe, expect, it } from "vitest";
import type { Store } from "../src/store/store.js";
import type { ExecutionFilter, ExecutionState } from "../src/store/executions-repository.js";
import { newId } from "../src/store/ids.js";
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
