import { randomUUID } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { EventKeyIndex } from "../src/store/event-key-index.js";
import { Store } from "../src/store/store.js";
import { EventAcceptance } from "../src/webhooks/event-acceptance.js";
import { GroupCommit } from "../src/webhooks/group-commit.js";
import { Rejection } from "../src/webhooks/rejection.js";
import { eventRecordsOf } from "./support/store-fixtures.js";

describe("EventKeyIndex (the event records' unique index, in memory)", () => {
  it("holds each (listener, event id) pair once, whatever the case of the id", () => {
    const index = new EventKeyIndex();
    const id = randomUUID();
    expect(index.add("l1", id)).toBe(true);
    expect(index.add("l1", id)).toBe(false);
    expect(index.add("l1", id.toUpperCase())).toBe(false);
    expect(index.add("l2", id)).toBe(true);
    expect(index.has("l1", id)).toBe(true);
    expect(index.has("l3", id)).toBe(false);
    expect(index.size).toBe(2);
    expect(() => index.add("l1", "not-a-uuid")).toThrow(TypeError);
    expect(index.has("l1", "not-a-uuid")).toBe(false);
  });

  it("agrees with a Set through growth and many deletions (every lookup after each change)", () => {
    const index = new EventKeyIndex();
    const reference = new Set<string>();
    const listeners = ["a", "b", "c"];
    const ids: [string, string][] = [];
    // Time-ordered ids (v7-like: the first word is nearly the same) as well as random ones, so
    // that runs of neighbours form and deletions have entries to shift back.
    let clustered = 0;
    const nextId = (i: number) =>
      i % 2 === 0 ? randomUUID() : `0190a0b0-${(clustered++).toString(16).padStart(4, "0")}-7000-8000-${randomUUID().slice(24)}`;
    for (let round = 0; round < 3; round++) {
      for (let i = 0; i < 5_000; i++) {
        const pair: [string, string] = [listeners[i % 3]!, nextId(i)];
        ids.push(pair);
        expect(index.add(...pair)).toBe(!reference.has(pair.join(" ")));
        reference.add(pair.join(" "));
      }
      // Delete every third pair of those stored, checking the rest stay reachable.
      for (let i = round; i < ids.length; i += 3) {
        const [listener, id] = ids[i]!;
        expect(index.delete(listener, id)).toBe(reference.delete(`${listener} ${id}`));
      }
      expect(index.size).toBe(reference.size);
      for (const [listener, id] of ids) expect(index.has(listener, id)).toBe(reference.has(`${listener} ${id}`));
    }
  });

  it("gives the memory of a burst back as its pairs are deleted, and still agrees with a Set", () => {
    const index = new EventKeyIndex();
    const empty = index.bytes;
    const reference = new Set<string>();
    const ids = Array.from({ length: 60_000 }, () => randomUUID());
    for (const id of ids) {
      index.add("l", id);
      reference.add(id);
    }
    const full = index.bytes;
    expect(full).toBeGreaterThan(60_000 * 20);
    // Deleted in an order of their own (not the insertion order), checking every pair left at
    // each quarter: the halvings on the way must keep them all reachable.
    const order = [...ids].sort();
    order.forEach((id, i) => {
      expect(index.delete("l", id)).toBe(reference.delete(id));
      if (i % 15_000 === 14_999) expect(ids.filter((left) => index.has("l", left) !== reference.has(left))).toEqual([]);
    });
    expect(index.size).toBe(0);
    expect(index.bytes).toBe(empty);
    expect(index.add("l", ids[0]!)).toBe(true);
    expect(index.has("l", ids[0]!)).toBe(true);
  });
});

describe("the event records' in-memory index follows the store's transactions", () => {
  const accept = (store: Store, eventId: string) =>
    store.webhooks.events.insertIfNew({ listenerId: "l", eventId, receivedAt: 1, executionId: "x" });

  it("forgets the pairs of a transaction rolled back, and keeps those committed", async () => {
    const store = Store.open(":memory:");
    const [kept, rolledBack] = [randomUUID(), randomUUID()];
    store.transaction(() => accept(store, kept));
    expect(() =>
      store.transaction(() => {
        expect(accept(store, rolledBack)).toBe(true);
        expect(accept(store, rolledBack)).toBe(false); // the transaction sees its own pair
        throw new Error("the unit failed");
      }),
    ).toThrow("the unit failed");
    expect(store.webhooks.events.has("l", kept)).toBe(true);
    expect(store.webhooks.events.has("l", rolledBack)).toBe(false);
    expect(store.transaction(() => accept(store, rolledBack))).toBe(true); // it can be accepted again
    expect(eventRecordsOf(store, "l")).toBe(2);
    await store.close();
  });

  it("undoes a savepoint rolled back alone, and a released savepoint with its transaction", async () => {
    const store = Store.open(":memory:");
    const [outer, inner, released] = [randomUUID(), randomUUID(), randomUUID()];
    store.transaction(() => {
      accept(store, outer);
      expect(() =>
        store.transaction(() => {
          accept(store, inner);
          throw new Error("only this savepoint");
        }),
      ).toThrow();
      expect(store.webhooks.events.has("l", inner)).toBe(false);
      expect(store.webhooks.events.has("l", outer)).toBe(true);
    });
    expect(() =>
      store.transaction(() => {
        store.transaction(() => accept(store, released));
        throw new Error("the enclosing transaction");
      }),
    ).toThrow();
    expect(store.webhooks.events.has("l", released)).toBe(false);
    expect(eventRecordsOf(store, "l")).toBe(1);
    await store.close();
  });

  it("hands a released savepoint's undos to its transaction however many there are", async () => {
    const store = Store.open(":memory:");
    const ids = Array.from({ length: 150_000 }, () => randomUUID()); // more than a call takes arguments
    expect(() =>
      store.transaction(() => {
        store.transaction(() => ids.forEach((id) => accept(store, id)));
        throw new Error("the enclosing transaction");
      }),
    ).toThrow("the enclosing transaction");
    expect(store.webhooks.events.size).toBe(0);
    await store.close();
  });

  it("gives deleted pairs back when the deletion is rolled back", async () => {
    const store = Store.open(":memory:");
    const id = randomUUID();
    store.transaction(() => accept(store, id));
    expect(() =>
      store.transaction(() => {
        expect(store.webhooks.events.deleteReceivedBefore(2, 10)).toBe(1);
        expect(store.webhooks.events.has("l", id)).toBe(false);
        throw new Error("rolled back");
      }),
    ).toThrow();
    expect(store.webhooks.events.has("l", id)).toBe(true);
    expect(store.transaction(() => accept(store, id))).toBe(false);
    await store.close();
  });

  it("an acceptance that failed in a group leaves its event id free, and the group's others recorded", async () => {
    const store = Store.open(":memory:");
    const executions: string[] = [];
    const acceptance = new EventAcceptance(
      store,
      new GroupCommit(store),
      (request) => {
        executions.push(request.executionId);
        return { id: request.executionId } as never; // the queue is not what this is about
      },
      () => {},
    );
    const event = (eventId: string) => ({ listenerId: "l", automationId: "a", eventId, trigger: {}, bodyBytes: 2, receivedAt: 1 });
    const [first, failing] = [randomUUID(), randomUUID()];
    // One group: the second unit throws after its record is written, so the group is rolled back
    // and run again unit by unit in savepoints (GroupCommit); the record of the failed one goes.
    const results = await Promise.allSettled([
      acceptance.accept(event(first)),
      acceptance.accept(event(failing), () => {
        throw new Error("the delivery log could not be written");
      }),
      acceptance.accept(event(first)),
    ]);
    expect(results[0]).toMatchObject({ status: "fulfilled", value: { executionId: expect.any(String) } });
    expect(results[1]).toMatchObject({ status: "rejected" });
    expect(results[2]).toMatchObject({ status: "fulfilled", value: expect.any(Rejection) });
    expect(((results[2] as PromiseFulfilledResult<Rejection>).value).status).toBe(409);
    expect(store.webhooks.events.has("l", first)).toBe(true);
    expect(store.webhooks.events.has("l", failing)).toBe(false);
    // Sent again, the failed event is accepted (not a duplicate): nothing of it was kept.
    expect(await acceptance.accept(event(failing))).toMatchObject({ executionId: expect.any(String) });
    expect(eventRecordsOf(store, "l")).toBe(2);
    await store.close();
  });

  it("refuses a change in a transaction that could not undo it", async () => {
    const store = Store.open(":memory:");
    store.db.exec("BEGIN");
    expect(() => accept(store, randomUUID())).toThrow(/Store.transaction/);
    store.db.exec("ROLLBACK");
    expect(store.webhooks.events.size).toBe(0);
    await store.close();
  });

  it("reads the table on first need, not when the store opens (bootstrap and the key rotations never read it)", async () => {
    const store = Store.open(":memory:");
    const eventId = randomUUID();
    // Written past the repository after the open: an index read at open would not hold it.
    store.db
      .prepare("INSERT INTO webhook_events (listener_id, event_id, received_at, execution_id) VALUES (?, ?, ?, ?)")
      .run("l", eventId, Date.now(), "e");
    expect(store.webhooks.events.readKeys()).toBe(1);
    expect(store.transaction(() => accept(store, eventId))).toBe(false);
    await store.close();
  });

  it("holds a pair two legacy rows record (ids of different case) until the last of them expires, also across a rollback", async () => {
    // Before event ids were lower-cased, `ABC…` and `abc…` could be recorded as two events.
    const store = Store.open(":memory:");
    const eventId = randomUUID();
    const insertRow = store.db.prepare(
      "INSERT INTO webhook_events (listener_id, event_id, received_at, execution_id) VALUES (?, ?, ?, ?)",
    );
    insertRow.run("l", eventId.toUpperCase(), 1_000, "e1");
    insertRow.run("l", eventId, 2_000, "e2");
    const events = store.webhooks.events;
    expect(events.readKeys()).toBe(1);
    // The older row expires in a transaction rolled back, then for good: the newer one still holds the pair.
    expect(() =>
      store.transaction(() => {
        expect(events.deleteReceivedBefore(1_500, 100)).toBe(1);
        throw new Error("rolled back");
      }),
    ).toThrow("rolled back");
    expect(store.transaction(() => events.deleteReceivedBefore(1_500, 100))).toBe(1);
    expect(events.has("l", eventId)).toBe(true);
    expect(store.transaction(() => accept(store, eventId))).toBe(false);
    // The newer row expires: the id is free.
    expect(store.transaction(() => events.deleteReceivedBefore(2_500, 100))).toBe(1);
    expect(events.has("l", eventId)).toBe(false);
    expect(store.transaction(() => accept(store, eventId))).toBe(true);
    await store.close();
  });

  it("is rebuilt from the table when the store opens again", async () => {
    const dir = mkdtempSync(join(tmpdir(), "accessd-event-keys-"));
    try {
      const ids = Array.from({ length: 2_000 }, () => randomUUID());
      const first = Store.open(join(dir, "accessd.db"));
      first.transaction(() => ids.forEach((id) => accept(first, id)));
      await first.close();
      const second = Store.open(join(dir, "accessd.db"));
      expect(second.webhooks.events.size).toBe(2_000);
      expect(ids.every((id) => !second.transaction(() => accept(second, id)))).toBe(true);
      await second.close();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
