import { closeSync, constants, copyFileSync, existsSync, fsyncSync, openSync, statSync, chmodSync } from "node:fs";
import { dirname } from "node:path";
import BetterSqlite3 from "better-sqlite3";
import { dataKeyFilePath } from "./data-key.js";

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
 * (`<copy>.key`, mode 0600) are fsynced; nothing existing is overwritten.
 */
export function backupDatabase(databasePath: string, destination: string, options: { keyFromFile: boolean }): BackupResult {
  if (databasePath === ":memory:") throw new Error("ACCESSD_DATABASE is :memory:; there is no file to back up");
  if (!existsSync(databasePath)) throw new Error(`no database at ${databasePath}`);
  const keyFile = options.keyFromFile ? dataKeyFilePath(databasePath) : undefined;
  const keyCopy = keyFile === undefined ? undefined : dataKeyFilePath(destination);
  for (const target of [destination, keyCopy]) {
    if (target !== undefined && existsSync(target)) throw new Error(`${target} exists; a backup does not overwrite anything`);
  }
  if (keyFile !== undefined && !existsSync(keyFile)) {
    throw new Error(`the key file ${keyFile} is missing; a backup without it cannot open the database's secrets`);
  }
  const source = new BetterSqlite3(databasePath, { readonly: true, fileMustExist: true });
  try {
    source.pragma("busy_timeout = 5000");
    source.prepare("VACUUM INTO ?").run(destination);
  } finally {
    source.close();
  }
  syncFile(destination);
  if (keyFile !== undefined && keyCopy !== undefined) {
    copyFileSync(keyFile, keyCopy, constants.COPYFILE_EXCL);
    chmodSync(keyCopy, 0o600);
    syncFile(keyCopy);
  }
  syncFile(dirname(destination));
  return { database: destination, keyFile: keyCopy, bytes: statSync(destination).size };
}

function syncFile(path: string): void {
  const fd = openSync(path, "r");
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}
