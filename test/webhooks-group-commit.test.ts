import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
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

  it("commits the units of one event-loop turn in one transaction and settles each only after the commit", async () => {
    const commits = new GroupCommit(store);
    let transactions = 0;
    const original = store.transaction.bind(store);
    store.transaction = <T>(fn: () => T): T => {
      if (!store.db.inTransaction) transactions++;
      return original(fn);
    };
    const ids = Array.from({ length: 20 }, () => newId());
    const seenAtSettle: boolean[] = [];
    await Promise.all(
      ids.map((id) => commits.run(insertApp(id)).then(() => seenAtSettle.push(reader.apps.get(id) !== undefined))),
    );
    expect(transactions).toBe(1);
    expect(seenAtSettle).toEqual(ids.map(() => true));
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
