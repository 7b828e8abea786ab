import { importJWK, type CryptoKey, type JWK } from "jose";

/** The algorithms a private_key_jwt client may sign its assertions with. */
export type AssertionAlgorithm = "EdDSA" | "ES256" | "RS256";

export class UnsupportedKeyError extends Error {
  constructor(reason: string) {
    super(reason);
    this.name = "UnsupportedKeyError";
  }
}

/**
 * The one algorithm a registered key verifies: fixed by the key's type, so an assertion cannot
 * choose a weaker one (`alg` confusion). A JWK `alg`, when present, must agree.
 */
export function algorithmOfJwk(jwk: JWK): AssertionAlgorithm {
  const alg = ((): AssertionAlgorithm | undefined => {
    if (jwk.kty === "OKP" && jwk.crv === "Ed25519") return "EdDSA";
    if (jwk.kty === "EC" && jwk.crv === "P-256") return "ES256";
    if (jwk.kty === "RSA") return "RS256";
    return undefined;
  })();
  if (alg === undefined) throw new UnsupportedKeyError("the key must be Ed25519 (OKP), P-256 (EC) or RSA");
  if (jwk.alg !== undefined && jwk.alg !== alg && !(alg === "EdDSA" && jwk.alg === "Ed25519")) {
    throw new UnsupportedKeyError(`the key's alg ${jwk.alg} does not match its type (${alg})`);
  }
  return alg;
}

/**
 * Checks a JWK given for registration: a public key of a supported type that imports cleanly.
 * Returns the canonical JSON to store (only the public members).
 */
export async function publicKeyToRegister(value: unknown): Promise<string> {
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw new UnsupportedKeyError("must be a JSON Web Key object");
  }
  const jwk = value as JWK;
  if ("d" in jwk || "p" in jwk || "k" in jwk) throw new UnsupportedKeyError("must be a public key, not a private or secret one");
  const alg = algorithmOfJwk(jwk);
  const kept: JWK = {};
  for (const member of ["kty", "crv", "x", "y", "n", "e", "kid", "alg", "use"] as const) {
    const v = jwk[member];
    if (typeof v === "string") kept[member] = v;
  }
  try {
    await importJWK(kept, alg);
  } catch (e) {
    throw new UnsupportedKeyError(`cannot be used: ${e instanceof Error ? e.message : String(e)}`);
  }
  if (alg === "RS256" && Buffer.from(kept.n ?? "", "base64url").length * 8 < 2048) {
    throw new UnsupportedKeyError("RSA keys must have at least 2048 bits");
  }
  return JSON.stringify(kept);
}

export async function importClientKey(storedJwk: string): Promise<{ key: CryptoKey; alg: AssertionAlgorithm }> {
  const jwk = JSON.parse(storedJwk) as JWK;
  const alg = algorithmOfJwk(jwk);
  return { key: (await importJWK(jwk, alg)) as CryptoKey, alg };
}
