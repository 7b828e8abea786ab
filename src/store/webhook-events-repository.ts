import type { Database } from "./database.js";
import { EventKeyIndex } from "./event-key-index.js";

/**
 * The (listener, Webhook-Event-Id) pairs already accepted, in arrival order: the idempotency
 * record of spec 2.4.
 *
 * The rows are the durable record; their uniqueness is kept in memory (EventKeyIndex), not by a
 * unique index in the file (migration 011 dropped it: bench/README.md). The index is read from
 * the rows on first need, so after a crash it holds exactly the pairs committed (the server reads
 * it before it listens, `readKeys`; a command that never touches event records, such as
 * `bootstrap`, never reads it: 1.8 s and 40-80 MiB for a million and a half records); every insert
 * and delete here changes it in the same step, and a transaction or savepoint rolled back takes
 * the change back with it (`whenRolledBack`). That holds as long as only this repository,
 * on this connection, writes event records: the serving lock keeps a second server off the file.
 */
export class WebhookEventsRepository {
  private keysRead: EventKeyIndex | undefined;
  /**
   * Pairs that more than one row records, and how many rows beyond the first: only in a database
   * written before event ids were lower-cased, where `ABC…` and `abc…` could be two events (the
   * index holds them as one pair). Until the last of those rows expires, the pair stays held.
   */
  private readonly extraRows = new Map<string, number>();
  private readonly insertStmt;
  private readonly deleteOlderStmt;
  private readonly allPairsStmt;

  constructor(
    db: Database,
    /** Runs `undo` if the current transaction (or savepoint) is rolled back (Store.whenRolledBack). */
    private readonly whenRolledBack: (undo: () => void) => void,
  ) {
    this.insertStmt = db.prepare<[string, string, number, string]>(
      "INSERT INTO webhook_events (listener_id, event_id, received_at, execution_id) VALUES (?, ?, ?, ?)",
    );
    // Rows are in arrival order (rowid), so the oldest are the first `limit` rows; of those, the
    // ones past the cutoff go. No index on received_at (migration 005).
    this.deleteOlderStmt = db
      .prepare<[number, number], [string, string]>(
        `DELETE FROM webhook_events WHERE rowid IN (
           SELECT rowid FROM (SELECT rowid, received_at FROM webhook_events ORDER BY rowid LIMIT ?) WHERE received_at < ?)
         RETURNING listener_id, event_id`,
      )
      .raw();
    this.allPairsStmt = db.prepare<[], [string, string]>("SELECT listener_id, event_id FROM webhook_events").raw();
  }

  /**
   * Reads the recorded pairs into memory now, unless already read, and returns how many there
   * are. The server calls it before it listens, so that no webhook waits for the read.
   */
  readKeys(): number {
    return this.size;
  }

  /** How many pairs are recorded. */
  get size(): number {
    return this.keys.size;
  }

  /** The bytes the in-memory index of the pairs holds. */
  get keysBytes(): number {
    return this.keys.bytes;
  }

  /**
   * The index, read on first use. Every method takes it before its statement runs, so the read
   * sees no change of its own transaction: only this repository writes event records.
   */
  private get keys(): EventKeyIndex {
    if (this.keysRead === undefined) {
      const keys = new EventKeyIndex();
      // Stage 4 accepts UUIDs only; a row with any other id (none is written) could never match
      // one, and is skipped (addIfUuid: undefined).
      for (const [listenerId, eventId] of this.allPairsStmt.iterate()) {
        if (keys.addIfUuid(listenerId, eventId) === false) this.countExtraRow(pairKey(listenerId, eventId), 1);
      }
      this.keysRead = keys;
    }
    return this.keysRead;
  }

  has(listenerId: string, eventId: string): boolean {
    return this.keys.has(listenerId, eventId);
  }

  /**
   * Records the pair unless it is recorded already: false (and nothing written) for a duplicate.
   * Inside a transaction, its rollback forgets the pair again. The event id is a UUID (stage 4).
   */
  insertIfNew(record: { listenerId: string; eventId: string; receivedAt: number; executionId: string }): boolean {
    const { listenerId, eventId } = record;
    const keys = this.keys;
    if (!keys.add(listenerId, eventId)) return false;
    try {
      this.whenRolledBack(() => keys.delete(listenerId, eventId));
      this.insertStmt.run(listenerId, eventId, record.receivedAt, record.executionId);
    } catch (error) {
      keys.delete(listenerId, eventId);
      throw error;
    }
    return true;
  }

  /**
   * Deletes the records received before `cutoff` among the `limit` oldest; returns how many (fewer
   * than `limit`: nothing older is left, in arrival order). Should the clock have stepped back,
   * records that arrived after a later-dated one wait until it expires too.
   */
  deleteReceivedBefore(cutoff: number, limit: number): number {
    const keys = this.keys;
    let deleted: [string, string][] = [];
    /** Pairs whose deleted row was not their last (extraRows), taken back on rollback too. */
    const stillHeld: string[] = [];
    this.whenRolledBack(() => {
      for (const [listenerId, eventId] of deleted) keys.addIfUuid(listenerId, eventId);
      for (const pair of stillHeld) this.countExtraRow(pair, 1);
    });
    deleted = this.deleteOlderStmt.all(limit, cutoff);
    for (const [listenerId, eventId] of deleted) {
      const pair = this.extraRows.size === 0 ? undefined : pairKey(listenerId, eventId);
      if (pair !== undefined && this.extraRows.has(pair)) {
        this.countExtraRow(pair, -1);
        stillHeld.push(pair);
      } else {
        keys.delete(listenerId, eventId);
      }
    }
    return deleted.length;
  }

  /** Adds `by` to the pair's count of rows beyond its first, forgetting the pair at 0. */
  private countExtraRow(pair: string, by: 1 | -1): void {
    const count = (this.extraRows.get(pair) ?? 0) + by;
    if (count === 0) this.extraRows.delete(pair);
    else this.extraRows.set(pair, count);
  }
}

/** A pair as the index sees it: event ids in any case are the same id. */
function pairKey(listenerId: string, eventId: string): string {
  return `${listenerId} ${eventId.toLowerCase()}`;
}
