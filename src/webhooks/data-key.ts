import { randomBytes } from "node:crypto";
import { chmodSync, closeSync, mkdirSync, openSync, readFileSync, writeSync } from "node:fs";
import { dirname } from "node:path";

/** Where the generated data key lives when ACCESSD_DATA_KEY is not set: beside the database file. */
export function dataKeyFilePath(databasePath: string): string {
  return `${databasePath}.key`;
}

/**
 * The key that encrypts webhook secrets at rest: ACCESSD_DATA_KEY when given; for an in-memory
 * database a random key (its secrets die with it); otherwise a key file beside the database,
 * created on first start with mode 0600 and read on every later one.
 */
export function resolveDataKey(configured: Buffer | undefined, databasePath: string): Buffer {
  if (configured !== undefined) return configured;
  if (databasePath === ":memory:") return randomBytes(32);
  return readOrCreateKeyFile(dataKeyFilePath(databasePath));
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
  if (key.length !== 32) throw new Error(`data key file ${path} does not hold a base64url 32-byte key`);
  return key;
}
