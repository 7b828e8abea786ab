import type { Database } from "./database.js";
import { idsCreatedBefore } from "./ids.js";

/** One inbound webhook request and its verdict; never the body or a secret. */
export interface WebhookDeliveryRecord {
  id: string;
  automationId: string;
  eventId: string;
  status: number;
  reason: string;
  sourceIp: string;
  sizeBytes: number;
  receivedAt: number;
  /** "" unless the request was accepted. */
  executionId: string;
}

interface DeliveryRow {
  id: string;
  automation_id: string;
  event_id: string;
  status: number;
  reason: string;
  source_ip: string;
  size_bytes: number;
  received_at: number;
  execution_id: string;
}

const toDelivery = (row: DeliveryRow): WebhookDeliveryRecord => ({
  id: row.id,
  automationId: row.automation_id,
  eventId: row.event_id,
  status: row.status,
  reason: row.reason,
  sourceIp: row.source_ip,
  sizeBytes: row.size_bytes,
  receivedAt: row.received_at,
  executionId: row.execution_id,
});

export class WebhookDeliveriesRepository {
  private readonly insertStmt;
  private readonly firstPageStmt;
  private readonly nextPageStmt;
  private readonly automationsStmt;
  private readonly keepNewestStmt;
  private readonly deleteOlderStmt;
  private readonly deleteForStmt;

  constructor(db: Database) {
    this.insertStmt = db.prepare<[string, string, string, number, string, string, number, number, string]>(
      `INSERT INTO webhook_deliveries
         (id, automation_id, event_id, status, reason, source_ip, size_bytes, received_at, execution_id)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    );
    // Newest first: ids are UUIDv7, so descending id is descending arrival.
    this.firstPageStmt = db.prepare<[string, number], DeliveryRow>(
      "SELECT * FROM webhook_deliveries WHERE automation_id = ? ORDER BY id DESC LIMIT ?",
    );
    this.nextPageStmt = db.prepare<[string, string, number], DeliveryRow>(
      "SELECT * FROM webhook_deliveries WHERE automation_id = ? AND id < ? ORDER BY id DESC LIMIT ?",
    );
    // Each automation id found by one index search from the previous one (a skip scan): SELECT
    // DISTINCT reads every entry of the index, 60 ms for 1,000,000 deliveries, this 0.1 ms.
    this.automationsStmt = db
      .prepare<[], string>(
        `WITH RECURSIVE automation (id) AS (
           SELECT min(automation_id) FROM webhook_deliveries
           UNION ALL
           SELECT (SELECT min(automation_id) FROM webhook_deliveries WHERE automation_id > automation.id)
           FROM automation WHERE automation.id IS NOT NULL)
         SELECT id FROM automation WHERE id IS NOT NULL`,
      )
      .pluck();
    // The oldest `limit` entries beyond the newest `keep` of one automation.
    this.keepNewestStmt = db.prepare<{ automationId: string; keep: number; limit: number }>(
      `DELETE FROM webhook_deliveries WHERE automation_id = :automationId AND id IN (
         SELECT id FROM webhook_deliveries WHERE automation_id = :automationId AND id <= (
           SELECT id FROM webhook_deliveries WHERE automation_id = :automationId ORDER BY id DESC LIMIT 1 OFFSET :keep)
         ORDER BY id LIMIT :limit)`,
    );
    // By id, not received_at: ids are UUIDv7, in arrival order, so an automation's oldest entries
    // are the first of its range of the primary key, and the log needs no index on time.
    this.deleteOlderStmt = db.prepare<[string, string, string, number]>(
      `DELETE FROM webhook_deliveries WHERE automation_id = ? AND id IN (
         SELECT id FROM webhook_deliveries WHERE automation_id = ? AND id < ? ORDER BY id LIMIT ?)`,
    );
    this.deleteForStmt = db.prepare<[string]>("DELETE FROM webhook_deliveries WHERE automation_id = ?");
  }

  insert(d: WebhookDeliveryRecord): void {
    this.insertStmt.run(
      d.id,
      d.automationId,
      d.eventId,
      d.status,
      d.reason,
      d.sourceIp,
      d.sizeBytes,
      d.receivedAt,
      d.executionId,
    );
  }

  /** Up to `limit` deliveries of the automation older than `before` (all when undefined), newest first. */
  listBefore(automationId: string, before: string | undefined, limit: number): WebhookDeliveryRecord[] {
    const rows =
      before === undefined
        ? this.firstPageStmt.all(automationId, limit)
        : this.nextPageStmt.all(automationId, before, limit);
    return rows.map(toDelivery);
  }

  /** Deletes up to `limit` of the automation's entries logged before `cutoff` (by their id's time); returns how many. */
  deleteLoggedBefore(automationId: string, cutoff: number, limit: number): number {
    return this.deleteOlderStmt.run(automationId, automationId, idsCreatedBefore(cutoff), limit).changes;
  }

  /** The automations that have entries. */
  automationIds(): string[] {
    return this.automationsStmt.all();
  }

  /** Deletes up to `limit` of the automation's entries older than its newest `keep`; returns how many. */
  trimAutomation(automationId: string, keep: number, limit: number): number {
    return this.keepNewestStmt.run({ automationId, keep, limit }).changes;
  }

  deleteFor(automationId: string): void {
    this.deleteForStmt.run(automationId);
  }
}
