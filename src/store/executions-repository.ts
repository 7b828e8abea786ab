import type { JsonValue } from "@bufbuild/protobuf";
import type { Database } from "./database.js";
import { idsCreatedBefore } from "./ids.js";

export type ExecutionState = "PENDING" | "RUNNING" | "SUCCEEDED" | "FAILED";
export type StepState = "SUCCEEDED" | "FAILED" | "SKIPPED";

export interface Execution {
  id: string;
  automationId: string;
  automationVersion: number;
  state: ExecutionState;
  /** ctx.trigger: the webhook body or the Execute context. */
  trigger: JsonValue;
  /** The Webhook-Event-Id that started it; "" otherwise. */
  eventId: string;
  error: string;
  createdAt: number;
  startedAt: number | undefined;
  finishedAt: number | undefined;
}

/**
 * An execution as a listing shows it: without its trigger (up to the API's 1 MiB request body for
 * an Execute), so that a page of 100 stays small; Get reads the whole execution.
 */
export type ExecutionSummary = Omit<Execution, "trigger">;

/** A finished step of an execution. Steps not yet run have no record. */
export interface StepRecord {
  position: number;
  name: string;
  state: StepState;
  output: JsonValue | undefined;
  error: string;
  startedAt: number;
  finishedAt: number;
}

export interface ExecutionFilter {
  /** "" for every automation. */
  automationId: string;
  /** undefined for every state. */
  state: ExecutionState | undefined;
}

/** The columns of an execution but its trigger (ExecutionSummary). */
const summaryColumns = "id, automation_id, automation_version, state, event_id, error, created_at, started_at, finished_at";

interface ExecutionRow {
  id: string;
  automation_id: string;
  automation_version: number;
  state: ExecutionState;
  trigger: string;
  event_id: string;
  error: string;
  created_at: number;
  started_at: number | null;
  finished_at: number | null;
}

type SummaryRow = Omit<ExecutionRow, "trigger">;

interface StepRow {
  execution_id: string;
  position: number;
  name: string;
  state: StepState;
  output: string | null;
  error: string;
  started_at: number;
  finished_at: number;
}

const toExecution = (row: ExecutionRow): Execution => ({ ...toSummary(row), trigger: JSON.parse(row.trigger) as JsonValue });

const toSummary = (row: Omit<ExecutionRow, "trigger">): ExecutionSummary => ({
  id: row.id,
  automationId: row.automation_id,
  automationVersion: row.automation_version,
  state: row.state,
  eventId: row.event_id,
  error: row.error,
  createdAt: row.created_at,
  startedAt: row.started_at ?? undefined,
  finishedAt: row.finished_at ?? undefined,
});

const toStepRecord = (row: StepRow): StepRecord => ({
  position: row.position,
  name: row.name,
  state: row.state,
  output: row.output === null ? undefined : (JSON.parse(row.output) as JsonValue),
  error: row.error,
  startedAt: row.started_at,
  finishedAt: row.finished_at,
});

export class ExecutionsRepository {
  private readonly insertStmt;
  private readonly getStmt;
  private readonly versionStmt;
  private readonly oldestUnfinishedStmt;
  private readonly startStmt;
  private readonly finishStmt;
  private readonly insertStepStmt;
  private readonly stepsStmt;
  private readonly stepSummariesOfManyStmt;
  private readonly pageAll;
  private readonly unfinishedOfAutomationBetween;
  private readonly pageByState;
  private readonly pageByAutomationAndState;
  private readonly countFinishedByStateStmt;
  private readonly countInStateAfterStmt;
  private readonly countFinishedInStateBetweenStmt;
  private readonly oldestUnfinishedIdStmt;
  private readonly newestIdBeforeStmt;
  private readonly deleteFinishedBeforeStmt;
  /**
   * Executions by state among the ids up to `throughId`, every one of them finished: a finished
   * execution never changes again, and `deleteFinishedBefore` subtracts what it deletes,
   * so these counts stay exact (undefined until the first count, and after anything that could
   * make them wrong: an execution inserted with an id at or below `throughId`, a deletion inside
   * a transaction that might be rolled back).
   */
  private settled: { throughId: string; counts: Record<ExecutionState, number> } | undefined;
  private readonly countUnfinishedStmt;
  /** Finished executions this process deleted (the retention), by state: what `countsWithFinishedTotals` adds back. */
  private readonly deletedSinceStart = { SUCCEEDED: 0, FAILED: 0 };

  constructor(private readonly db: Database) {
    // Two statements rather than INSERT ... SELECT: that form cost 13 us per row, these 6 us.
    this.versionStmt = db.prepare<[string], number>("SELECT version FROM automations WHERE id = ?").pluck();
    this.insertStmt = db.prepare<[string, string, number, string, string, number]>(
      `INSERT INTO automation_executions (id, automation_id, automation_version, state, trigger, event_id, error, created_at)
       VALUES (?, ?, ?, 'PENDING', ?, ?, '', ?)`,
    );
    this.getStmt = db.prepare<[string], ExecutionRow>("SELECT * FROM automation_executions WHERE id = ?");
    // Pinned to the queue's own index: left to itself, the planner once read every unfinished row
    // through another index and sorted them for the oldest, twice the cost of this first entry
    // (test/store-query-plans.test.ts).
    this.oldestUnfinishedStmt = db.prepare<[number], ExecutionRow>(
      `SELECT * FROM automation_executions INDEXED BY automation_executions_unfinished
       WHERE state IN ('PENDING', 'RUNNING') ORDER BY id LIMIT ?`,
    );
    this.startStmt = db.prepare<[number, string]>(
      "UPDATE automation_executions SET state = 'RUNNING', started_at = coalesce(started_at, ?) WHERE id = ?",
    );
    this.finishStmt = db.prepare<[ExecutionState, string, number, number, string]>(
      `UPDATE automation_executions SET state = ?, error = ?, finished_at = ?, started_at = coalesce(started_at, ?)
       WHERE id = ? AND state IN ('PENDING', 'RUNNING')`,
    );
    this.insertStepStmt = db.prepare<[string, number, string, StepState, string | null, string, number, number]>(
      `INSERT INTO automation_step_executions (execution_id, position, name, state, output, error, started_at, finished_at)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
    );
    this.stepsStmt = db.prepare<[string], StepRow>(
      "SELECT * FROM automation_step_executions WHERE execution_id = ? ORDER BY position",
    );
    this.stepSummariesOfManyStmt = db.prepare<[string], StepRow>(
      `SELECT execution_id, position, name, state, NULL AS output, error, started_at, finished_at
       FROM automation_step_executions WHERE execution_id IN (SELECT value FROM json_each(?))
       ORDER BY execution_id, position`,
    );
    this.pageAll = db.prepare<[string, number], SummaryRow>(
      `SELECT ${summaryColumns} FROM automation_executions WHERE id > ? ORDER BY id LIMIT ?`,
    );
    // An automation's executions have no index of their own (migration 012): its page is merged
    // from its finished ones of each state (pageByAutomationAndState.finished) and its unfinished
    // ones, read from the worker's queue between two ids: the queue holds every automation's
    // unfinished executions, so the walk stops where the page's finished ones already fill it
    // (pageOfAutomation).
    this.unfinishedOfAutomationBetween = db.prepare<[string, string, string, number], SummaryRow>(
      `SELECT ${summaryColumns} FROM automation_executions INDEXED BY automation_executions_unfinished
       WHERE automation_id = ? AND state IN ('PENDING', 'RUNNING') AND id > ? AND id < ? ORDER BY id LIMIT ?`,
    );
    // States split in two (migration 005): finished executions are in the (state, id) indexes,
    // unfinished ones only in the worker's queue index. Each statement names its half with the
    // very term of its index's WHERE, so that SQLite may use the partial index.
    this.pageByState = {
      finished: db.prepare<[string, string, number], SummaryRow>(
        `SELECT ${summaryColumns} FROM automation_executions WHERE state IN ('SUCCEEDED', 'FAILED') AND state = ? AND id > ?
         ORDER BY id LIMIT ?`,
      ),
      unfinished: db.prepare<[string, string, number], SummaryRow>(
        `SELECT ${summaryColumns} FROM automation_executions INDEXED BY automation_executions_unfinished
         WHERE state IN ('PENDING', 'RUNNING') AND state = ? AND id > ? ORDER BY id LIMIT ?`,
      ),
    };
    this.pageByAutomationAndState = {
      finished: db.prepare<[string, string, string, number], SummaryRow>(
        `SELECT ${summaryColumns} FROM automation_executions WHERE automation_id = ? AND state IN ('SUCCEEDED', 'FAILED') AND state = ? AND id > ?
         ORDER BY id LIMIT ?`,
      ),
      // The queue is short: walking it and skipping other automations' executions is cheaper than
      // an index entry more per execution.
      unfinished: db.prepare<[string, string, string, number], SummaryRow>(
        `SELECT ${summaryColumns} FROM automation_executions INDEXED BY automation_executions_unfinished
         WHERE automation_id = ? AND state IN ('PENDING', 'RUNNING') AND state = ? AND id > ? ORDER BY id LIMIT ?`,
      ),
    };
    this.countFinishedByStateStmt = db.prepare<[], { state: ExecutionState; count: number }>(
      "SELECT state, COUNT(*) AS count FROM automation_executions WHERE state IN ('SUCCEEDED', 'FAILED') GROUP BY state",
    );
    this.countInStateAfterStmt = {
      finished: db
        .prepare<[ExecutionState, string], number>(
          "SELECT COUNT(*) FROM automation_executions WHERE state IN ('SUCCEEDED', 'FAILED') AND state = ? AND id > ?",
        )
        .pluck(),
      unfinished: db
        .prepare<[ExecutionState, string], number>(
          `SELECT COUNT(*) FROM automation_executions INDEXED BY automation_executions_unfinished
           WHERE state IN ('PENDING', 'RUNNING') AND state = ? AND id > ?`,
        )
        .pluck(),
    };
    this.countFinishedInStateBetweenStmt = db
      .prepare<[ExecutionState, string, string], number>(
        "SELECT COUNT(*) FROM automation_executions WHERE state IN ('SUCCEEDED', 'FAILED') AND state = ? AND id > ? AND id <= ?",
      )
      .pluck();
    this.oldestUnfinishedIdStmt = db
      .prepare<[], string | null>("SELECT min(id) FROM automation_executions WHERE state IN ('PENDING', 'RUNNING')")
      .pluck();
    this.newestIdBeforeStmt = db.prepare<[string], string | null>("SELECT max(id) FROM automation_executions WHERE id < ?").pluck();
    // Through the finished (state, id) index, so unfinished executions are never in the way; the
    // step records go with their execution (ON DELETE CASCADE, by their primary key).
    this.deleteFinishedBeforeStmt = db.prepare<[string, number, number], { id: string; state: ExecutionState }>(
      `DELETE FROM automation_executions WHERE rowid IN (
         SELECT rowid FROM automation_executions WHERE state IN ('SUCCEEDED', 'FAILED') AND id < ? AND finished_at < ? LIMIT ?)
       RETURNING id, state`,
    );
    this.countUnfinishedStmt = db.prepare<[], { count: number }>(
      "SELECT COUNT(*) AS count FROM automation_executions WHERE state IN ('PENDING', 'RUNNING')",
    );
  }

  /**
   * How many executions are in each state (for /metrics). A GROUP BY over every finished execution
   * takes 65 ms at 1,000,000 executions, an event-loop stall on every scrape, so it runs once; later
   * calls count the executions finished since (a range of the finished (state, id) index) and those
   * after the oldest unfinished one. Ids are monotonic within the process (`newId`), so an
   * execution inserted at or below what is settled (an id from before a clock that stepped back
   * across a restart, or one a caller chose) makes it count everything again.
   */
  countByState(): Record<ExecutionState, number> {
    // Every execution up to the one before the oldest unfinished is finished.
    const throughId = this.newestIdBeforeStmt.get(this.oldestUnfinishedIdStmt.get() ?? afterEveryId) ?? "";
    let settled = this.settled;
    if (settled !== undefined && throughId > settled.throughId && !this.db.inTransaction) {
      const counts = { ...settled.counts };
      for (const state of ["SUCCEEDED", "FAILED"] as const) {
        counts[state] += this.countFinishedInStateBetweenStmt.get(state, settled.throughId, throughId) ?? 0;
      }
      settled = this.settled = { throughId, counts };
    }
    if (settled !== undefined) return addCounts({ ...settled.counts }, this.countAfter(settled.throughId));
    // The first call, or after an event that could have made the settled counts wrong: everything,
    // and what is settled as of now.
    const all = addCounts({ PENDING: 0, RUNNING: 0, SUCCEEDED: 0, FAILED: 0 }, this.countFinishedByStateStmt.all());
    addCounts(all, this.countAfter("").filter((row) => !isFinished(row.state)));
    if (!this.db.inTransaction) {
      const counts = { ...all };
      for (const row of this.countAfter(throughId)) counts[row.state] -= row.count;
      this.settled = { throughId, counts };
    }
    return all;
  }

  /** Executions by state with an id after `id`: one range of an index per state. */
  private countAfter(id: string): { state: ExecutionState; count: number }[] {
    return (["PENDING", "RUNNING", "SUCCEEDED", "FAILED"] as const).map((state) => ({
      state,
      count: this.countInStateAfterStmt[half(state)].get(state, id) ?? 0,
    }));
  }

  /** Executions accepted but not finished: the worker's queue (the partial index keeps it cheap). */
  countUnfinished(): number {
    return this.countUnfinishedStmt.get()?.count ?? 0;
  }

  /**
   * Creates a PENDING execution of the automation's current version and returns it as stored;
   * undefined when the automation does not exist. Synchronous (no other statement of this
   * connection runs in between), so it joins whatever transaction the caller has open.
   */
  insertPending(e: { id: string; automationId: string; trigger: JsonValue; eventId: string; now: number }): Execution | undefined {
    const version = this.versionStmt.get(e.automationId);
    if (version === undefined) return undefined;
    if (this.settled !== undefined && e.id <= this.settled.throughId) this.settled = undefined;
    this.insertStmt.run(e.id, e.automationId, version, JSON.stringify(e.trigger), e.eventId, e.now);
    return {
      id: e.id,
      automationId: e.automationId,
      automationVersion: version,
      state: "PENDING",
      trigger: e.trigger,
      eventId: e.eventId,
      error: "",
      createdAt: e.now,
      startedAt: undefined,
      finishedAt: undefined,
    };
  }

  get(id: string): Execution | undefined {
    const row = this.getStmt.get(id);
    return row === undefined ? undefined : toExecution(row);
  }

  /** The `limit` oldest executions not yet finished (interrupted RUNNING ones and PENDING ones), oldest first. */
  oldestUnfinished(limit: number): Execution[] {
    return this.oldestUnfinishedStmt.all(limit).map(toExecution);
  }

  /** PENDING -> RUNNING; a resumed execution keeps its first start time. */
  markRunning(id: string, now: number): void {
    this.startStmt.run(now, id);
  }

  /**
   * PENDING or RUNNING -> SUCCEEDED or FAILED (an execution claimed and finished in one
   * transaction is never written RUNNING). False when it had finished already.
   */
  finish(id: string, state: "SUCCEEDED" | "FAILED", error: string, now: number, startedAt = now): boolean {
    return this.finishStmt.run(state, error, now, startedAt, id).changes > 0;
  }

  /** Records a finished step; throws (SQLITE_CONSTRAINT_PRIMARYKEY) if that step was recorded already. */
  recordStep(executionId: string, step: StepRecord): void {
    this.insertStepStmt.run(
      executionId,
      step.position,
      step.name,
      step.state,
      step.output === undefined ? null : JSON.stringify(step.output),
      step.error,
      step.startedAt,
      step.finishedAt,
    );
  }

  steps(executionId: string): StepRecord[] {
    return this.stepsStmt.all(executionId).map(toStepRecord);
  }

  /** The step records of several executions at once, by execution id, without their outputs (a listing's). */
  stepSummariesOf(executionIds: readonly string[]): Map<string, StepRecord[]> {
    const byExecution = new Map<string, StepRecord[]>(executionIds.map((id) => [id, []]));
    for (const row of this.stepSummariesOfManyStmt.all(JSON.stringify(executionIds))) {
      byExecution.get(row.execution_id)?.push(toStepRecord(row));
    }
    return byExecution;
  }

  /**
   * Deletes up to `limit` executions created and finished before `time` (ms; created by the time
   * in their UUIDv7 ids), with their step records; returns how many. Unfinished executions are
   * never deleted, however old, and one that waited in the queue longer than the retention is
   * kept a retention after it finished, so its outcome can be read. Outside a transaction only
   * (the statement is its own): the counts of `countByState` are corrected knowing it committed.
   */
  deleteFinishedBefore(time: number, limit: number): number {
    // The statement is its own transaction, so what it deleted is committed when it returns, and
    // the counts below can be corrected (a rollback of an outer transaction would undo them).
    if (this.db.inTransaction) throw new Error("deleteFinishedBefore runs outside a transaction");
    const deleted = this.deleteFinishedBeforeStmt.all(idsCreatedBefore(time), time, limit);
    const settled = this.settled;
    for (const { id, state } of deleted) {
      if (state === "SUCCEEDED" || state === "FAILED") this.deletedSinceStart[state]++;
      if (settled !== undefined && id <= settled.throughId) settled.counts[state]--;
    }
    return deleted.length;
  }

  /**
   * The stored executions by state (`countByState`), and how many executions have finished in
   * each of SUCCEEDED and FAILED since `since` was counted (the `stored` of an earlier call, at the
   * process's start): those stored now, plus those deleted since, less those stored then. It only
   * grows (deletions do not lower it) and starts at 0, so it can be a Prometheus counter, where
   * the stored counts fall at every pass of the retention and a restart would be taken for more
   * finishes.
   */
  countsWithFinishedTotals(since: Readonly<Record<ExecutionState, number>>): {
    stored: Record<ExecutionState, number>;
    finished: { SUCCEEDED: number; FAILED: number };
  } {
    const stored = this.countByState();
    const finishedSince = (state: "SUCCEEDED" | "FAILED") => stored[state] + this.deletedSinceStart[state] - since[state];
    return { stored, finished: { SUCCEEDED: finishedSince("SUCCEEDED"), FAILED: finishedSince("FAILED") } };
  }

  /** A page of executions in id order, without their triggers (ExecutionSummary). */
  listAfter(filter: ExecutionFilter, after: string | undefined, limit: number): ExecutionSummary[] {
    const from = after ?? "";
    const { automationId, state } = filter;
    const rows =
      automationId === ""
        ? state === undefined
          ? this.pageAll.all(from, limit)
          : this.pageByState[half(state)].all(state, from, limit)
        : state === undefined
          ? this.pageOfAutomation(automationId, from, limit)
          : this.pageByAutomationAndState[half(state)].all(automationId, state, from, limit);
    return rows.map(toSummary);
  }

  /**
   * One automation's executions after `from`, every state, in id order (see the constructor). The
   * finished ones are read first: when they fill the page, an unfinished execution can only be on
   * it with an id below the page's last finished one, so the walk of the worker's queue (every
   * automation's unfinished executions, a million of them when the worker is far behind) stops
   * there instead of at the queue's end.
   */
  private pageOfAutomation(automationId: string, from: string, limit: number): SummaryRow[] {
    const { finished } = this.pageByAutomationAndState;
    const byId = (a: SummaryRow, b: SummaryRow) => (a.id < b.id ? -1 : 1);
    const finishedRows = [
      ...finished.all(automationId, "SUCCEEDED", from, limit),
      ...finished.all(automationId, "FAILED", from, limit),
    ].sort(byId);
    const below = finishedRows.length >= limit ? (finishedRows[limit - 1]?.id ?? afterEveryId) : afterEveryId;
    const unfinishedRows = this.unfinishedOfAutomationBetween.all(automationId, from, below, limit);
    // Ids are unique across the reads (one synchronous snapshot: no write comes between them).
    return [...finishedRows, ...unfinishedRows].sort(byId).slice(0, limit);
  }
}

/** Above every execution id (UUIDs are ASCII): the open end of an id range. */
const afterEveryId = "\u{10FFFF}";

function isFinished(state: ExecutionState): boolean {
  return state === "SUCCEEDED" || state === "FAILED";
}

/** Which statement of a finished / unfinished pair serves `state` (see the constructor). */
function half(state: ExecutionState): "finished" | "unfinished" {
  return isFinished(state) ? "finished" : "unfinished";
}

/** `counts` with each row's count added to its state's. */
function addCounts(counts: Record<ExecutionState, number>, rows: readonly { state: ExecutionState; count: number }[]): Record<ExecutionState, number> {
  for (const row of rows) counts[row.state] += row.count;
  return counts;
}

