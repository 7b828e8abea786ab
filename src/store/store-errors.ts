import Database from "better-sqlite3";

/**
 * SQLite result codes, extended ones included (SQLITE_IOERR_WRITE, SQLITE_BUSY_SNAPSHOT, ...),
 * that say the store cannot serve a request now rather than that the request is wrong: the disk is
 * full, another process holds the database past busy_timeout, the file cannot be read or written.
 */
const unavailableCodes = /^SQLITE_(FULL|BUSY|LOCKED|IOERR|READONLY|CANTOPEN|NOMEM|PROTOCOL)(_[A-Z_]+)?$/;

/** True for a store failure a client may retry later (disk full, locked, I/O error). */
export function isStoreUnavailable(error: unknown): boolean {
  return error instanceof Database.SqliteError && unavailableCodes.test(error.code);
}
