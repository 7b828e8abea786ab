import { Role } from "../../gen/svc/api/iam/v1/role_pb.js";
import type { Clock } from "../clock.js";
import { newId } from "../store/ids.js";
import type { Store } from "../store/store.js";
import { hashSecret, newClientSecret, verifySecret } from "./client-secret.js";

export interface ClientCredentials {
  clientId: string;
  clientSecret: string;
  userId: string;
}

/**
 * Creates a Super Admin user and a client_secret_post client acting as it, in one transaction.
 * Without `clientId`/`clientSecret` both are generated; the secret is returned here and never
 * again (only its hash is stored).
 */
export async function createSuperAdminClient(
  store: Store,
  clock: Clock,
  given: { clientId?: string; clientSecret?: string } = {},
): Promise<ClientCredentials> {
  const clientId = given.clientId ?? newId();
  const clientSecret = given.clientSecret ?? newClientSecret();
  const secretHash = await hashSecret(clientSecret);
  const now = clock.now();
  const userId = newId();
  store.transaction(() => {
    store.users.insert({
      id: userId,
      displayName: "Super Admin",
      email: "",
      username: `bootstrap-${clientId}`,
      createdAt: now,
      updatedAt: now,
      roles: [Role.SUPER_ADMIN],
    });
    store.clients.insert({
      id: clientId,
      userId,
      displayName: "bootstrap Super Admin",
      secretHash,
      publicJwk: undefined,
      createdAt: now,
    });
  });
  return { clientId, clientSecret, userId };
}

/**
 * The settings entry that keeps the hash of every secret a bootstrap client was created or seen
 * with (a JSON array): a secret once revoked by deleting the client stays revoked, also after the
 * variable moved on to another secret and back (a configuration rolled back).
 */
const bootstrapSecretsSetting = (clientId: string): string => `bootstrap-client-secret-hashes:${clientId}`;

/**
 * ACCESSD_BOOTSTRAP_CLIENT_ID/_SECRET: creates that Super Admin client when no client has the id.
 * An existing client is left as it is (its secret is not replaced), so changing the variable
 * later does not rotate a secret silently; delete the client to re-create it. "secret-differs"
 * says the variable's secret is not the client's: an operator who changed it to rotate a leaked
 * secret is not protected, and must be told (the start logs a warning). "deleted" says the
 * client was deleted from this database and the variable holds a secret it had: deleting a
 * leaked bootstrap client must revoke it, not until the next start (crash, deploy, rollback)
 * brings it back with that secret; it is created again once the variable holds a new secret.
 */
export async function ensureBootstrapClient(
  store: Store,
  clock: Clock,
  bootstrap: { clientId: string; clientSecret: string },
): Promise<"created" | "exists" | "secret-differs" | "deleted"> {
  const setting = bootstrapSecretsSetting(bootstrap.clientId);
  const hashes = (): string[] => {
    const stored = store.settings.get(setting);
    if (stored === undefined) return [];
    let value: unknown;
    try {
      value = JSON.parse(stored.toString("utf8"));
    } catch {
      value = undefined;
    }
    if (!Array.isArray(value) || !value.every((hash) => typeof hash === "string")) {
      throw new Error(`the settings entry ${setting} is not a JSON array of secret hashes: the database was altered (deleting that row lets the start go on, and forgets which bootstrap secrets were revoked)`);
    }
    return value as string[];
  };
  const keep = (hash: string): void => {
    const known = hashes();
    if (!known.includes(hash)) store.settings.put(setting, Buffer.from(JSON.stringify([...known, hash])));
  };
  const existing = store.clients.get(bootstrap.clientId);
  if (existing !== undefined) {
    const same = existing.secretHash !== undefined && (await verifySecret(bootstrap.clientSecret, existing.secretHash));
    // Databases bootstrapped before this record existed get it at their next start.
    if (same && existing.secretHash !== undefined) keep(existing.secretHash);
    return same ? "exists" : "secret-differs";
  }
  for (const revoked of hashes()) if (await verifySecret(bootstrap.clientSecret, revoked)) return "deleted";
  await createSuperAdminClient(store, clock, bootstrap);
  const created = store.clients.get(bootstrap.clientId)?.secretHash;
  if (created !== undefined) keep(created);
  return "created";
}
