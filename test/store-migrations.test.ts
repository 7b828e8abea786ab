import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import BetterSqlite3 from "better-sqlite3";
import { describe, expect, it } from "vitest";
import { applyMigrations, NewerSchemaError } from "../src/store/database.js";
import { migrations } from "../src/store/migrations/index.js";
import { Store } from "../src/store/store.js";

/** Upgrades keep what a database already holds. */
describe("migration 005 (finished-only state indexes, delivery log by automation, event records in arrival order)", () => {
  it("keeps the executions, deliveries and event records of a database made before it", async () => {
    const dir = mkdtempSync(join(tmpdir(), "accessd-migration-"));
    try {
      const path = join(dir, "accessd.db");
      const before = new BetterSqlite3(path);
      applyMigrations(before, migrations.filter((m) => m.version < 5));
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
        "INSERT INTO webhook_deliveries (id, automation_id, event_id, status, reason, source_ip, size_bytes, received_at, execution_id) VALUES (?, ?, 'ev', 200, 'accepted', '127.0.0.1', 1, 0, '')",
      );
      logDelivery.run("d1", "a");
      logDelivery.run("d2", "b");
      logDelivery.run("d3", "a");
      before.prepare("INSERT INTO webhook_events (listener_id, event_id, received_at, execution_id) VALUES ('l', 'ev', 5, 'e1')").run();
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
        expect(store.webhooks.events.insertIfNew({ listenerId: "l", eventId: "ev", receivedAt: 6, executionId: "e4" })).toBe(false);
        expect(store.webhooks.events.insertIfNew({ listenerId: "l", eventId: "ev2", receivedAt: 6, executionId: "e4" })).toBe(true);
      } finally {
        await store.close();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("a database migrated by a newer accessd", () => {
  it("is not opened: the error names the migrations this build does not know, and the file is left as it was", () => {
    const dir = mkdtempSync(join(tmpdir(), "accessd-migration-"));
    try {
      const path = join(dir, "accessd.db");
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
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
