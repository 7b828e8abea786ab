import { createHmac, randomBytes, scrypt, timingSafeEqual, type ScryptOptions } from "node:crypto";

/**
 * Client secrets are stored only as scrypt hashes: `scrypt$<N>$<r>$<p>$<salt>$<hash>` (base64url),
 * so the cost can be raised later without invalidating stored secrets.
 */
const cost = { N: 16384, r: 8, p: 1 } as const;
const keyLength = 32;

function derive(secret: string, salt: Buffer, options: ScryptOptions): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const maxmem = 256 * (options.N ?? cost.N) * (options.r ?? cost.r) + 1024 * 1024;
    scrypt(secret, salt, keyLength, { ...options, maxmem }, (err, key) => (err === null ? resolve(key) : reject(err)));
  });
}

export async function hashSecret(secret: string): Promise<string> {
  const salt = randomBytes(16);
  const hash = await derive(secret, salt, cost);
  return ["scrypt", cost.N, cost.r, cost.p, salt.toString("base64url"), hash.toString("base64url")].join("$");
}

/**
 * The secrets that matched their stored hash lately, kept as an HMAC under a key of this process
 * (never the secret), by the stored hash: a client asking for a token again (an SDK that asks for
 * one before every call) is checked in microseconds instead of a scrypt each time. A scrypt takes
 * about 40 ms of a thread-pool thread and 16 MiB: four callers asking at once kept both cores busy
 * (webhooks' p99 200 ms) and took the server from 250 to 478 MB. A wrong secret, an unknown
 * client and a changed secret (another stored hash) still cost a scrypt, so guessing stays slow.
 */
const verifiedSecrets = new Map<string, Buffer>();
const maxVerifiedSecrets = 10_000;
const verifiedSecretKey = randomBytes(32);
const verifiedMark = (secret: string): Buffer => createHmac("sha256", verifiedSecretKey).update(secret).digest();

/** Constant-time comparison against a stored hash; false for a malformed hash. */
export async function verifySecret(secret: string, stored: string): Promise<boolean> {
  const [scheme, n, r, p, salt, hash] = stored.split("$");
  if (scheme !== "scrypt" || n === undefined || r === undefined || p === undefined || salt === undefined || hash === undefined) {
    return false;
  }
  const verified = verifiedSecrets.get(stored);
  if (verified !== undefined && timingSafeEqual(verified, verifiedMark(secret))) return true;
  const expected = Buffer.from(hash, "base64url");
  const actual = await derive(secret, Buffer.from(salt, "base64url"), { N: Number(n), r: Number(r), p: Number(p) });
  const matches = actual.length === expected.length && timingSafeEqual(actual, expected);
  if (matches) rememberVerified(stored, secret);
  return matches;
}

function rememberVerified(stored: string, secret: string): void {
  verifiedSecrets.delete(stored);
  if (verifiedSecrets.size >= maxVerifiedSecrets) verifiedSecrets.delete(verifiedSecrets.keys().next().value as string);
  verifiedSecrets.set(stored, verifiedMark(secret));
}

/**
 * A hash no secret matches (its salt and hash are random): checked against when the client id is
 * unknown, so an unknown client costs the same time as a wrong secret.
 */
export const decoyHash = ["scrypt", cost.N, cost.r, cost.p, randomBytes(16).toString("base64url"), randomBytes(keyLength).toString("base64url")].join("$");

/** A new client secret: 256 random bits, base64url text. */
export function newClientSecret(): string {
  return randomBytes(32).toString("base64url");
}
