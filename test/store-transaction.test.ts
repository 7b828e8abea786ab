import { afterEach, describe, expect, it, vi } from "vitest";
import { damageMemoryMs, Store } from "../src/store/store.js";

const stores: Store[] = [];
afterEach(async () => {
  for (const store of stores.splice(0)) await store.close();
});

function storeWithTable(): Store {
  const store = Store.open(":memory:");
  stores.push(store);
  store.db.exec("CREATE TABLE t (v TEXT PRIMARY KEY) STRICT");
  return store;
}

const insert = (store: Store, v: string) => store.db.prepare("INSERT INTO t (v) VALUES (?)").run(v);
const rows = (store: Store) => store.db.prepare<[], string>("SELECT v FROM t ORDER BY v").pluck().all();

/** Store.transaction: what every write of the service commits through. */
describe("Store.transaction", () => {
  it("commits what the callback wrote and returns its value", () => {
    const store = storeWithTable();
    expect(store.transaction(() => (insert(store, "a"), 42))).toBe(42);
    expect(store.db.inTransaction).toBe(false);
    expect(rows(store)).toEqual(["a"]);
  });

  it("rolls back everything when the callback throws, and rethrows", () => {
    const store = storeWithTable();
    expect(() =>
      store.transaction(() => {
        insert(store, "a");
        throw new Error("boom");
      }),
    ).toThrow("boom");
    expect(store.db.inTransaction).toBe(false);
    expect(rows(store)).toEqual([]);
  });

  it("rolls back only a nested call's writes when it throws; the outer transaction commits the rest", () => {
    const store = storeWithTable();
    store.transaction(() => {
      insert(store, "outer");
      expect(() =>
        store.transaction(() => {
          insert(store, "inner");
          throw new Error("inner failed");
        }),
      ).toThrow("inner failed");
      store.transaction(() => insert(store, "inner ok"));
    });
    expect(rows(store)).toEqual(["inner ok", "outer"]);
  });

  it("leaves no transaction open when a statement error rolled back, and a duplicate key rolls back the whole call", () => {
    const store = storeWithTable();
    insert(store, "a");
    expect(() =>
      store.transaction(() => {
        insert(store, "b");
        insert(store, "a"); // UNIQUE constraint
      }),
    ).toThrow(/UNIQUE/);
    expect(store.db.inTransaction).toBe(false);
    expect(rows(store)).toEqual(["a"]);
  });

  it("refuses a callback that returns a promise, recording nothing", () => {
    const store = storeWithTable();
    expect(() =>
      store.transaction(() => {
        insert(store, "a");
        return Promise.resolve();
      }),
    ).toThrow(TypeError);
    expect(rows(store)).toEqual([]);
  });
});

describe("Store.noteDamage", () => {
  it("makes ping() false while damage was met in the last minute, and tells onDamaged once a spell (a read the disk failed once passes)", () => {
    vi.useFakeTimers({ toFake: ["performance"] });
    try {
      const store = Store.open(":memory:");
      stores.push(store);
      const heard: unknown[] = [];
      store.onDamaged = (e) => heard.push(e);
      const damaged = Object.assign(new Error("database disk image is malformed"), { code: "SQLITE_CORRUPT_INDEX" });
      store.noteDamage(Object.assign(new Error("database or disk is full"), { code: "SQLITE_FULL" })); // not damage
      expect(store.ping()).toBe(true);
      store.noteDamage(damaged);
      vi.advanceTimersByTime(damageMemoryMs - 1_000);
      store.noteDamage(damaged); // the same spell
      vi.advanceTimersByTime(damageMemoryMs - 1_000);
      expect(store.ping()).toBe(false);
      vi.advanceTimersByTime(2_000);
      expect(store.ping()).toBe(true);
      store.noteDamage(damaged); // a new spell
      expect(store.ping()).toBe(false);
      expect(heard).toEqual([damaged, damaged]);
    } finally {
      vi.useRealTimers();
    }
  });
});
