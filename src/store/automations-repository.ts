import type { StepDefinition } from "../automations/step-definition.js";
import type { TriggerConfig, WebhookListenerTarget } from "../automations/trigger-config.js";
import type { Database } from "./database.js";
import { ReadCache } from "./read-cache.js";

export interface Automation {
  id: string;
  displayName: string;
  description: string;
  trigger: TriggerConfig;
  /** The steps of the current version. */
  steps: StepDefinition[];
  published: boolean;
  triggerEnabled: boolean;
  /** 1 on create, +1 on every update; each version's steps are kept for the executions that run it. */
  version: number;
  createdAt: number;
  updatedAt: number;
}

interface AutomationRow {
  id: string;
  display_name: string;
  description: string;
  trigger: string;
  published: number;
  trigger_enabled: number;
  version: number;
  created_at: number;
  updated_at: number;
  steps: string;
}

/**
 * The trigger and steps columns hold what this repository wrote: JSON.stringify of a
 * TriggerConfig and of StepDefinition[] that the API validated before saving. So they are read
 * back as those types without checking each field again; a change to either shape needs a
 * migration that rewrites the stored ones. Values a later release limits (an expression saved
 * before the depth limit) still read back: the worker compiles what it runs and fails the step.
 */
const toAutomation = (row: AutomationRow): Automation => ({
  id: row.id,
  displayName: row.display_name,
  description: row.description,
  trigger: JSON.parse(row.trigger) as TriggerConfig,
  steps: JSON.parse(row.steps) as StepDefinition[],
  published: row.published === 1,
  triggerEnabled: row.trigger_enabled === 1,
  version: row.version,
  createdAt: row.created_at,
  updatedAt: row.updated_at,
});

const selectWithSteps = `SELECT a.*, v.steps FROM automations a
  JOIN automation_versions v ON v.automation_id = a.id AND v.version = a.version`;

export class AutomationsRepository {
  private readonly insertStmt;
  private readonly insertVersionStmt;
  private readonly getStmt;
  private readonly pageStmt;
  private readonly updateStmt;
  private readonly setFlagsStmt;
  private readonly deleteStmt;
  private readonly deleteUnusedVersionsStmt;
  private readonly versionStepsStmt;
  private readonly byListenerStmt;
  /** findByListenerId's answers (every webhook request asks); cleared by every write below. */
  private readonly listeners: ReadCache<string, Readonly<WebhookListenerTarget>>;
  /** Counts the writes below (listenerWrites). */
  private writes = 0;

  constructor(db: Database) {
    this.listeners = new ReadCache(db);
    this.insertStmt = db.prepare<
      [string, string, string, string, string | null, number, number, number, number, number]
    >(
      `INSERT INTO automations (id, display_name, description, trigger, listener_id, published, trigger_enabled,
         version, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    );
    this.insertVersionStmt = db.prepare<[string, number, string, number]>(
      "INSERT INTO automation_versions (automation_id, version, steps, created_at) VALUES (?, ?, ?, ?)",
    );
    this.getStmt = db.prepare<[string], AutomationRow>(`${selectWithSteps} WHERE a.id = ?`);
    this.pageStmt = db.prepare<[string, number], AutomationRow>(
      `${selectWithSteps} WHERE a.id > ? ORDER BY a.id LIMIT ?`,
    );
    this.updateStmt = db.prepare<[string, string, string, string | null, number, number, string]>(
      `UPDATE automations SET display_name = ?, description = ?, trigger = ?, listener_id = ?, version = ?,
         updated_at = ? WHERE id = ?`,
    );
    this.setFlagsStmt = db.prepare<[number, number, number, string]>(
      "UPDATE automations SET published = ?, trigger_enabled = ?, updated_at = ? WHERE id = ?",
    );
    this.deleteStmt = db.prepare<[string]>("DELETE FROM automations WHERE id = ?");
    // Executions have no (automation_id) index of their own (migration 012): the finished ones are
    // found through their (automation_id, state, id) index, the unfinished ones in the worker's queue.
    this.deleteUnusedVersionsStmt = db.prepare<{ id: string }>(
      `DELETE FROM automation_versions AS v WHERE v.automation_id = :id
       AND NOT EXISTS (SELECT 1 FROM automation_executions e
         WHERE e.automation_id = :id AND e.state IN ('SUCCEEDED', 'FAILED') AND e.automation_version = v.version)
       AND NOT EXISTS (SELECT 1 FROM automation_executions e INDEXED BY automation_executions_unfinished
         WHERE e.state IN ('PENDING', 'RUNNING') AND e.automation_id = :id AND e.automation_version = v.version)`,
    );
    this.versionStepsStmt = db
      .prepare<[string, number], string>("SELECT steps FROM automation_versions WHERE automation_id = ? AND version = ?")
      .pluck();
    this.byListenerStmt = db.prepare<
      [string],
      { id: string; published: number; trigger_enabled: number; trigger: string }
    >("SELECT id, published, trigger_enabled, trigger FROM automations WHERE listener_id = ?");
  }

  /** Writes the automation and its first version. Call inside a transaction. */
  insert(a: Automation): void {
    this.wrote();
    this.insertStmt.run(
      a.id,
      a.displayName,
      a.description,
      JSON.stringify(a.trigger),
      listenerIdOf(a.trigger),
      a.published ? 1 : 0,
      a.triggerEnabled ? 1 : 0,
      a.version,
      a.createdAt,
      a.updatedAt,
    );
    this.insertVersionStmt.run(a.id, a.version, JSON.stringify(a.steps), a.createdAt);
  }

  get(id: string): Automation | undefined {
    const row = this.getStmt.get(id);
    return row === undefined ? undefined : toAutomation(row);
  }

  listAfter(after: string | undefined, limit: number): Automation[] {
    return this.pageStmt.all(after ?? "", limit).map(toAutomation);
  }

  /**
   * Writes a new version: definition fields and steps. `a.version` must be the next version.
   * Call inside a transaction.
   */
  update(a: Automation): void {
    this.wrote();
    this.updateStmt.run(
      a.displayName,
      a.description,
      JSON.stringify(a.trigger),
      listenerIdOf(a.trigger),
      a.version,
      a.updatedAt,
      a.id,
    );
    this.insertVersionStmt.run(a.id, a.version, JSON.stringify(a.steps), a.updatedAt);
  }

  /** Publication and trigger toggle; these do not make a new version. */
  setFlags(a: Automation): void {
    this.wrote();
    this.setFlagsStmt.run(a.published ? 1 : 0, a.triggerEnabled ? 1 : 0, a.updatedAt, a.id);
  }

  /** True when a row was deleted. Versions still named by executions stay, so those can finish. */
  delete(id: string): boolean {
    this.wrote();
    const deleted = this.deleteStmt.run(id).changes > 0;
    if (deleted) this.deleteUnusedVersionsStmt.run({ id });
    return deleted;
  }

  /** The steps a version runs (immutable once written). */
  versionSteps(automationId: string, version: number): StepDefinition[] | undefined {
    const steps = this.versionStepsStmt.get(automationId, version);
    return steps === undefined ? undefined : (JSON.parse(steps) as StepDefinition[]);
  }

  /**
   * How many writes to automations this process has made (each may change what a listener
   * leads to). The same count as at an earlier findByListenerId means its answer still holds.
   */
  listenerWrites(): number {
    return this.writes;
  }

  private wrote(): void {
    this.writes++;
    this.listeners.clear();
  }

  /** The automation behind a webhook listener: one indexed lookup, remembered until the next write. */
  findByListenerId(listenerId: string): Readonly<WebhookListenerTarget> | undefined {
    return this.listeners.get(listenerId, () => this.loadListener(listenerId));
  }

  private loadListener(listenerId: string): WebhookListenerTarget | undefined {
    const row = this.byListenerStmt.get(listenerId);
    if (row === undefined) return undefined;
    const trigger = JSON.parse(row.trigger) as TriggerConfig;
    if (trigger.kind !== "webhook") return undefined;
    return {
      automationId: row.id,
      published: row.published === 1,
      triggerEnabled: row.trigger_enabled === 1,
      trigger,
    };
  }
}

function listenerIdOf(trigger: TriggerConfig): string | null {
  return trigger.kind === "webhook" ? trigger.listenerId : null;
}
