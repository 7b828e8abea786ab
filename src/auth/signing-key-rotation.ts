import { existsSync } from "node:fs";
import type { Clock } from "../clock.js";
import { checkDataKey, keyCheckSetting, resolveDataKey } from "../store/data-key.js";
import { ServingLock } from "../store/serving-lock.js";
import { refuseNonFileDatabase, Store } from "../store/store.js";
import { AccessTokens } from "./access-tokens.js";

export interface SigningKeyRotation {
  /** The new key's kid: it signs every token from the server's next start. */
  kid: string;
  /** The keys there were before: they verify the tokens they signed until those expire, unless ended. */
  previousKids: string[];
  /** `--end-old-tokens`: the previous keys were deleted, so every token issued before is refused. */
  endedOldTokens: boolean;
}

/**
 * `accessd rotate-signing-key`, with the server stopped (the serving lock): adds a new token
 * signing key, sealed under the data key. From the next start the new key signs; the old ones
 * verify the tokens they signed until those expire and are deleted 24 h (the longest token
 * lifetime) after the new key was added (AccessTokens.deleteRetiredKeys). With `endOldTokens`
 * (a key that leaked, say with a copy of the database and its data key) the old keys are
 * deleted at once, in the same transaction: every token issued before is refused.
 */
export async function rotateSigningKey(
  databasePath: string,
  options: { dataKey: Buffer | undefined; endOldTokens: boolean; clock: Clock },
): Promise<SigningKeyRotation> {
  if (databasePath === ":memory:") throw new Error("ACCESSD_DATABASE is :memory:; its signing key lives and dies with the process");
  if (!existsSync(databasePath)) throw new Error(`no database at ${databasePath}`);
  refuseNonFileDatabase(databasePath);
  const lock = ServingLock.acquire(databasePath);
  const store = Store.open(databasePath);
  try {
    const previous = store.signingKeys.all();
    const previousKids = previous.map((key) => key.kid);
    if (store.settings.get(keyCheckSetting) === undefined || previousKids.length === 0) {
      throw new Error("the database has no signing key yet: start the server on it once, then rotate");
    }
    const dataKey = resolveDataKey(options.dataKey, databasePath, { holdsSealedSecrets: true });
    checkDataKey(store, dataKey, () => false);
    const key = await AccessTokens.newSigningKey(dataKey.cipher, options.clock);
    // The newest key signs, by created_at: a clock behind the current key's (skew, a database
    // moved from a machine ahead) must not leave the new key older, where it would never sign and
    // a start a day later would delete it as retired.
    key.createdAt = Math.max(key.createdAt, ...previous.map((stored) => stored.createdAt + 1));
    store.transaction(() => {
      store.signingKeys.insert(key);
      if (options.endOldTokens) for (const kid of previousKids) store.signingKeys.delete(kid);
    });
    return { kid: key.kid, previousKids, endedOldTokens: options.endOldTokens };
  } finally {
    await store.close();
    lock.release();
  }
}
