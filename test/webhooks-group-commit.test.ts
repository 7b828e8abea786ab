import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setImmediate as nextTurn, setTimeout as sleep } from "node:timers/promises";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { newId } from "../src/store/ids.js";
import { Store } from "../src/store/store.js";
import { GroupCommit } from "../src/webhooks/group-commit.js";

describe("group commit of webhook acceptances", () => {
  let dir: string;
  let store: Store;
  let reader: Store;

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), "accessd-group-commit-"));
    store = Store.open(join(dir, "accessd.db"));
    reader = Store.open(join(dir, "accessd.db")); // a second connection sees only what committed
  });

  afterEach(() => {
    reader.close();
    store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const insertApp = (id: string) => () => {
    store.apps.insert({ id, displayName: id, description: "", createdAt: 1, updatedAt: 1 });
    return id;
  };

  /** Counts the store's outermost transactions (one per commit). */
  const countTransactions = () => {
    const counter = { transactions: 0 };
    const original = store.transaction.bind(store);
    store.transaction = <T>(fn: () => T): T => {
      if (!store.db.inTransaction) counter.transactions++;
      return original(fn);
    };
    return counter;
  };

  it("commits the units of one event-loop turn in one transaction and settles each only after the commit", async () => {
    const commits = new GroupCommit(store);
    const counter = countTransactions();
    const ids = Array.from({ length: 20 }, () => newId());
    const seenAtSettle: boolean[] = [];
    await Promise.all(
      ids.map((id) => commits.run(insertApp(id)).then(() => seenAtSettle.push(reader.apps.get(id) !== undefined))),
    );
    expect(counter.transactions).toBe(1);
    expect(seenAtSettle).toEqual(ids.map(() => true));
  });

  it("keeps commits minIntervalMs apart: units of the turns in between share the next commit", async () => {
    const commits = new GroupCommit(store, { minIntervalMs: 300 });
    const counter = countTransactions();
    await commits.run(insertApp(newId())); // after a quiet spell: committed at the end of its turn
    expect(counter.transactions).toBe(1);
    const ids = [newId(), newId(), newId()];
    const settled: Promise<string>[] = [];
    for (const id of ids) {
      settled.push(commits.run(insertApp(id))); // one unit a turn, as at moderate load
      await nextTurn();
    }
    expect(counter.transactions).toBe(1); // the three wait for the interval...
    expect(ids.map((id) => reader.apps.get(id))).toEqual([undefined, undefined, undefined]);
    await Promise.all(settled);
    expect(counter.transactions).toBe(2); // ...and share one commit
    expect(ids.every((id) => reader.apps.get(id) !== undefined)).toBe(true);
  });

  it("does not hold a group of smallGroup units or more, however recent the last commit", async () => {
    const commits = new GroupCommit(store, { minIntervalMs: 300, smallGroup: 4 });
    await commits.run(insertApp(newId()));
    const group = Promise.all(Array.from({ length: 4 }, () => commits.run(insertApp(newId()))));
    const winner = await Promise.race([group.then(() => "committed"), sleep(100).then(() => "waiting")]);
    expect(winner).toBe("committed");
  });

  it("does not hold a unit that comes after a quiet spell", async () => {
    const commits = new GroupCommit(store, { minIntervalMs: 100 });
    await commits.run(insertApp(newId()));
    await sleep(150);
    const first = commits.run(insertApp(newId()));
    const winner = await Promise.race([first.then(() => "committed"), sleep(50).then(() => "waiting")]);
    expect(winner).toBe("committed");
  });

  it("lets a later unit of the same group see an earlier one's writes (a repeated event id is refused)", async () => {
    const commits = new GroupCommit(store);
    const id = newId();
    const once = () => (store.apps.get(id) === undefined ? insertApp(id)() : "duplicate");
    const answers = await Promise.all(Array.from({ length: 20 }, () => commits.run(once)));
    expect(answers.filter((a) => a === id)).toHaveLength(1);
    expect(answers.filter((a) => a === "duplicate")).toHaveLength(19);
  });

  it("rolls back only the unit that throws; the others of its group are recorded", async () => {
    const commits = new GroupCommit(store);
    const [a, b, c] = [newId(), newId(), newId()];
    const failing = () => {
      insertApp(b)(); // written, then rolled back with its unit
      throw new Error("unit failed");
    };
    const outcomes = await Promise.allSettled([commits.run(insertApp(a)), commits.run(failing), commits.run(insertApp(c))]);
    expect(outcomes.map((o) => o.status)).toEqual(["fulfilled", "rejected", "fulfilled"]);
    expect((outcomes[1] as PromiseRejectedResult).reason).toEqual(new Error("unit failed"));
    expect([a, b, c].map((id) => reader.apps.get(id) !== undefined)).toEqual([true, false, true]);
  });

  it("rejects every unit of a group whose commit fails, and records none of them", async () => {
    const commits = new GroupCommit(store);
    const ids = [newId(), newId()];
    const original = store.transaction.bind(store);
    store.transaction = <T>(fn: () => T): T => {
      if (store.db.inTransaction) return original(fn);
      return original(() => {
        const result = fn();
        throw new Error("disk I/O error"); // as if COMMIT failed: the transaction is rolled back
        return result;
      });
    };
    const outcomes = await Promise.allSettled(ids.map((id) => commits.run(insertApp(id))));
    expect(outcomes.map((o) => o.status)).toEqual(["rejected", "rejected"]);
    expect(ids.map((id) => reader.apps.get(id))).toEqual([undefined, undefined]);
  });
});
