import { randomUUID } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import BetterSqlite3 from "better-sqlite3";
import { describe, expect, it } from "vitest";
import { applyMigrations, NewerSchemaError } from "../src/store/database.js";
import { deliveryLogByAutomation, finishedOnlyStateIndexes } from "../src/store/migrations/005-lean-write-indexes.js";
import { migrations } from "../src/store/migrations/index.js";
import { Store } from "../src/store/store.js";

/** Runs `test` on a new database file, whose folder is removed afterwards. */
async function withDatabaseFile(test: (path: string) => Promise<void>): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "accessd-migration-"));
  try {
    await test(join(dir, "accessd.db"));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** A database file as a build that knew the migrations before `version` left it. */
function migratedBefore(path: string, version: number): BetterSqlite3.Database {
  const db = new BetterSqlite3(path);
  applyMigrations(db, migrations.filter((m) => m.version < version));
  return db;
}

/** Event ids as senders send them (stage 4 accepts UUID v4 only). */
const [ev, ev1, ev2, ev3] = [randomUUID(), randomUUID(), randomUUID(), randomUUID()];

/** Upgrades keep what a database already holds. */
describe("migration 005 (finished-only state indexes, delivery log by automation, event records in arrival order)", () => {
  it("keeps the executions, deliveries and event records of a database made before it", async () => {
    await withDatabaseFile(async (path) => {
      const before = migratedBefore(path, 5);
      before
        .prepare("INSERT INTO automations (id, display_name, description, trigger, published, trigger_enabled, version, created_at, updated_at) VALUES ('a', 'a', '', '{}', 0, 0, 1, 0, 0)")
        .run();
      const insert = before.prepare(
        "INSERT INTO automation_executions (id, automation_id, automation_version, state, trigger, event_id, error, created_at) VALUES (?, 'a', 1, ?, '{}', '', '', 0)",
      );
      insert.run("e1", "SUCCEEDED");
      insert.run("e2", "PENDING");
      insert.run("e3", "FAILED");
      const logDelivery = before.prepare(
        `INSERT INTO webhook_deliveries (id, automation_id, event_id, status, reason, source_ip, size_bytes, received_at, execution_id) VALUES (?, ?, '${ev}', 200, 'accepted', '127.0.0.1', 1, 0, '')`,
      );
      logDelivery.run("d1", "a");
      logDelivery.run("d2", "b");
      logDelivery.run("d3", "a");
      before.prepare("INSERT INTO webhook_events (listener_id, event_id, received_at, execution_id) VALUES ('l', ?, 5, 'e1')").run(ev);
      before.close();

      const store = Store.open(path);
      try {
        expect(store.executions.countByState()).toEqual({ PENDING: 1, RUNNING: 0, SUCCEEDED: 1, FAILED: 1 });
        expect(store.executions.listAfter({ automationId: "a", state: "PENDING" }, undefined, 10).map((e) => e.id)).toEqual(["e2"]);
        expect(store.executions.listAfter({ automationId: "", state: "FAILED" }, undefined, 10).map((e) => e.id)).toEqual(["e3"]);
        expect(store.executions.oldestUnfinished(10).map((e) => e.id)).toEqual(["e2"]);
        expect(store.webhooks.deliveries.listBefore("a", undefined, 10).map((d) => [d.id, d.automationId, d.reason])).toEqual([
          ["d3", "a", "accepted"],
          ["d1", "a", "accepted"],
        ]);
        expect(store.webhooks.deliveries.automationIds()).toEqual(["a", "b"]);
        // The event record still makes a second delivery of the same event a duplicate.
        expect(store.webhooks.events.insertIfNew({ listenerId: "l", eventId: ev, receivedAt: 6, executionId: "e4" })).toBe(false);
        expect(store.webhooks.events.insertIfNew({ listenerId: "l", eventId: ev2, receivedAt: 6, executionId: "e4" })).toBe(true);
      } finally {
        await store.close();
      }
    });
  });
});

/**
 * Migration 005 as builds of 6cd089c and aa18e2b shipped it (recorded as version 5 like the final
 * one): the first changed the executions' indexes and dropped the delivery log's time index only,
 * the second also rebuilt the delivery log (the same text as the final 005's first two parts),
 * and neither the event records.
 */
const early005: Record<string, string> = {
  "6cd089c": `${finishedOnlyStateIndexes}DROP INDEX webhook_deliveries_by_time;\n`,
  aa18e2b: `${finishedOnlyStateIndexes}${deliveryLogByAutomation.slice(1)}`,
};

describe("migration 008 (migration 005 finished on databases an early build of it migrated)", () => {
  it.each([
    ["6cd089c", "a start of the current build stopped after 006 and 007"],
    ["aa18e2b", "never opened by a later build"],
  ])("opens a database migrated by %s's 005 (%s), with its deliveries and event records", async (build, history) => {
    await withDatabaseFile(async (path) => {
      const before = new BetterSqlite3(path);
      applyMigrations(before, [...migrations.filter((m) => m.version < 5), { version: 5, name: "early 005", sql: early005[build] ?? "" }]);
      const logDelivery = before.prepare(
        "INSERT INTO webhook_deliveries (id, automation_id, event_id, status, reason, source_ip, size_bytes, received_at, execution_id) VALUES (?, ?, ?, 200, 'accepted', '127.0.0.1', 1, 0, '')",
      );
      logDelivery.run("d1", "a", ev1);
      logDelivery.run("d2", "b", ev2);
      const recordEvent = before.prepare("INSERT INTO webhook_events (listener_id, event_id, received_at, execution_id) VALUES ('l', ?, ?, 'x')");
      recordEvent.run(ev1, 5);
      recordEvent.run(ev2, 3);
      // What a failed start of the build before this migration recorded (the reviewer's file).
      if (history.startsWith("a start")) applyMigrations(before, migrations.filter((m) => m.version < 8 && m.version !== 5).concat({ version: 5, name: "early 005", sql: "" }));
      before.close();

      const store = Store.open(path);
      try {
        expect(store.webhooks.deliveries.listBefore("a", undefined, 10).map((d) => [d.id, d.eventId])).toEqual([["d1", ev1]]);
        expect(store.webhooks.deliveries.automationIds()).toEqual(["a", "b"]);
        expect(store.webhooks.events.insertIfNew({ listenerId: "l", eventId: ev1, receivedAt: 6, executionId: "y" })).toBe(false);
        expect(store.webhooks.events.insertIfNew({ listenerId: "l", eventId: ev3, receivedAt: 6, executionId: "y" })).toBe(true);
        // Expiry walks the records in arrival order (the rowid table of the final 005).
        expect(store.transaction(() => store.webhooks.events.deleteReceivedBefore(6, 10))).toBe(2);
        const shape = (table: string) =>
          store.db.prepare<[string], string>("SELECT sql FROM sqlite_schema WHERE name = ?").pluck().get(table) ?? "";
        expect(shape("webhook_deliveries")).toMatch(/WITHOUT ROWID/);
        expect(shape("webhook_events")).not.toMatch(/WITHOUT ROWID/);
      } finally {
        await store.close();
      }
    });
  });

  it("changes nothing on a database the final 005 migrated", async () => {
    await withDatabaseFile(async (path) => {
      const before = new BetterSqlite3(path);
      applyMigrations(before, migrations.filter((m) => m.version !== 8)); // the later ones too, for the comparison
      const schemaOf = (db: BetterSqlite3.Database) => db.prepare("SELECT type, name, sql FROM sqlite_schema WHERE name != 'schema_migrations' ORDER BY name").all();
      const schemaBefore = schemaOf(before);
      before.close();
      const store = Store.open(path);
      try {
        expect(schemaOf(store.db as unknown as BetterSqlite3.Database)).toEqual(schemaBefore);
      } finally {
        await store.close();
      }
    });
  });
});

describe("migration 010 (the HMAC secrets of triggers that are no longer HMAC)", () => {
  it("drops the secrets an earlier build left behind when a trigger became manual or JWT, and keeps those of HMAC listeners", async () => {
    await withDatabaseFile(async (path) => {
      const before = migratedBefore(path, 10);
      const automation = before.prepare(
        "INSERT INTO automations (id, display_name, description, trigger, published, trigger_enabled, version, created_at, updated_at) VALUES (?, ?, '', ?, 0, 0, 1, 0, 0)",
      );
      automation.run("hmac", "still HMAC", JSON.stringify({ kind: "webhook", listenerId: "l1", authMethod: "HMAC", jwksUrl: "", ipRestrictionEnabled: false, allowedCidrs: [] }));
      automation.run("manual", "once HMAC, now manual", JSON.stringify({ kind: "manual" }));
      automation.run("jwt", "once HMAC, now JWT", JSON.stringify({ kind: "webhook", listenerId: "l2", authMethod: "JWT", jwksUrl: "https://k.example/jwks", ipRestrictionEnabled: false, allowedCidrs: [] }));
      const secret = before.prepare("INSERT INTO webhook_secrets (id, automation_id, sealed, created_at, expires_at) VALUES (?, ?, x'00', 0, NULL)");
      for (const id of ["hmac", "manual", "jwt"]) secret.run(`s-${id}`, id);
      before.close();

      const store = Store.open(path);
      try {
        expect(store.db.prepare("SELECT automation_id FROM webhook_secrets ORDER BY id").pluck().all()).toEqual(["hmac"]);
      } finally {
        await store.close();
      }
    });
  });
});

describe("migration 011 (event records without a unique index in the file)", () => {
  it("drops the index, and the records stored before it still make their events duplicates", async () => {
    await withDatabaseFile(async (path) => {
      const before = migratedBefore(path, 11);
      const recordEvent = before.prepare("INSERT INTO webhook_events (listener_id, event_id, received_at, execution_id) VALUES (?, ?, 5, 'x')");
      recordEvent.run("l", ev1);
      recordEvent.run("l", ev2.toUpperCase()); // recorded by a build before ids were lower-cased
      recordEvent.run("other listener", ev3);
      recordEvent.run("l", "not-a-uuid"); // never written by any build, and never matched
      before.close();

      const store = Store.open(path);
      try {
        const index = store.db.prepare("SELECT name FROM sqlite_schema WHERE name = 'webhook_events_by_event'").pluck().get();
        expect(index).toBeUndefined();
        expect(store.webhooks.events.size).toBe(3);
        const accept = (listenerId: string, eventId: string) =>
          store.transaction(() => store.webhooks.events.insertIfNew({ listenerId, eventId, receivedAt: 6, executionId: "y" }));
        expect(accept("l", ev1)).toBe(false);
        expect(accept("l", ev2)).toBe(false);
        expect(accept("l", ev3)).toBe(true); // another listener's event id
        expect(accept("other listener", ev3)).toBe(false);
      } finally {
        await store.close();
      }
    });
  });
});

describe("migration 012 (executions without their (automation_id, id) index)", () => {
  it("drops the index, and an automation's executions stored before it are still listed in id order, every state", async () => {
    await withDatabaseFile(async (path) => {
      const before = migratedBefore(path, 12);
      const execution = before.prepare(
        `INSERT INTO automation_executions (id, automation_id, automation_version, state, trigger, event_id, error, created_at)
         VALUES (?, ?, 1, ?, '{}', '', '', 1)`,
      );
      const states = ["SUCCEEDED", "PENDING", "FAILED", "RUNNING", "SUCCEEDED", "FAILED"];
      states.forEach((state, i) => execution.run(`e${i}`, "a", state));
      execution.run("e9", "b", "PENDING");
      before.close();

      const store = Store.open(path);
      try {
        const index = store.db.prepare("SELECT name FROM sqlite_schema WHERE name = 'automation_executions_by_automation'").pluck().get();
        expect(index).toBeUndefined();
        const page = (after: string | undefined) => store.executions.listAfter({ automationId: "a", state: undefined }, after, 4);
        expect(page(undefined).map((e) => [e.id, e.state])).toEqual(states.slice(0, 4).map((state, i) => [`e${i}`, state]));
        expect(page("e3").map((e) => e.id)).toEqual(["e4", "e5"]);
      } finally {
        await store.close();
      }
    });
  });
});

describe("a database migrated by a newer accessd", () => {
  it("is not opened: the error names the migrations this build does not know, and the file is left as it was", async () => {
    await withDatabaseFile(async (path) => {
      const newer = new BetterSqlite3(path);
      const next = Math.max(...migrations.map((m) => m.version)) + 1;
      applyMigrations(newer, [...migrations, { version: next, name: "from the future", sql: "CREATE TABLE future (id TEXT)" }]);
      newer.close();

      expect(() => Store.open(path)).toThrow(NewerSchemaError);
      expect(() => Store.open(path)).toThrow(
        `the database ${path} has schema migrations this accessd does not know (${next}; it knows up to ${next - 1})`,
      );
      const after = new BetterSqlite3(path, { readonly: true });
      expect(after.prepare("SELECT max(version) FROM schema_migrations").pluck().get()).toBe(next);
      after.close();
    });
  });
});
