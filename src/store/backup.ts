import { chmodSync, copyFileSync, existsSync, lstatSync, readFileSync, rmSync, statSync } from "node:fs";
import { dirname } from "node:path";
import BetterSqlite3 from "better-sqlite3";
import { ConfigError } from "../config.js";
import { dataKeyFilePath, nextKeyFilePath, readKeyFile, sealedSample } from "./data-key.js";
import { createOwnerOnly } from "./database.js";
import { fsyncPath } from "./fsync-path.js";
import { removeLeftovers, temporaryName } from "./leftover-files.js";
import { publishNewFile } from "./publish-file.js";
import { SecretCipher } from "./secret-cipher.js";
import { DatabaseOpenError, refuseNonFileDatabase } from "./store.js";

export interface BackupResult {
  /** The copy of the database: one file, no -wal beside it. */
  database: string;
  /** The copy of the key file beside it, or undefined when the data key is not a file (ACCESSD_DATA_KEY). */
  keyFile: string | undefined;
  bytes: number;
}

/**
 * A consistent copy of the database, taken while the server runs: `VACUUM INTO` reads one snapshot
 * in a single read transaction (writers go on; in WAL mode a reader blocks no one), so the copy
 * holds every transaction committed before it started and none half. Copying the file with `cp`
 * instead may miss what is still in the -wal file, or catch a page mid-checkpoint. SQLite's online
 * backup API would restart from the first page on every write of the server, so under steady load
 * it might never finish. The copy and, unless the key is given as ACCESSD_DATA_KEY, the key file
 * (`<copy>.key`, mode 0600) are written under a temporary name, fsynced, and only then linked to
 * their names (`publishNewFile`: a link never replaces an existing file): a backup that fails or is killed half-way
 * leaves no database file by the name an operator would restore from, and the next backup to that
 * name removes what it left (`removeLeftovers`; a key by the copy's name is kept if it is the key).
 *
 * The data key (`dataKey`, ACCESSD_DATA_KEY; otherwise the key file) must open what the database
 * has sealed, as at the server's start: a backup kept with another key cannot be restored, and
 * nothing would say so until the day it is needed. A wrong key is a ConfigError before anything
 * is written; the copy is checked again against the key copied beside it before either gets its
 * name (a rotate-data-key could have run in between).
 */
export function backupDatabase(databasePath: string, destination: string, options: { dataKey: Buffer | undefined }): BackupResult {
  if (databasePath === ":memory:") throw new Error("ACCESSD_DATABASE is :memory:; there is no file to back up");
  if (destination.trim() === "") throw new Error("name the file to write the backup to");
  if (!existsSync(databasePath)) throw new Error(`no database at ${databasePath}`);
  refuseNonFileDatabase(databasePath);
  const keyFile = options.dataKey === undefined ? dataKeyFilePath(databasePath) : undefined;
  const keyCopy = keyFile === undefined ? undefined : dataKeyFilePath(destination);
  if (!existsSync(dirname(destination))) throw new Error(`the folder ${dirname(destination)} does not exist; create it first`);
  if (keyFile !== undefined && !existsSync(keyFile)) {
    throw new Error(`the key file ${keyFile} is missing; a backup without it cannot open the database's secrets`);
  }
  // What a backup to this name that was killed half-way left: its partial copy, the copy's
  // journal, the key beside it (each as large as the database, or a stray key).
  removeLeftovers(destination, "partial");
  // lstat, not exists: a symbolic link by that name (even one to nothing) is a name taken too.
  if (lstatSync(destination, { throwIfNoEntry: false }) !== undefined) {
    throw new Error(`${destination} exists; a backup does not overwrite anything`);
  }
  // A key by the copy's name without the copy is what a backup killed between its two links left:
  // the very key this backup would put there is taken as its own, any other refused.
  const keyCopyInPlace = keyCopy !== undefined && existsSync(keyCopy);
  if (keyCopyInPlace && (keyFile === undefined || !readFileSync(keyCopy).equals(readFileSync(keyFile)))) {
    throw new Error(`${keyCopy} exists; a backup does not overwrite anything`);
  }
  const partial = temporaryName(destination, "partial");
  const partialKey = `${partial}.key`;
  try {
    const source = new BetterSqlite3(databasePath, { readonly: true, fileMustExist: true });
    try {
      source.pragma("busy_timeout = 5000");
      const key = options.dataKey ?? keyFile;
      if (key !== undefined && !keyOpensDatabase(source, databasePath, key)) {
        const next = nextKeyFilePath(databasePath);
        throw new ConfigError(
          "ACCESSD_DATA_KEY",
          keyFile !== undefined && existsSync(next)
            ? `${keySource(key)} is not the key the database's secrets are sealed with, and ${next} stands beside it: ` +
                "a data key rotation was stopped before it finished; run `accessd rotate-data-key` to finish it, then the backup"
            : `${keySource(key)} is not the key the database's secrets are sealed with: a backup kept with it could not be ` +
                "restored; run the backup with the key (or key file) the server starts with",
        );
      }
      createOwnerOnly(partial); // VACUUM INTO fills an empty file, keeping its mode
      source.prepare("VACUUM INTO ?").run(partial);
    } finally {
      source.close();
    }
    fsyncPath(partial);
    if (keyFile !== undefined) {
      copyFileSync(keyFile, partialKey);
      chmodSync(partialKey, 0o600);
      fsyncPath(partialKey);
    }
    const copy = new BetterSqlite3(partial, { readonly: true, fileMustExist: true });
    try {
      // Against the key that will stand beside the copy: one left by its name was compared with
      // the key file before the copy was taken, and a rotation may have committed since.
      if (!keyOpens(copy, options.dataKey ?? (keyCopyInPlace ? keyCopy : partialKey))) {
        const kept = keyFile === undefined ? "ACCESSD_DATA_KEY" : `the key copied from ${keyFile}`;
        throw new Error(
          `the copy of ${databasePath} does not open with ${kept}: the data key changed while the backup ran ` +
            "(a rotate-data-key?); nothing was written, run the backup again",
        );
      }
    } finally {
      copy.close();
    }
    // The key first: a database copy by its name always has its key beside it. A copy that then
    // cannot take its name takes its key away again (a copy of the live key left alone by a name
    // nobody restores from).
    const publishesKey = keyCopy !== undefined && !keyCopyInPlace;
    if (publishesKey) publishNewFile(partialKey, keyCopy);
    try {
      publishNewFile(partial, destination);
    } catch (e) {
      if (publishesKey) rmSync(keyCopy, { force: true });
      throw e;
    }
    fsyncPath(dirname(destination));
  } finally {
    rmSync(partial, { force: true });
    rmSync(partialKey, { force: true });
  }
  return { database: destination, keyFile: keyCopy, bytes: statSync(destination).size };
}

/**
 * Whether `key` (the key itself, or the path of a key file) opens what `db` has sealed; true when
 * nothing is sealed yet (nothing to check, and the key file is then not read at all).
 */
function keyOpens(db: BetterSqlite3.Database, key: Buffer | string): boolean {
  const sample = sealedSample(db);
  if (sample === undefined) return true;
  const cipher = new SecretCipher(typeof key === "string" ? readKeyFile(key) : key);
  return cipher.opens(sample.sealed, sample.associatedData);
}

/** keyOpens on the database being backed up, whose SQLite errors ("file is not a database") name no file. */
function keyOpensDatabase(source: BetterSqlite3.Database, databasePath: string, key: Buffer | string): boolean {
  try {
    return keyOpens(source, key);
  } catch (e) {
    throw e instanceof BetterSqlite3.SqliteError ? new DatabaseOpenError(databasePath, e) : e;
  }
}

function keySource(key: Buffer | string): string {
  return typeof key === "string" ? `the key file ${key}` : "ACCESSD_DATA_KEY";
}
