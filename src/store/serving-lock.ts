import { realpathSync, statSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import BetterSqlite3 from "better-sqlite3";
import { makeDatabaseFolder } from "./database.js";

/** Another process holds the database's serving lock. */
export class DatabaseInUseError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "DatabaseInUseError";
  }
}

/**
 * The lock file beside the database, named after the database file's real path (symbolic links,
 * to the file or its folder, resolved), so every name that reaches the file finds the same lock.
 * The folder must exist; the file need not yet.
 */
export function servingLockPath(databasePath: string): string {
  let real: string;
  try {
    real = realpathSync(databasePath);
  } catch {
    real = join(realpathSync(dirname(databasePath)), basename(databasePath)); // a new database
  }
  return `${real}.lock`;
}

/**
 * A database file with a second hard link: a second name the lock cannot see (a name is all a
 * path gives), and SQLite finds its WAL by name, so two names of one file can corrupt it (its
 * "How To Corrupt" page, "multiple links to the same file"). Refused at start.
 */
function refuseHardLinks(databasePath: string): void {
  let links: number;
  try {
    links = statSync(databasePath).nlink;
  } catch {
    return; // not there yet: the start creates it
  }
  if (links > 1) {
    throw new Error(
      `the database ${databasePath} has ${links} hard links: SQLite finds a database's WAL by its name, so two names of ` +
        "one file can corrupt it, and one process could serve each name; keep one name (copy the file, or use a symbolic link)",
    );
  }
}

/**
 * One process serves a database: the read caches (principals, listeners, secrets) assume nothing
 * else writes behind them, so a role revoked through one process would go on granting access
 * through another, and the worker assumes it is the only one running executions. The lock is a
 * SQLite file `<database>.lock` written (its user_version) in exclusive locking mode, which keeps its exclusive
 * lock until the connection closes: the kernel drops it when the process ends, however it ends
 * (a SIGKILL leaves no stale lock to clean up). A second process, or a second holder in this one,
 * gets SQLITE_BUSY at once.
 */
export class ServingLock {
  private constructor(private readonly lock: BetterSqlite3.Database | undefined) {}

  /** Takes the lock for `databasePath` (nothing to take for ":memory:"); throws DatabaseInUseError when it is held. */
  static acquire(databasePath: string): ServingLock {
    if (databasePath === ":memory:") return new ServingLock(undefined);
    makeDatabaseFolder(databasePath); // a first start makes the database's folder
    refuseHardLinks(databasePath);
    const path = servingLockPath(databasePath);
    let lock: BetterSqlite3.Database | undefined;
    try {
      lock = new BetterSqlite3(path);
      lock.pragma("busy_timeout = 0");
      lock.pragma("journal_mode = MEMORY"); // no `.lock-journal` file beside it while held
      lock.pragma("locking_mode = EXCLUSIVE");
      // A write, not an empty transaction: SQLite opens a file this process cannot write read-only,
      // without a word, and an empty exclusive transaction on it took only a shared lock, so a
      // second server ran beside the first (one event id ran twice). The write fails instead.
      lock.exec("BEGIN EXCLUSIVE; PRAGMA user_version = 1; COMMIT");
      return new ServingLock(lock);
    } catch (e) {
      lock?.close();
      if (e instanceof BetterSqlite3.SqliteError && e.code.startsWith("SQLITE_BUSY")) {
        throw new DatabaseInUseError(
          `another accessd process is using the database ${databasePath} (it holds ${path}); ` +
            "one process serves a database: stop that one first",
        );
      }
      if (e instanceof BetterSqlite3.SqliteError && e.code.startsWith("SQLITE_READONLY")) {
        throw new Error(
          `cannot take the serving lock ${path}: this process cannot write it (its owner or mode, a read-only volume); ` +
            "make it writable by the server's user, or remove it while no server runs",
          { cause: e },
        );
      }
      // Not SQLite's lock file (someone's file or folder by that name): say which file.
      throw new Error(`cannot take the serving lock ${path}: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
    }
  }

  release(): void {
    if (this.lock?.open) this.lock.close();
  }
}
