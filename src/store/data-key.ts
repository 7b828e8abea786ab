import { randomBytes } from "node:crypto";
import { chmodSync, closeSync, existsSync, fsyncSync, openSync, readFileSync, rmSync, statSync, writeSync } from "node:fs";
import { dirname } from "node:path";
import { ConfigError } from "../config.js";
import { makeDatabaseFolder, type Database } from "./database.js";
import { fsyncPath } from "./fsync-path.js";
import { removeLeftovers, temporaryName } from "./leftover-files.js";
import { publishNewFile } from "./publish-file.js";
import { SecretCipher } from "./secret-cipher.js";
import type { Store } from "./store.js";
import { webhookSecretAssociatedData } from "./webhook-secrets-repository.js";

/** Where the generated data key lives when ACCESSD_DATA_KEY is not set: beside the database file. */
export function dataKeyFilePath(databasePath: string): string {
  return `${databasePath}.key`;
}

/** Where `accessd rotate-data-key` writes the new key before the database is sealed under it (data-key-rotation.ts). */
export function nextKeyFilePath(databasePath: string): string {
  return `${dataKeyFilePath(databasePath)}.next`;
}

/** The key that seals secrets at rest, and where it came from (named in start errors). */
export interface DataKey {
  cipher: SecretCipher;
  /** "ACCESSD_DATA_KEY", "the key file <path>", or "a random key (in-memory database)". */
  source: string;
  /** The key file the key was read from; undefined for ACCESSD_DATA_KEY and an in-memory database. */
  keyFile?: string;
  /** With a key file: where rotate-data-key keeps a new key until the database is sealed under it. */
  nextKeyFile?: string;
}

/**
 * The settings row holding a value sealed under the data key on the first start: a later start
 * with another key finds that it does not open (the value itself means nothing).
 */
export const keyCheckSetting = "data_key_check";
export const keyCheckAssociatedData = "accessd data key check";

/**
 * Whether the database holds anything sealed under a data key: a key check (written on the first
 * start with one) or, in a database from before the check existed, a webhook secret.
 */
export function holdsSealedSecrets(store: Store): boolean {
  return store.settings.get(keyCheckSetting) !== undefined || store.webhooks.secrets.newest() !== undefined;
}

/**
 * The key that encrypts secrets at rest (webhook secrets, the token signing keys):
 * ACCESSD_DATA_KEY when given; for an in-memory database a random key (its secrets die with it);
 * otherwise a key file beside the database, created on first start with mode 0600 and read on
 * every later one.
 *
 * A missing key file is created only while the database holds nothing sealed: a database restored
 * or moved without its key file would otherwise start with a new key under which none of its
 * secrets opens, and the new file would then stand where the lost one should be restored. Whether
 * a key that is there is the right one is `checkDataKey`'s business, once the store is open.
 */
export function resolveDataKey(
  configured: Buffer | undefined,
  databasePath: string,
  database: { holdsSealedSecrets: boolean },
): DataKey {
  if (configured !== undefined) return { cipher: new SecretCipher(configured), source: "ACCESSD_DATA_KEY" };
  if (databasePath === ":memory:") {
    return { cipher: new SecretCipher(randomBytes(32)), source: "a random key (in-memory database)" };
  }
  const path = dataKeyFilePath(databasePath);
  if (database.holdsSealedSecrets && !existsSync(path)) {
    throw new ConfigError(
      "ACCESSD_DATA_KEY",
      `not set, and the key file ${path} is missing while the database holds secrets sealed with it: ` +
        "restore the key file backed up with the database, or set ACCESSD_DATA_KEY to its key",
    );
  }
  // An empty key file beside a database that holds nothing sealed is what a first start killed
  // while it created the file left (builds before keys were written aside; a power cut): no
  // secret was ever sealed under it, so a new key takes its place.
  if (!database.holdsSealedSecrets && existsSync(path) && statSync(path).size === 0) rmSync(path);
  return {
    cipher: new SecretCipher(readOrCreateKeyFile(path)),
    source: `the key file ${path}`,
    keyFile: path,
    nextKeyFile: nextKeyFilePath(databasePath),
  };
}

/**
 * The mode of a key file or database open to group or others (e.g. 0644: made by hand, copied
 * without its mode, or by an older build), or undefined when only its owner has access (0600, as
 * they are made). Such a file is still used (refusing it would stop a server over a mode), but the
 * start warns: whoever reads the key file opens every secret a copy of the database holds.
 */
export function modeOpenToOthers(file: string): number | undefined {
  const mode = statSync(file).mode & 0o777;
  return (mode & 0o077) === 0 ? undefined : mode;
}

/**
 * A value the database holds sealed under its data key, read with plain statements (no Store, no
 * write): the key check or, in a database from before the check, its newest webhook secret;
 * undefined when nothing is sealed yet. For a backup, which reads the live database read-only and
 * may meet one that this build has not migrated yet (the repositories are built for the current
 * schema).
 */
export function sealedSample(db: Database): { sealed: Buffer; associatedData: string } | undefined {
  const hasTable = (name: string) =>
    db.prepare<[string], number>("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?").pluck().get(name) !== undefined;
  if (hasTable("settings")) {
    const check = db.prepare<[string], Buffer>("SELECT value FROM settings WHERE name = ?").pluck().get(keyCheckSetting);
    if (check !== undefined) return { sealed: check, associatedData: keyCheckAssociatedData };
  }
  if (hasTable("webhook_secrets")) {
    const newest = db
      .prepare<[], { id: string; automation_id: string; sealed: Buffer }>("SELECT id, automation_id, sealed FROM webhook_secrets ORDER BY id DESC LIMIT 1")
      .get();
    if (newest !== undefined) return { sealed: newest.sealed, associatedData: webhookSecretAssociatedData(newest.id, newest.automation_id) };
  }
  return undefined;
}

/**
 * Stops the start (ConfigError) unless the data key is the one the database's secrets are sealed
 * with: the key check must open; a database from before the check must have its newest webhook
 * secret open (`opensLegacySecrets`), and then gets its check. Every later secret is sealed under a
 * key that passed here.
 */
export function checkDataKey(store: Store, dataKey: DataKey, opensLegacySecrets: () => boolean): void {
  const check = store.settings.get(keyCheckSetting);
  const opens = check === undefined ? opensLegacySecrets() : dataKey.cipher.opens(check, keyCheckAssociatedData);
  if (!opens) {
    // rotate-data-key's new key, left beside the old one by a run stopped after its commit.
    const next = dataKey.nextKeyFile;
    if (next !== undefined && existsSync(next)) {
      throw new ConfigError(
        "ACCESSD_DATA_KEY",
        `${dataKey.source} is not the key the database's secrets are sealed with, and ${next} stands beside it: ` +
          "a data key rotation was stopped before it finished; run `accessd rotate-data-key` to finish it",
      );
    }
    throw new ConfigError(
      "ACCESSD_DATA_KEY",
      `${dataKey.source} is not the key the database's secrets were sealed with: ` +
        "start with the key (or key file) that belongs to this database",
    );
  }
  if (check === undefined) {
    store.settings.insertIfAbsent(keyCheckSetting, dataKey.cipher.seal(randomBytes(16), keyCheckAssociatedData));
  }
}

function readOrCreateKeyFile(path: string): Buffer {
  makeDatabaseFolder(path); // the key file sits beside the database
  if (existsSync(path)) {
    // A start killed between linking a new key file and removing its temporary name left a
    // second name of the key (`<key>.writing-<pid>-<hex>`), which nothing else ever removes and a
    // rotation leaves holding the old key. Removed here, once quiet a minute, at every start.
    removeLeftovers(path, "writing");
    return readKeyFile(path); // writing one aside first would need free space
  }
  try {
    writeNewKeyFile(path, randomBytes(32));
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== "EEXIST") {
      throw new ConfigError("ACCESSD_DATA_KEY", `not set, and the key file ${path} cannot be created: ${messageOf(e)}`);
    }
  }
  return readKeyFile(path);
}

/**
 * Writes `key` (base64url) to a file that must not exist yet (EEXIST otherwise), mode 0600, and
 * flushes it and its name to disk before anything is sealed with it: the database's own writes
 * reach the disk at its next checkpoint, and a key file lost to a power cut would leave them
 * unreadable. The key is written and flushed under a temporary name first and then linked to
 * `path`, so the file appears whole or not at all: created in place, a start killed between
 * creating and writing it left an empty key file that every later start refused.
 */
export function writeNewKeyFile(path: string, key: Buffer): void {
  removeLeftovers(path, "writing");
  const temporary = temporaryName(path, "writing");
  try {
    const fd = openSync(temporary, "wx", 0o600); // a new file: never one planted by the name
    try {
      writeSync(fd, `${key.toString("base64url")}\n`);
      chmodSync(temporary, 0o600);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    publishNewFile(temporary, path); // EEXIST when another process made it first
  } finally {
    rmSync(temporary, { force: true });
  }
  fsyncPath(dirname(path));
}

/** The 32-byte key a key file holds (base64url); ConfigError, naming the file, for anything else. */
export function readKeyFile(path: string): Buffer {
  const key = keyInFile(path);
  if (key === undefined) {
    const empty = statSync(path).size === 0;
    throw new ConfigError(
      "ACCESSD_DATA_KEY",
      empty
        ? `not set, and the key file ${path} is empty while the database holds secrets sealed with a key: ` +
            "restore the key file backed up with the database, or set ACCESSD_DATA_KEY to its key"
        : `not set, and the key file ${path} does not hold a base64url 32-byte key`,
    );
  }
  return key;
}

/**
 * The 32-byte key a key file holds (base64url), or undefined when its text is not one (empty,
 * cut short); ConfigError naming the file when it cannot be read at all (a folder, no permission:
 * fs names neither in every message, "EISDIR: illegal operation on a directory, read").
 */
export function keyInFile(path: string): Buffer | undefined {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (e) {
    throw new ConfigError("ACCESSD_DATA_KEY", `not set, and the key file ${path} cannot be read: ${messageOf(e)}`);
  }
  const key = Buffer.from(text.trim(), "base64url");
  return key.length === 32 ? key : undefined;
}

function messageOf(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
