import { chmodSync, copyFileSync, existsSync, linkSync, rmSync, statSync } from "node:fs";
import { dirname } from "node:path";
import BetterSqlite3 from "better-sqlite3";
import { dataKeyFilePath } from "./data-key.js";
import { fsyncPath } from "./fsync-path.js";

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
 * their names (a link never replaces an existing file): a backup that fails or is killed half-way
 * leaves no file by the name an operator would restore from.
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
  const partial = `${destination}.partial-${process.pid}`;
  const partialKey = `${partial}.key`;
  try {
    const source = new BetterSqlite3(databasePath, { readonly: true, fileMustExist: true });
    try {
      source.pragma("busy_timeout = 5000");
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
    // The key first: a database copy by its name always has its key beside it.
    if (keyCopy !== undefined) linkSync(partialKey, keyCopy);
    linkSync(partial, destination);
    fsyncPath(dirname(destination));
  } finally {
    rmSync(partial, { force: true });
    rmSync(partialKey, { force: true });
  }
  return { database: destination, keyFile: keyCopy, bytes: statSync(destination).size };
}
