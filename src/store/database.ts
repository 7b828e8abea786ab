import { closeSync, constants, existsSync, mkdirSync, openSync } from "node:fs";
import { dirname } from "node:path";
import BetterSqlite3 from "better-sqlite3";
import { migrations, type Migration } from "./migrations/index.js";

export type Database = BetterSqlite3.Database;

/**
 * Opens the SQLite file (creating its folder), sets the pragmas the service relies on and applies
 * every migration not yet applied, each in its own transaction.
 *
 * A new database is created readable by its owner only (0600, its new folder 0700), whatever the
 * umask: it holds personal data, webhook bodies and the hashes of client secrets. SQLite gives
 * the -wal and -shm files the database file's mode. An existing file's mode is left as it is.
 */
export function openDatabase(path: string, extraMigrations: readonly Migration[] = []): Database {
  if (path !== ":memory:") {
    makeDatabaseFolder(path);
    createOwnerOnly(path);
  }
  const db = new BetterSqlite3(path);
  try {
    configureAndMigrate(db, extraMigrations);
  } catch (e) {
    db.close();
    throw e;
  }
  return db;
}

/** The folder of a database file, made (with its missing parents) readable by its owner only. */
export function makeDatabaseFolder(databasePath: string): void {
  mkdirSync(dirname(databasePath), { recursive: true, mode: 0o700 });
}

/**
 * Creates `path` empty with mode 0600 unless it exists (SQLite makes an empty file a new database);
 * an existing file is not opened at all. Without O_EXCL, so that a symbolic link to a file not
 * made yet creates that file 0600 too.
 */
export function createOwnerOnly(path: string): void {
  if (existsSync(path)) return; // follows links: false for a link to nothing yet
  closeSync(openSync(path, constants.O_CREAT | constants.O_WRONLY, 0o600));
}

function configureAndMigrate(db: Database, extraMigrations: readonly Migration[]): void {
  db.pragma("journal_mode = WAL");
  db.pragma("synchronous = NORMAL"); // with WAL: durable on commit except on power loss
  db.pragma("busy_timeout = 5000");
  db.pragma("foreign_keys = ON");
  applyMigrations(db, [...migrations, ...extraMigrations]);
}

/** The database was migrated by a newer accessd than this one. */
export class NewerSchemaError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "NewerSchemaError";
  }
}

/** Applies the migrations not yet applied; throws NewerSchemaError when the database has one this build does not know. */
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
  const sorted = [...all].sort((a, b) => a.version - b.version);
  const known = new Set(sorted.map((m) => m.version));
  const unknown = [...applied].filter((version) => !known.has(version)).sort((a, b) => a - b);
  if (unknown.length > 0) {
    // A newer accessd migrated this file (an upgrade rolled back): running on a schema this build
    // does not know could fail every write, or write what the newer one cannot read.
    throw new NewerSchemaError(
      `the database ${db.name} has schema migrations this accessd does not know (${unknown.join(", ")}; ` +
        `it knows up to ${sorted.at(-1)?.version ?? 0}): it was used by a newer accessd; ` +
        "run that version, or restore a backup made before the upgrade",
    );
  }
  const record = db.prepare("INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)");
  for (const migration of sorted) {
    if (applied.has(migration.version)) continue;
    db.transaction(() => {
      db.exec(migration.sql);
      migration.apply?.(db);
      record.run(migration.version, migration.name, Date.now());
    })();
  }
}
