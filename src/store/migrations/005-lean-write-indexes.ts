import type { Migration } from "./index.js";

/**
 * Fewer index entries written per accepted webhook (issue 7: a commit's cost is the pages it
 * dirtied, bench/store-webhook.ts):
 *
 * - The (state, id) and (automation_id, state, id) indexes of executions hold finished executions
 *   only. An execution used to enter both as PENDING and move to SUCCEEDED or FAILED when it
 *   ended: two index entries written, deleted and written again, for a state that lasts a few
 *   milliseconds. The unfinished ones are listed and counted through the worker's queue index
 *   (automation_executions_unfinished), which has them all anyway.
 * - The delivery log is pruned by id (UUIDv7: its first 48 bits are the arrival time in ms), so
 *   its received_at index is gone.
 *
 * Together about a sixth fewer WAL frames per accepted webhook (bench/RESULTS.md).
 */
export const leanWriteIndexesSchema: Migration = {
  version: 5,
  name: "finished-only state indexes on executions; delivery log pruned by id",
  sql: `
DROP INDEX automation_executions_by_state;
DROP INDEX automation_executions_by_automation_state;
CREATE INDEX automation_executions_finished_by_state ON automation_executions (state, id)
  WHERE state IN ('SUCCEEDED', 'FAILED');
CREATE INDEX automation_executions_finished_by_automation_state ON automation_executions (automation_id, state, id)
  WHERE state IN ('SUCCEEDED', 'FAILED');
DROP INDEX webhook_deliveries_by_time;
`,
};
