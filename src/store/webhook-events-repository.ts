import type { Database } from "./database.js";

/** The (listener, Webhook-Event-Id) pairs already accepted, in arrival order: the idempotency record of spec 2.4. */
export class WebhookEventsRepository {
  private readonly existsStmt;
  private readonly insertIfNewStmt;
  private readonly deleteOlderStmt;
  private readonly countStmt;

  constructor(db: Database) {
    this.existsStmt = db
      .prepare<[string, string], number>("SELECT 1 FROM webhook_events WHERE listener_id = ? AND event_id = ?")
      .pluck();
    this.insertIfNewStmt = db.prepare<[string, string, number, string]>(
      `INSERT INTO webhook_events (listener_id, event_id, received_at, execution_id) VALUES (?, ?, ?, ?)
       ON CONFLICT (listener_id, event_id) DO NOTHING`,
    );
    // Rows are in arrival order (rowid), so the oldest are the first `limit` rows; of those, the
    // ones past the cutoff go. No index on received_at (migration 005).
    this.deleteOlderStmt = db.prepare<[number, number]>(
      `DELETE FROM webhook_events WHERE rowid IN (
         SELECT rowid FROM (SELECT rowid, received_at FROM webhook_events ORDER BY rowid LIMIT ?) WHERE received_at < ?)`,
    );
    this.countStmt = db
      .prepare<[string], number>("SELECT count(*) FROM webhook_events WHERE listener_id = ?")
      .pluck();
  }

  has(listenerId: string, eventId: string): boolean {
    return this.existsStmt.get(listenerId, eventId) !== undefined;
  }

  /** Records the pair unless it is recorded already: false (and nothing written) for a duplicate. */
  insertIfNew(record: { listenerId: string; eventId: string; receivedAt: number; executionId: string }): boolean {
    return this.insertIfNewStmt.run(record.listenerId, record.eventId, record.receivedAt, record.executionId).changes > 0;
  }

  /**
   * Deletes the records received before `cutoff` among the `limit` oldest; returns how many (fewer
   * than `limit`: nothing older is left, in arrival order). Should the clock have stepped back,
   * records that arrived after a later-dated one wait until it expires too.
   */
  deleteReceivedBefore(cutoff: number, limit: number): number {
    return this.deleteOlderStmt.run(limit, cutoff).changes;
  }

  countFor(listenerId: string): number {
    return this.countStmt.get(listenerId) ?? 0;
  }
}
