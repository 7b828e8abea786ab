import type { Migration } from "./index.js";

/**
 * The executions' (automation_id, id) index goes. Every accepted webhook's execution entered it,
 * appended at its right edge, and SQLite balances an overflowing index leaf with its two left
 * siblings (only rowid tables get a new right-hand leaf of their own), so this one index wrote
 * 3.3 of the 16.2 WAL pages a group of 11 acceptances commits. An automation's executions are
 * listed without it: the finished ones from the (automation_id, state, id) index that holds them
 * (migration 005), the unfinished ones from the worker's queue, merged by id
 * (ExecutionsRepository.listAfter). An accepted webhook writes 1.65 WAL frames instead of 1.95,
 * and its store work is about 2.4 us shorter (bench/store-webhook.ts, bench/README.md).
 */
export const executionsWithoutAutomationIndexSchema: Migration = {
  version: 12,
  name: "executions without their (automation_id, id) index: an automation's are listed through the state indexes",
  sql: `
DROP INDEX automation_executions_by_automation;
`,
};
