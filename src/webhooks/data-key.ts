import { randomBytes } from "node:crypto";
import { chmodSync, closeSync, existsSync, mkdirSync, openSync, readFileSync, writeSync } from "node:fs";
import { dirname } from "node:path";
import { ConfigError } from "../config.js";

/** Where the generated data key lives when ACCESSD_DATA_KEY is not set: beside the database file. */
export function dataKeyFilePath(databasePath: string): string {
  return `${databasePath}.key`;
}

/** The key that seals webhook secrets at rest, and where it came from (named in start errors). */
export interface DataKey {
  key: Buffer;
  /** "ACCESSD_DATA_KEY", "the key file <path>", or "a random key (in-memory database)". */
  source: string;
}

/**
 * The key that encrypts webhook secrets at rest: ACCESSD_DATA_KEY when given; for an in-memory
 * database a random key (its secrets die with it); otherwise a key file beside the database,
 * created on first start with mode 0600 and read on every later one.
 *
 * A missing key file is created only while the database holds no sealed secret: a database
 * restored or moved without its key file would otherwise start with a new key under which none
 * of its webhook secrets opens (every HMAC webhook refused), and the new file would then stand
 * where the lost one should be restored. Whether a present key is the right one is checked by
 * `WebhookSecretStore.keyOpensStoredSecrets` once the store is open.
 */
export function resolveDataKey(
  configured: Buffer | undefined,
  databasePath: string,
  database: { holdsSealedSecrets: boolean },
): DataKey {
  if (configured !== undefined) return { key: configured, source: "ACCESSD_DATA_KEY" };
  if (databasePath === ":memory:") return { key: randomBytes(32), source: "a random key (in-memory database)" };
  const path = dataKeyFilePath(databasePath);
  if (database.holdsSealedSecrets && !existsSync(path)) {
    throw new ConfigError(
      "ACCESSD_DATA_KEY",
      `not set, and the key file ${path} is missing while the database holds webhook secrets sealed with it: ` +
        "restore the key file backed up with the database, or set ACCESSD_DATA_KEY to its key",
    );
  }
  return { key: readOrCreateKeyFile(path), source: `the key file ${path}` };
}

/** The start error when the data key does not open the secrets the database holds. */
export function wrongDataKeyError(source: string): ConfigError {
  return new ConfigError(
    "ACCESSD_DATA_KEY",
    `${source} is not the key the database's webhook secrets were sealed with: ` +
      "start with the key (or key file) that belongs to this database",
  );
}

function readOrCreateKeyFile(path: string): Buffer {
  mkdirSync(dirname(path), { recursive: true });
  let fd: number | undefined;
  try {
    fd = openSync(path, "wx", 0o600);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
  }
  if (fd !== undefined) {
    try {
      writeSync(fd, `${randomBytes(32).toString("base64url")}\n`);
    } finally {
      closeSync(fd);
    }
    chmodSync(path, 0o600);
  }
  const key = Buffer.from(readFileSync(path, "utf8").trim(), "base64url");
  if (key.length !== 32) {
    throw new ConfigError("ACCESSD_DATA_KEY", `not set, and the key file ${path} does not hold a base64url 32-byte key`);
  }
  return key;
}
