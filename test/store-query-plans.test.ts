import BetterSqlite3 from "better-sqlite3";
import { afterEach, describe, expect, it, vi } from "vitest";
import { Store } from "../src/store/store.js";

/**
 * Every statement the store prepares, with SQLite's plan for it. Parameters become the literal
 * 'x' (EXPLAIN needs values, and the plan depends on the shape of the query, not on them).
 */
function preparedStatementPlans(): { sql: string; plan: string[]; growing: string[]; unbounded: boolean }[] {
  const prepare = vi.spyOn(BetterSqlite3.prototype, "prepare");
  const store = Store.open(":memory:");
  const sources = prepare.mock.calls.map(([sql]) => sql);
  prepare.mockRestore();
  const tables = new Set(store.db.prepare("SELECT name FROM sqlite_schema WHERE type = 'table'").pluck().all() as string[]);
  // A table named through an alias (`automation_executions e`) is scanned as much as by its name:
  // the aliases of every statement, taken from its text.
  for (const [, , alias] of sources.join(" ").matchAll(/\b(FROM|JOIN)\s+(?:\w+)\s+(?:AS\s+)?(\w+)\b/gi)) {
    if (alias !== undefined && !/^(WHERE|INDEXED|ORDER|GROUP|LIMIT|ON|JOIN|LEFT|INNER|CROSS|USING|SET|VALUES|RETURNING|UNION)$/i.test(alias)) tables.add(alias);
  }
  const plans = sources
    .filter((sql) => /^\s*(SELECT|INSERT|UPDATE|DELETE|WITH)\b/i.test(sql))
    .map((sql) => {
      const literal = sql.replace(/\?|[:@$][A-Za-z_]+/g, "'x'");
      const rows = store.db.prepare(`EXPLAIN QUERY PLAN ${literal}`).all() as { detail: string }[];
      const plan = rows.map((row) => row.detail);
      const growing = plan.filter((step) => grows(step, tables, /\bLIMIT\b/i.test(sql)));
      return { sql: sql.replace(/\s+/g, " ").trim(), plan, growing, unbounded: growing.length > 0 };
    });
  void store.close();
  return plans;
}

/**
 * Whether a step of a plan reads rows in proportion to a table: a sort of what matched, or a scan
 * of a stored table (walking an index in its order is bounded when the statement has a LIMIT).
 */
function grows(step: string, tables: Set<string>, limited: boolean): boolean {
  if (step.includes("USE TEMP B-TREE")) return true;
  const scan = /^SCAN (\S+)( USING (COVERING )?INDEX)?/.exec(step);
  if (scan === null || !tables.has(scan[1] ?? "")) return false;
  return scan[2] === undefined || !limited;
}

/**
 * Statements allowed to sort or to read a table whole, the plan steps that do it, and why. Every
 * other statement finds its rows through an index, so its cost does not grow with the tables
 * (1,000,000 executions, event records and deliveries are the sizes the benches run at). An entry
 * allows its steps only: a listed statement that came to scan another table fails the test too.
 */
const allowed: { startsWith: string; steps: string[]; why: string }[] = [
  { startsWith: "SELECT version FROM schema_migrations", steps: ["SCAN schema_migrations"], why: "a handful of rows, read once at start" },
  {
    startsWith: "SELECT COUNT(*) AS count FROM automation_executions WHERE state IN ('PENDING', 'RUNNING')",
    steps: ["SCAN automation_executions USING INDEX automation_executions_unfinished"],
    why: "reads the worker's queue index, unfinished executions only: the queue-depth gauge",
  },
  {
    startsWith: "DELETE FROM automation_versions AS v WHERE v.automation_id = :id AND NOT EXISTS",
    steps: ["SCAN e USING INDEX automation_executions_unfinished"],
    why: "deleting an automation: its versions still named by an unfinished execution are found by walking the worker's queue (unfinished executions only)",
  },
  {
    startsWith: "SELECT listener_id, event_id FROM webhook_events",
    steps: ["SCAN webhook_events"],
    why: "read once, on first need (the server: at start): the event records' unique index is built from them in memory",
  },
  {
    startsWith: "DELETE FROM webhook_events WHERE rowid IN",
    steps: ["SCAN webhook_events"],
    why: "housekeeping: the oldest rows, a LIMIT'ed walk from the front of the table in rowid (arrival) order",
  },
  {
    startsWith: "DELETE FROM webhook_secrets WHERE expires_at IS NOT NULL",
    steps: ["SCAN webhook_secrets"],
    why: "at most two secrets per automation, housekeeping only",
  },
  {
    startsWith: "SELECT * FROM token_signing_keys ORDER BY created_at",
    steps: ["SCAN token_signing_keys", "USE TEMP B-TREE FOR ORDER BY"],
    why: "a few signing keys, read at start and on rotation",
  },
  {
    startsWith: "DELETE FROM client_token_addresses WHERE client_id = ? AND address NOT IN",
    steps: ["USE TEMP B-TREE FOR ORDER BY"],
    why: "one client's addresses (at most 65) sorted by time, when a token comes from a new address or a day after the last",
  },
  {
    startsWith: "DELETE FROM client_token_addresses WHERE last_token_at <= ?",
    steps: ["SCAN client_token_addresses"],
    why: "housekeeping every 10 minutes: at most 64 addresses per client",
  },
  {
    startsWith: "SELECT users.*, (SELECT group_concat(role) FROM user_roles r WHERE r.user_id = users.id) AS roles FROM users INDEXED BY users_by_email_nocase",
    steps: ["USE TEMP B-TREE FOR ORDER BY"],
    why: "Search by an exact email: the users with that address, found through its index and sorted (a handful)",
  },
];

describe("store query plans", () => {
  afterEach(() => vi.restoreAllMocks());

  it("no statement sorts or reads a whole table, except the few listed with their reason", () => {
    const plans = preparedStatementPlans();
    expect(plans.length).toBeGreaterThan(50);
    // Each statement's steps that grow with a table: none, or exactly the ones its entry lists.
    const growing = plans.filter(({ unbounded }) => unbounded).map(({ sql, growing }) => ({ sql, growing }));
    const allowedGrowing = plans.flatMap(({ sql }) => {
      const entry = allowed.find((a) => sql.startsWith(a.startsWith));
      return entry === undefined ? [] : [{ sql, growing: entry.steps }];
    });
    expect(growing).toEqual(allowedGrowing);
    // The list holds no stale entry.
    for (const { startsWith } of allowed) expect(plans.some(({ sql }) => sql.startsWith(startsWith))).toBe(true);
  });

  it("the worker reads the oldest unfinished executions from the queue's own index, without a sort", () => {
    const claim = preparedStatementPlans().find(({ sql }) => sql.includes("WHERE state IN ('PENDING', 'RUNNING') ORDER BY id LIMIT ?"));
    expect(claim?.plan).toEqual(["SCAN automation_executions USING INDEX automation_executions_unfinished"]);
    expect(claim?.unbounded).toBe(false);
  });

  it("an automation's executions are read from the finished executions' state index and the queue, with no index of their own", () => {
    const plans = preparedStatementPlans().filter(({ sql }) => /FROM automation_executions .*WHERE automation_id = \?/.test(sql));
    expect(plans.map(({ plan }) => plan)).toEqual([
      // Every state: the page's walk of the queue ends below its last finished execution (pageOfAutomation).
      ["SEARCH automation_executions USING INDEX automation_executions_unfinished (id>? AND id<?)"],
      // One state: finished (also read for every state), or unfinished.
      ["SEARCH automation_executions USING INDEX automation_executions_finished_by_automation_state (automation_id=? AND state=? AND id>?)"],
      ["SEARCH automation_executions USING INDEX automation_executions_unfinished (id>?)"],
    ]);
    const store = Store.open(":memory:");
    const indexes = store.db.prepare("SELECT name FROM pragma_index_list('automation_executions') ORDER BY name").pluck().all();
    void store.close();
    // One entry per accepted webhook in each: the primary key, the queue (until it ends).
    expect(indexes).toEqual(["automation_executions_finished_by_automation_state", "automation_executions_finished_by_state", "automation_executions_unfinished", "sqlite_autoindex_automation_executions_1"]);
  });

  it("housekeeping finds the automations with deliveries by index searches, not by reading every delivery", () => {
    const automations = preparedStatementPlans().find(({ sql }) => sql.includes("min(automation_id) FROM webhook_deliveries"));
    expect(automations?.plan).toContain("SEARCH webhook_deliveries USING PRIMARY KEY (automation_id>?)");
    expect(automations?.unbounded).toBe(false);
  });

  it("and lists each automation with deliveries once", async () => {
    const store = Store.open(":memory:");
    let n = 0;
    for (const automationId of ["b", "a", "c", "a", "b", "a"]) {
      store.webhooks.deliveries.insert({
        id: String(n++).padStart(8, "0"),
        automationId,
        eventId: "",
        status: 200,
        reason: "accepted",
        sourceIp: "127.0.0.1",
        sizeBytes: 1,
        receivedAt: n,
        executionId: "",
      });
    }
    expect(store.webhooks.deliveries.automationIds()).toEqual(["a", "b", "c"]);
    await store.close();
  });
});
