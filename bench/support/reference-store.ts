import Database from "better-sqlite3";

/**
 * The reference receiver's store (bench/support/reference-receiver.ts, bench/store-webhook.ts):
 * one table of event ids, WAL and `synchronous = NORMAL` as accessd, and the statements of a
 * group commit (BEGIN, one INSERT per webhook, COMMIT). `changes` of the INSERT is 0 for a
 * repeated event id.
 */
export function openReferenceStore(path: string) {
  const db = new Database(path);
  db.pragma("journal_mode = WAL");
  db.pragma("synchronous = NORMAL");
  db.exec("CREATE TABLE IF NOT EXISTS events (event_id TEXT PRIMARY KEY, received_at INTEGER NOT NULL) WITHOUT ROWID");
  return {
    db,
    insert: db.prepare<[string, number]>("INSERT OR IGNORE INTO events (event_id, received_at) VALUES (?, ?)"),
    begin: db.prepare("BEGIN IMMEDIATE"),
    commit: db.prepare("COMMIT"),
  };
}
