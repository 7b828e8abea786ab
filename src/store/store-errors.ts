import Database from "better-sqlite3";

/**
 * SQLite result codes, extended ones included (SQLITE_IOERR_WRITE, SQLITE_BUSY_SNAPSHOT, ...),
 * that say the store cannot serve a request now rather than that the request is wrong: the disk is
 * full, another process holds the database past busy_timeout, the file cannot be read or written.
 */
const unavailableCodes = /^SQLITE_(FULL|BUSY|LOCKED|IOERR|READONLY|CANTOPEN|NOMEM|PROTOCOL)(_[A-Z_]+)?$/;

/**
 * Stored data the service cannot use, through no fault of the request: a webhook secret that does
 * not open with the data key (its row altered, or sealed under another key). Answered like a
 * store failure (503, retry later), never as the sender's fault: a sender told 401 would drop the
 * event, one told 503 retries once an operator has mended the data.
 */
export class StoredDataUnreadableError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "StoredDataUnreadableError";
  }
}

/**
 * True for a store failure a client may retry later (disk full, locked, I/O error, unreadable
 * data, a page read damaged). A read the disk fails reaches SQLite as a damaged page
 * (SQLITE_CORRUPT): answered 500 `internal`, it broke the promise of a 503 for an I/O error, and
 * a damaged file is no more the request's fault (Store.noteDamage makes the server unready).
 */
export function isStoreUnavailable(error: unknown): boolean {
  if (error instanceof StoredDataUnreadableError) return true;
  return error instanceof Database.SqliteError && (unavailableCodes.test(error.code) || hasDamagedCode(error));
}

/** True for SQLite's "the file is damaged or not a database": no request's fault, and no retry mends it. */
export function isStoreDamaged(error: unknown): boolean {
  return error instanceof Database.SqliteError && hasDamagedCode(error);
}

/** isStoreDamaged for an error that carries SQLite's code without being its class (the checkpoint thread's report). */
export function hasDamagedCode(error: unknown): boolean {
  const code: unknown = typeof error === "object" && error !== null && "code" in error ? error.code : undefined;
  return typeof code === "string" && /^SQLITE_(CORRUPT|NOTADB)/.test(code);
}
