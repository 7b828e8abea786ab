import { accessSync, constants, statfsSync, statSync } from "node:fs";
import { dirname } from "node:path";
import { AppEntitlementOwnersRepository } from "./app-entitlement-owners-repository.js";
import { AppEntitlementsRepository } from "./app-entitlements-repository.js";
import { AppsRepository } from "./apps-repository.js";
import { AutomationsRepository } from "./automations-repository.js";
import { AssertionJtisRepository } from "./assertion-jtis-repository.js";
import { ClientsRepository, type ClientPrincipal } from "./clients-repository.js";
import { NewerSchemaError, openDatabase, type Database } from "./database.js";
import { ExecutionsRepository } from "./executions-repository.js";
import { hasDamagedCode } from "./store-errors.js";
import { ReadCache } from "./read-cache.js";
import { SettingsRepository } from "./settings-repository.js";
import { SigningKeysRepository } from "./signing-keys-repository.js";
import { WalCheckpointer, type WalCheckpointerOptions } from "./wal-checkpointer.js";
import { UsersRepository } from "./users-repository.js";
import { WebhookRepositories } from "./webhook-repositories.js";

/**
 * The database file could not be opened, or not for writing. SQLite's own messages ("file is not a
 * database", "unable to open database file") do not say which file; this one does.
 */
export class DatabaseOpenError extends Error {
  constructor(path: string, cause: unknown) {
    const reason = cause instanceof Error ? cause.message : String(cause);
    // SQLITE_READONLY and its extended codes (SQLITE_READONLY_RECOVERY, ...): "attempt to write a readonly database".
    const code = cause instanceof Error ? String((cause as NodeJS.ErrnoException).code) : "";
    const note = code.startsWith("SQLITE_READONLY") ? unwritableFilesNote(path) : /^SQLITE_(IOERR|FULL)/.test(code) ? fullVolumeNote(path) : "";
    super(`cannot open the database ${path}: ${reason}${note}`, { cause });
    this.name = "DatabaseOpenError";
  }
}

/**
 * For SQLite's "disk I/O error" (or "database or disk is full") at the start: whether the volume is
 * full, which SQLite reports as an I/O error when it cannot grow the -shm file (a server restarted
 * on a full volume read as failing hardware).
 */
function fullVolumeNote(path: string): string {
  try {
    const volume = statfsSync(dirname(path));
    return volume.bavail === 0 ? " (its volume is full: free some space)" : "";
  } catch {
    return "";
  }
}

/**
 * Which of the database's files this process cannot write, for SQLite's "attempt to write a
 * readonly database": SQLite makes the -wal and -shm files with the database's mode, so a start
 * on a read-only database leaves them read-only too, and once the database is writable again the
 * start still fails, with a message that names only the database.
 */
function unwritableFilesNote(path: string): string {
  const unwritable = [path, `${path}-wal`, `${path}-shm`].filter((file) => {
    try {
      accessSync(file, constants.W_OK);
      return false;
    } catch (e) {
      return (e as NodeJS.ErrnoException).code !== "ENOENT";
    }
  });
  return unwritable.length === 0 ? "" : ` (not writable: ${unwritable.join(", ")})`;
}

/**
 * Refuses a database path that names a folder (or anything but a file), before anything is made
 * beside it (the serving lock's file): SQLite would say only "unable to open database file".
 * Nothing there yet is fine: the first start creates it.
 */
export function refuseNonFileDatabase(path: string): void {
  if (path === ":memory:") return;
  let stats: ReturnType<typeof statSync>;
  try {
    stats = statSync(path, { throwIfNoEntry: false });
  } catch (e) {
    // A file where the path needs a folder (`notes.txt/accessd.db`): Node's bare ENOTDIR named no database.
    if ((e as NodeJS.ErrnoException).code === "ENOTDIR") throw new DatabaseOpenError(path, "a part of its path is a file, not a folder");
    throw e;
  }
  if (stats !== undefined && !stats.isFile()) {
    throw new DatabaseOpenError(path, stats.isDirectory() ? "it is a folder, not a file" : "it is not a regular file");
  }
}

/**
 * A file SQLite may only read (its mode, another owner, an immutable or read-only mount) opens
 * without complaint, and a migrated database needs no write to start: the server would listen and
 * fail its first write ("attempt to write a readonly database"). So one page is written here, in a
 * transaction rolled back (the header's user_version, set to what it is): nothing changes.
 */
function refuseReadOnlyDatabase(db: Database): void {
  const userVersion = Number(db.pragma("user_version", { simple: true }));
  db.exec("BEGIN IMMEDIATE");
  try {
    db.pragma(`user_version = ${userVersion}`);
  } finally {
    if (db.inTransaction) db.exec("ROLLBACK");
  }
}

/**
 * The store: one SQLite database and a repository per aggregate. better-sqlite3 is synchronous,
 * so a `transaction` callback runs without interleaving with any other request.
 */
/** How long after the last damage met the store is not ready (Store.noteDamage). */
export const damageMemoryMs = 60_000;

export class Store {
  readonly apps: AppsRepository;
  readonly appEntitlements: AppEntitlementsRepository;
  readonly users: UsersRepository;
  readonly owners: AppEntitlementOwnersRepository;
  readonly settings: SettingsRepository;
  readonly automations: AutomationsRepository;
  readonly executions: ExecutionsRepository;
  readonly webhooks: WebhookRepositories;
  readonly clients: ClientsRepository;
  readonly signingKeys: SigningKeysRepository;
  readonly assertionJtis: AssertionJtisRepository;
  private readonly pingStmt;
  private readonly txStatements;
  private checkpointer: WalCheckpointer | undefined;
  /** Per open transaction and savepoint, innermost last: what to undo in memory if it is rolled back. */
  private readonly undoStack: (() => void)[][] = [];
  /** When damage was last noted (performance.now()), if ever. */
  private lastDamageAt: number | undefined;
  /** Told of the first damage noted in each spell. */
  onDamaged: ((error: unknown) => void) | undefined;

  constructor(readonly db: Database) {
    this.pingStmt = db.prepare("SELECT 1").pluck();
    this.txStatements = {
      begin: db.prepare("BEGIN IMMEDIATE"),
      commit: db.prepare("COMMIT"),
      rollback: db.prepare("ROLLBACK"),
      savepoint: db.prepare("SAVEPOINT nested"),
      release: db.prepare("RELEASE nested"),
      rollbackTo: db.prepare("ROLLBACK TO nested"),
    };
    this.apps = new AppsRepository(db);
    this.appEntitlements = new AppEntitlementsRepository(db);
    const principals = new ReadCache<string, ClientPrincipal>(db);
    this.users = new UsersRepository(db, principals);
    this.owners = new AppEntitlementOwnersRepository(db);
    this.settings = new SettingsRepository(db);
    this.automations = new AutomationsRepository(db);
    this.executions = new ExecutionsRepository(db);
    this.webhooks = new WebhookRepositories(db, (undo) => this.whenRolledBack(undo));
    this.clients = new ClientsRepository(db, principals);
    this.signingKeys = new SigningKeysRepository(db);
    this.assertionJtis = new AssertionJtisRepository(db);
  }

  /**
   * Opens (creating and migrating) the database file. With `backgroundCheckpoints`, a thread of
   * its own checkpoints the WAL (WalCheckpointer): what the server uses. A file that cannot be
   * opened, or not written, is a DatabaseOpenError naming it.
   */
  static open(path: string, options: { backgroundCheckpoints?: WalCheckpointerOptions } = {}): Store {
    refuseNonFileDatabase(path);
    let db: Database;
    try {
      db = openDatabase(path);
    } catch (e) {
      throw e instanceof NewerSchemaError ? e : new DatabaseOpenError(path, e); // that one names the file already
    }
    try {
      refuseReadOnlyDatabase(db);
    } catch (e) {
      db.close();
      throw new DatabaseOpenError(path, e);
    }
    const store = new Store(db);
    if (options.backgroundCheckpoints !== undefined && path !== ":memory:") {
      store.checkpointer = new WalCheckpointer(store.db, options.backgroundCheckpoints);
    }
    return store;
  }

  /**
   * Runs `fn` in one transaction (IMMEDIATE: takes the write lock at once), or in a savepoint when
   * called inside one: `fn` throwing rolls back its own writes only. What better-sqlite3's
   * `db.transaction(fn).immediate()` does, with the statements prepared once: that call builds
   * four wrapper functions each time, 5 us a transaction or savepoint (bench/RESULTS.md).
   */
  transaction<T>(fn: () => T): T {
    const { db, txStatements: sql, undoStack } = this;
    const nested = db.inTransaction;
    (nested ? sql.savepoint : sql.begin).run();
    const undo: (() => void)[] = [];
    undoStack.push(undo);
    let committed = false;
    try {
      const result = fn();
      if (result instanceof Promise) throw new TypeError("a transaction callback cannot return a promise");
      (nested ? sql.release : sql.commit).run();
      committed = true;
      return result;
    } catch (error) {
      // A failed statement may have made SQLite roll the whole transaction back already; then
      // each enclosing level undoes its own part as the error passes through it.
      if (db.inTransaction) {
        if (nested) {
          sql.rollbackTo.run();
          sql.release.run();
        } else {
          sql.rollback.run();
        }
      }
      for (let i = undo.length - 1; i >= 0; i--) undo[i]!();
      throw error;
    } finally {
      undoStack.pop();
      // A savepoint released: its changes are now the enclosing transaction's to undo (a loop, not
      // push(...undo): a savepoint may hold more undos than a call takes arguments).
      const enclosing = committed && nested ? undoStack.at(-1) : undefined;
      if (enclosing !== undefined) for (const step of undo) enclosing.push(step);
    }
  }

  /**
   * For state kept in memory beside the store (the event records' index): `undo` runs if the
   * transaction or savepoint this is called in is rolled back, and is forgotten when it commits.
   * Outside a transaction there is nothing to undo (each statement commits on its own); inside
   * one not opened by `transaction` (no undo would run), it throws.
   */
  whenRolledBack(undo: () => void): void {
    const innermost = this.undoStack.at(-1);
    if (innermost !== undefined) innermost.push(undo);
    else if (this.db.inTransaction) throw new Error("state undone on rollback must change inside Store.transaction");
  }

  /**
   * Records that the file is damaged (a read, a write or a checkpoint met SQLITE_CORRUPT): a file
   * restored without removing its old `-wal`, or overwritten while served, opens and serves, and
   * only the pages it touches fail. ping() is false (not ready) while damage has been met in the
   * last `damageMemoryMs` (a read the disk failed once looks the same, and passes); `onDamaged`
   * hears of the first of each spell. Anything else is ignored.
   */
  noteDamage(error: unknown): void {
    if (!hasDamagedCode(error)) return;
    const now = performance.now();
    const newSpell = this.lastDamageAt === undefined || now - this.lastDamageAt > damageMemoryMs;
    this.lastDamageAt = now;
    if (newSpell) this.onDamaged?.(error);
  }

  /** The greatest id of the tables whose ids newId() makes (not clients, whose ids may be chosen). */
  newestId(): string | undefined {
    const tables = ["apps", "app_entitlements", "users", "automations", "automation_executions", "webhook_deliveries", "webhook_secrets"];
    const newest = this.db.prepare<[], string | null>(`SELECT max(id) FROM (${tables.map((t) => `SELECT max(id) AS id FROM ${t}`).join(" UNION ALL ")})`).pluck().get();
    return newest ?? undefined;
  }

  /** A trivial query, for readiness checks; false while damage was met in the last minute (noteDamage). */
  ping(): boolean {
    if (this.lastDamageAt !== undefined && performance.now() - this.lastDamageAt <= damageMemoryMs) return false;
    return this.pingStmt.get() === 1;
  }

  /** Closes the connection; resolves once the checkpoint thread (if any) has closed its own. */
  close(): Promise<void> {
    const stopped = this.checkpointer?.stop() ?? Promise.resolve();
    if (this.db.open) this.db.close();
    return stopped;
  }
}
