import type { Migration } from "./index.js";

/**
 * Automations, their immutable versions (the steps each version runs) and durable executions.
 * An execution names the version it runs, so updating an automation never changes an execution
 * already created. Executions and versions name the automation without a foreign key: deleting an
 * automation keeps its history, and executions already accepted still run to the end.
 */
export const automationsSchema: Migration = {
  version: 3,
  name: "automations, automation versions, executions, step executions",
  sql: `
CREATE TABLE automations (
  id TEXT PRIMARY KEY,
  display_name TEXT NOT NULL,
  description TEXT NOT NULL,
  -- JSON TriggerConfig (src/automations/trigger-config.ts)
  trigger TEXT NOT NULL,
  -- webhook triggers only: the listener id, so that the webhook route finds its target in one query
  listener_id TEXT UNIQUE,
  published INTEGER NOT NULL,
  trigger_enabled INTEGER NOT NULL,
  version INTEGER NOT NULL,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL
) STRICT;

CREATE TABLE automation_versions (
  automation_id TEXT NOT NULL,
  version INTEGER NOT NULL,
  -- JSON StepDefinition[] (src/automations/step-definition.ts)
  steps TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  PRIMARY KEY (automation_id, version)
) STRICT;

CREATE TABLE automation_executions (
  id TEXT PRIMARY KEY,
  automation_id TEXT NOT NULL,
  automation_version INTEGER NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('PENDING', 'RUNNING', 'SUCCEEDED', 'FAILED')),
  -- JSON: ctx.trigger
  trigger TEXT NOT NULL,
  event_id TEXT NOT NULL,
  error TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  started_at INTEGER,
  finished_at INTEGER
) STRICT;
CREATE INDEX automation_executions_by_automation ON automation_executions (automation_id, id);
CREATE INDEX automation_executions_by_state ON automation_executions (state, id);
CREATE INDEX automation_executions_by_automation_state ON automation_executions (automation_id, state, id);
-- the worker's queue: unfinished executions in creation order
CREATE INDEX automation_executions_unfinished ON automation_executions (id) WHERE state IN ('PENDING', 'RUNNING');

-- One row per finished step, written in the same transaction as the step's side effect; the
-- primary key makes a second run of a finished step fail (and roll its effect back).
CREATE TABLE automation_step_executions (
  execution_id TEXT NOT NULL REFERENCES automation_executions(id) ON DELETE CASCADE,
  position INTEGER NOT NULL,
  name TEXT NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('SUCCEEDED', 'FAILED', 'SKIPPED')),
  -- JSON; NULL when the step has no output
  output TEXT,
  error TEXT NOT NULL,
  started_at INTEGER NOT NULL,
  finished_at INTEGER NOT NULL,
  PRIMARY KEY (execution_id, position)
) STRICT;
`,
};
