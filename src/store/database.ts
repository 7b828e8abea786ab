import { mkdirSync } from "node:fs";
import { dirname } from "node:path";
import BetterSqlite3 from "better-sqlite3";
import { migrations, type Migration } from "./migrations/index.js";

export type Database = BetterSqlite3.Database;

/**
 * Opens the SQLite file (creating its folder), sets the pragmas the service relies on and applies
 * every migration not yet applied, each in its own transaction.
 */
export function openDatabase(path: string, extraMigrations: readonly Migration[] = []): Database {
  if (path !== ":memory:") mkdirSync(dirname(path), { recursive: true });
  const db = new BetterSqlite3(path);
  db.pragma("journal_mode = WAL");
  db.pragma("synchronous = NORMAL"); // with WAL: durable on commit except on power loss
  db.pragma("busy_timeout = 5000");
  db.pragma("foreign_keys = ON");
  applyMigrations(db, [...migrations, ...extraMigrations]);
  return db;
}

export function applyMigrations(db: Database, all: readonly Migration[]): void {
  db.exec(`CREATE TABLE IF NOT EXISTS schema_migrations (
    version INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    applied_at INTEGER NOT NULL
  ) STRICT`);
  const applied = new Set(
    db
      .prepare<[], { version: number }>("SELECT version FROM schema_migrations")
      .all()
      .map((row) => row.version),
  );
  const record = db.prepare("INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)");
  const sorted = [...all].sort((a, b) => a.version - b.version);
  for (const migration of sorted) {
    if (applied.has(migration.version)) continue;
    db.transaction(() => {
      db.exec(migration.sql);
      record.run(migration.version, migration.name, Date.now());
    })();
  }
}
