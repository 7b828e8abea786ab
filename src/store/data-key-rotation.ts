import { randomBytes } from "node:crypto";
import { existsSync, lstatSync, readFileSync, realpathSync, renameSync, rmSync } from "node:fs";
import { dirname } from "node:path";
import { ConfigError } from "../config.js";
import { dataKeyFilePath, keyCheckAssociatedData, keyCheckSetting, keyInFile, nextKeyFilePath, readKeyFile, writeNewKeyFile } from "./data-key.js";
import { fsyncPath } from "./fsync-path.js";
import { SecretCipher } from "./secret-cipher.js";
import { ServingLock } from "./serving-lock.js";
import { signingKeyAssociatedData } from "./signing-keys-repository.js";
import { refuseNonFileDatabase, Store } from "./store.js";
import { webhookSecretAssociatedData } from "./webhook-secrets-repository.js";

export interface DataKeyRotation {
  /** Webhook secrets and token signing keys sealed again under the new key. */
  webhookSecrets: number;
  signingKeys: number;
  /** The key file now holding the new key; undefined when the key is ACCESSD_DATA_KEY. */
  keyFile: string | undefined;
  /** True when this run only finished a rotation an earlier run had committed (nothing sealed again now). */
  finishedEarlierRun: boolean;
  /**
   * Set when this run found `<database>.key.next` left by an earlier run stopped before its commit,
   * removed it, and rotated from the key file: its path, and whether it held a key at all (a run
   * killed while writing it leaves it empty or cut short).
   */
  discardedNextKeyFile?: { path: string; heldAKey: boolean };
}

/**
 * Seals every secret of the database at `databasePath` under a new data key, for a key that may
 * have leaked: webhook secrets, token signing keys and the key check, in one transaction, with
 * secure_delete on (no old sealed form left in freed space; the WAL is checkpointed into the file
 * and removed when the command closes the database). Not while a server uses the database (the
 * serving lock), which has the old key in memory.
 *
 * With a key file (`<database>.key`): the new key is written to `<database>.key.next` (0600,
 * fsynced) before the transaction and renamed over the key file after it, so at every moment one
 * of the two files opens the database; a run stopped between the commit and the rename is
 * finished by the next run (the server's start names the command). With ACCESSD_DATA_KEY
 * (`current`), the new key is the operator's (`next`, ACCESSD_NEW_DATA_KEY): the database opens
 * with exactly one of the two at any time, and a second run with both reports that it is done.
 */
export async function rotateDataKey(databasePath: string, keys: { current?: Buffer; next?: Buffer }): Promise<DataKeyRotation> {
  if (databasePath === ":memory:") throw new Error("ACCESSD_DATABASE is :memory:; its key lives and dies with the process");
  if (!existsSync(databasePath)) throw new Error(`no database at ${databasePath}`);
  if (keys.current !== undefined && keys.next === undefined) {
    throw new ConfigError("ACCESSD_NEW_DATA_KEY", "not set: with ACCESSD_DATA_KEY, give the new key as ACCESSD_NEW_DATA_KEY (64 hex digits or base64url, e.g. `openssl rand -hex 32`)");
  }
  if (keys.current === undefined && keys.next !== undefined) {
    throw new ConfigError("ACCESSD_NEW_DATA_KEY", "only for a key given as ACCESSD_DATA_KEY; with a key file, the rotation makes the new key itself");
  }
  if (keys.current !== undefined && keys.next !== undefined && keys.current.equals(keys.next)) {
    // It resealed everything under the same key and said the old one no longer opened the database.
    throw new ConfigError("ACCESSD_NEW_DATA_KEY", "is ACCESSD_DATA_KEY itself: nothing would change; give a new key (e.g. `openssl rand -hex 32`)");
  }
  refuseNonFileDatabase(databasePath);
  const lock = ServingLock.acquire(databasePath);
  const store = Store.open(databasePath);
  // The resealing commit must be on disk before the key file is replaced: under the server's
  // `synchronous = NORMAL` a WAL commit is synced only at the next checkpoint (here: the close,
  // after the rename), and a power cut in between would leave the secrets sealed under the old
  // key with only the new key kept.
  store.db.pragma("synchronous = FULL");
  try {
    if (store.settings.get(keyCheckSetting) === undefined) {
      throw new Error("the database has no data key check yet: start the server on it once, then rotate");
    }
    if (keys.current !== undefined && keys.next !== undefined) {
      const current = new SecretCipher(keys.current);
      const next = new SecretCipher(keys.next);
      if (!opensKeyCheck(store, current) && opensKeyCheck(store, next)) {
        return { webhookSecrets: 0, signingKeys: 0, keyFile: undefined, finishedEarlierRun: true };
      }
      return { ...resealAll(store, current, next, "ACCESSD_DATA_KEY"), keyFile: undefined, finishedEarlierRun: false };
    }
    return rotateKeyFile(databasePath, store);
  } finally {
    await store.close();
    lock.release();
  }
}

function rotateKeyFile(databasePath: string, store: Store): DataKeyRotation {
  const keyFile = dataKeyFilePath(databasePath);
  const nextFile = nextKeyFilePath(databasePath);
  if (!existsSync(keyFile)) throw new ConfigError("ACCESSD_DATA_KEY", `not set, and the key file ${keyFile} is missing`);
  refuseUnreplaceableKeyFile(keyFile);
  let discardedNextKeyFile: DataKeyRotation["discardedNextKeyFile"];
  if (existsSync(nextFile)) {
    const leftKey = keyInFile(nextFile);
    if (leftKey !== undefined && opensKeyCheck(store, new SecretCipher(leftKey))) {
      // An earlier run committed and stopped before the rename: finish it.
      replaceKeyFile(nextFile, keyFile);
      return { webhookSecrets: 0, signingKeys: 0, keyFile, finishedEarlierRun: true };
    }
    // Not the key the database is sealed under (the key check, resealed in the same transaction as
    // every secret, does not open with it): the run that wrote it stopped before its commit. The
    // file is written and fsynced before that transaction begins, so one that holds no key at all
    // (a run killed while writing it) cannot have sealed anything either. Start over.
    rmSync(nextFile);
    fsyncPath(dirname(nextFile));
    discardedNextKeyFile = { path: nextFile, heldAKey: leftKey !== undefined };
  }
  const current = new SecretCipher(readKeyFile(keyFile));
  const nextKey = randomBytes(32);
  writeNewKeyFile(nextFile, nextKey); // before the commit: see above
  let counts: { webhookSecrets: number; signingKeys: number };
  try {
    counts = resealAll(store, current, new SecretCipher(nextKey), `the key file ${keyFile}`);
  } catch (e) {
    rmSync(nextFile, { force: true });
    throw e;
  }
  replaceKeyFile(nextFile, keyFile);
  return { ...counts, keyFile, finishedEarlierRun: false, discardedNextKeyFile };
}

/**
 * The rotation renames the new key file over the old one. Refused before anything changes where
 * that cannot end well: a symbolic link would be replaced with a file, its target (a secrets
 * mount, say) left with the old key, which would no longer open the database once the link was
 * put back (the new key lost with the file it replaced); a file mounted in cannot be renamed over.
 */
function refuseUnreplaceableKeyFile(keyFile: string): void {
  if (isMountPoint(keyFile)) {
    // A file bind-mounted in (a Docker file volume, a Kubernetes secret's subPath) cannot be
    // renamed over: EBUSY after the commit, every run again, the server refused at its start.
    throw new Error(
      `the key file ${keyFile} is a mount point (a file mounted in): the rotation renames the new key over it, which a mount refuses; ` +
        `rotate with the key as ACCESSD_DATA_KEY and the new one as ACCESSD_NEW_DATA_KEY, or mount the key's folder instead of the file`,
    );
  }
  if (!lstatSync(keyFile).isSymbolicLink()) return;
  const target = realpathSync(keyFile);
  throw new Error(
    `the key file ${keyFile} is a symbolic link to ${target}: the rotation would replace the link with the new key and leave ${target} with the old one, ` +
      `which would not open the database any more; rotate with the key as ACCESSD_DATA_KEY and the new one as ACCESSD_NEW_DATA_KEY, ` +
      `or replace the link with a copy of the key first (cp --remove-destination ${target} ${keyFile}) and store the new key where the link pointed afterwards`,
  );
}

function replaceKeyFile(nextFile: string, keyFile: string): void {
  renameSync(nextFile, keyFile);
  fsyncPath(dirname(keyFile));
}

function opensKeyCheck(store: Store, cipher: SecretCipher): boolean {
  const check = store.settings.get(keyCheckSetting);
  return check !== undefined && cipher.opens(check, keyCheckAssociatedData);
}

/** One transaction: every sealed value opened with `current` and sealed with `next`; nothing changes if one does not open. */
function resealAll(store: Store, current: SecretCipher, next: SecretCipher, currentSource: string): { webhookSecrets: number; signingKeys: number } {
  if (!opensKeyCheck(store, current)) {
    throw new ConfigError("ACCESSD_DATA_KEY", `${currentSource} is not the key the database's secrets are sealed with`);
  }
  const db = store.db;
  const secrets = db.prepare<[], { id: string; automation_id: string; sealed: Buffer }>("SELECT id, automation_id, sealed FROM webhook_secrets").all();
  const signingKeys = db
    .prepare<[], { kid: string; sealed_private_jwk: Buffer }>("SELECT kid, sealed_private_jwk FROM token_signing_keys WHERE sealed_private_jwk IS NOT NULL")
    .all();
  const updateSecret = db.prepare<[Buffer, string]>("UPDATE webhook_secrets SET sealed = ? WHERE id = ?");
  const updateSigningKey = db.prepare<[Buffer, string]>("UPDATE token_signing_keys SET sealed_private_jwk = ? WHERE kid = ?");
  const updateCheck = db.prepare<[Buffer, string]>("UPDATE settings SET value = ? WHERE name = ?");
  const reseal = (sealed: Buffer, associatedData: string, what: string) => {
    let plaintext: Buffer;
    try {
      plaintext = current.open(sealed, associatedData);
    } catch (e) {
      throw new Error(`${what} does not open with the current data key (its row was altered); nothing was changed`, { cause: e });
    }
    return next.seal(plaintext, associatedData);
  };
  db.pragma("secure_delete = ON");
  try {
    store.transaction(() => {
      for (const s of secrets) {
        updateSecret.run(reseal(s.sealed, webhookSecretAssociatedData(s.id, s.automation_id), `webhook secret ${s.id}`), s.id);
      }
      for (const k of signingKeys) {
        updateSigningKey.run(reseal(k.sealed_private_jwk, signingKeyAssociatedData(k.kid), `token signing key ${k.kid}`), k.kid);
      }
      updateCheck.run(next.seal(randomBytes(16), keyCheckAssociatedData), keyCheckSetting);
    });
  } finally {
    db.pragma("secure_delete = OFF");
  }
  return { webhookSecrets: secrets.length, signingKeys: signingKeys.length };
}

/** Whether `path` is where something is mounted (Linux's /proc/self/mountinfo; false where there is none). */
function isMountPoint(path: string): boolean {
  let mounts: string;
  try {
    mounts = readFileSync("/proc/self/mountinfo", "utf8");
  } catch {
    return false;
  }
  const real = realpathSync(path);
  // The fifth field is the mount point, with spaces and the like as octal escapes (\040).
  return mounts.split("\n").some((line) => (line.split(" ")[4] ?? "").replace(/\\([0-7]{3})/g, (_, octal: string) => String.fromCharCode(parseInt(octal, 8))) === real);
}
