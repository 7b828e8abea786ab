import type { Database } from "../database.js";
import { deliveryLogByAutomation, eventRecordsInArrivalOrder } from "./005-lean-write-indexes.js";
import type { Migration } from "./index.js";

/**
 * Finishes migration 005 on a database that a build from the hours when 005 was still being
 * written migrated (it reached `main` in three steps, 6cd089c, aa18e2b and c0b63b7, each recorded
 * as version 5): the first left the delivery log and the event records as migration 004 made them,
 * the second the event records. The current build then could not open such a file at all ("no
 * such column: rowid"). Each part runs only where the table is still in its old shape, so on every
 * other database this migration changes nothing.
 */
export const finishEarly005Schema: Migration = {
  version: 8,
  name: "finish migration 005 on databases an early build of it migrated",
  sql: "",
  apply(db: Database): void {
    const shapeOf = (table: string): string =>
      db.prepare<[string], string>("SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = ?").pluck().get(table) ?? "";
    // 004's delivery log is a rowid table keyed by id; 005's is WITHOUT ROWID.
    if (!/WITHOUT ROWID/i.test(shapeOf("webhook_deliveries"))) db.exec(deliveryLogByAutomation);
    // 004's event records are WITHOUT ROWID on (listener_id, event_id); 005's are a rowid table.
    if (/WITHOUT ROWID/i.test(shapeOf("webhook_events"))) db.exec(eventRecordsInArrivalOrder);
  },
};
