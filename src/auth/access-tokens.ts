import { randomUUID } from "node:crypto";
import {
  SignJWT,
  calculateJwkThumbprint,
  exportJWK,
  generateKeyPair,
  importJWK,
  jwtVerify,
  type CryptoKey,
  type JWK,
  type JWTHeaderParameters,
} from "jose";
import { isCanonicalCompactJws } from "../compact-jws.js";
import type { Clock } from "../clock.js";
import { maxTokenTtlMs } from "../config.js";
import type { SecretCipher } from "../store/secret-cipher.js";
import { signingKeyAssociatedData } from "../store/signing-keys-repository.js";
import type { Store } from "../store/store.js";

export interface AccessTokenOptions {
  /** The tenant base URL: issuer and audience of every token. */
  baseUrl: string;
  ttlMs: number;
  clock: Clock;
}

export interface AccessTokenLoadOptions extends AccessTokenOptions {
  /** Seals the private signing keys at rest under the data key. */
  cipher: SecretCipher;
}

export interface IssuedToken {
  accessToken: string;
  /** Seconds. */
  expiresIn: number;
}

/** The client record a token is issued to: its id and when that record was created. */
export interface TokenClient {
  id: string;
  /** Milliseconds, as stored. */
  createdAt: number;
}

/** What a valid token says about the client it was issued to. */
export interface VerifiedToken {
  clientId: string;
  /**
   * The `createdAt` of the client record the token was issued to (the `client_created_at`
   * claim); undefined for a token issued before the claim existed.
   */
  clientCreatedAt: number | undefined;
  /** The `iat` claim, in seconds. */
  issuedAt: number;
}

/**
 * True when the token was issued to this very client record and not to an earlier one with the
 * same id (deleted, then re-created): deleting a client ends its tokens for good. The creation
 * time in the token tells records apart to the millisecond, so a token issued in the second its
 * client was created still works while one from before a re-creation in that second does not. A
 * token without the claim falls back to its `iat`, which has only whole seconds: it is refused
 * when issued in a second before the record's.
 */
export function isIssuedToClientRecord(token: VerifiedToken, clientCreatedAt: number): boolean {
  if (token.clientCreatedAt !== undefined) return token.clientCreatedAt === clientCreatedAt;
  return token.issuedAt >= Math.floor(clientCreatedAt / 1000);
}

/** A bearer token that is missing its parts, foreign, tampered with or expired. */
export class InvalidAccessTokenError extends Error {
  constructor(reason: string) {
    super(reason);
    this.name = "InvalidAccessTokenError";
  }
}

const algorithm = "EdDSA";
/** RFC 9068 JWT access tokens. */
const tokenType = "at+jwt";
/**
 * Names the client record a token was issued to (see isIssuedToClientRecord): `iat` alone cannot
 * tell apart records created within one second of each other.
 */
const clientCreatedAtClaim = "client_created_at";

interface KeyPair {
  kid: string;
  privateKey: CryptoKey;
  publicKey: CryptoKey;
}

/**
 * Issues and verifies the service's access tokens: JWTs signed with its own Ed25519 key. The key
 * lives in the store (created on first start), sealed under the data key, so tokens survive a
 * restart and a copy of the database alone cannot mint them; every stored key is accepted by
 * `kid`, the newest one signs.
 */
export class AccessTokens {
  /**
   * Tokens already verified -> what they say and their expiry: a signature check costs ~250 µs, a
   * map hit nothing. Expiry is still checked on every hit; the client's existence is checked by
   * the caller on every request, so a deleted client's cached token still fails at once.
   */
  private readonly verified = new Map<string, { token: VerifiedToken; expiresAtMs: number }>();
  private static readonly maxCached = 10_000;

  private constructor(
    private readonly signer: KeyPair,
    private readonly verifiers: ReadonlyMap<string, CryptoKey>,
    private readonly options: AccessTokenOptions,
  ) {}

  /**
   * Reads the signing keys (making the first on a new database) with the data key's cipher; a key
   * still stored in clear (from before migration 006) is sealed in place. Call after checkDataKey.
   */
  static async load(store: Store, { cipher, ...options }: AccessTokenLoadOptions): Promise<AccessTokens> {
    const sealingOf = signingKeyAssociatedData;
    if (store.signingKeys.all().length === 0) store.signingKeys.insert(await AccessTokens.newSigningKey(cipher, options.clock));
    const pairs: KeyPair[] = [];
    for (const stored of store.signingKeys.all()) {
      let text = stored.clearPrivateJwk;
      if (stored.sealedPrivateJwk === undefined) {
        store.signingKeys.seal(stored.kid, cipher.seal(Buffer.from(text, "utf8"), sealingOf(stored.kid)));
      } else {
        // The data key passed checkDataKey, so only an altered row fails here (the start stops).
        try {
          text = cipher.open(stored.sealedPrivateJwk, sealingOf(stored.kid)).toString("utf8");
        } catch (e) {
          throw new Error(`token signing key ${stored.kid} does not open with the data key (its row was altered)`, { cause: e });
        }
      }
      const jwk = JSON.parse(text) as JWK;
      pairs.push({
        kid: stored.kid,
        privateKey: (await importJWK(jwk, algorithm)) as CryptoKey,
        publicKey: (await importJWK(publicPart(jwk), algorithm)) as CryptoKey,
      });
    }
    const newest = pairs.at(-1);
    if (newest === undefined) throw new Error("no token signing key in the store");
    return new AccessTokens(newest, new Map(pairs.map((p) => [p.kid, p.publicKey])), options);
  }

  /**
   * A new signing key, sealed under the data key, to be stored: the newest stored key signs
   * (from the next start), every key still stored verifies.
   */
  static async newSigningKey(cipher: SecretCipher, clock: Clock): Promise<{ kid: string; sealedPrivateJwk: Buffer; createdAt: number }> {
    const { privateKey } = await generateKeyPair(algorithm, { extractable: true });
    const privateJwk = await exportJWK(privateKey);
    const kid = await calculateJwkThumbprint(publicPart(privateJwk));
    const sealedPrivateJwk = cipher.seal(Buffer.from(JSON.stringify(privateJwk), "utf8"), signingKeyAssociatedData(kid));
    return { kid, sealedPrivateJwk, createdAt: clock.now() };
  }

  /**
   * Deletes the keys no token they signed can still be good under: a key stops signing when a
   * newer one is added (`accessd rotate-signing-key`, with the server stopped), so its last token
   * was issued before that, and no token is good past the longest ACCESSD_TOKEN_TTL (24 h) from
   * its iat. Run at start, before load. Returns the kids deleted.
   */
  static deleteRetiredKeys(store: Store, clock: Clock): string[] {
    const keys = store.signingKeys.all();
    const retired: string[] = [];
    keys.forEach((key, i) => {
      const successor = keys[i + 1];
      if (successor !== undefined && successor.createdAt + maxTokenTtlMs <= clock.now()) retired.push(key.kid);
    });
    for (const kid of retired) store.signingKeys.delete(kid);
    return retired;
  }

  /** The kid of the key that signs (the newest stored). */
  get signingKid(): string {
    return this.signer.kid;
  }

  async issue(client: TokenClient): Promise<IssuedToken> {
    const nowSeconds = Math.floor(this.options.clock.now() / 1000);
    const expiresIn = Math.max(1, Math.floor(this.options.ttlMs / 1000));
    const accessToken = await new SignJWT({ client_id: client.id, [clientCreatedAtClaim]: client.createdAt })
      .setProtectedHeader({ alg: algorithm, typ: tokenType, kid: this.signer.kid })
      .setIssuer(this.options.baseUrl)
      .setAudience(this.options.baseUrl)
      .setSubject(client.id)
      .setIssuedAt(nowSeconds)
      .setExpirationTime(nowSeconds + expiresIn)
      .setJti(randomUUID())
      .sign(this.signer.privateKey);
    return { accessToken, expiresIn };
  }

  /** What a valid token says about its client; throws InvalidAccessTokenError otherwise. */
  async verify(token: string): Promise<VerifiedToken> {
    const cached = this.verified.get(token);
    if (cached !== undefined) {
      if (this.options.clock.now() < cached.expiresAtMs) return cached.token;
      this.verified.delete(token);
    }
    const verified = await this.verifySignedToken(token);
    this.verified.set(token, verified);
    if (this.verified.size > AccessTokens.maxCached) {
      const oldest = this.verified.keys().next();
      if (oldest.done !== true) this.verified.delete(oldest.value);
    }
    return verified.token;
  }

  private async verifySignedToken(token: string): Promise<{ token: VerifiedToken; expiresAtMs: number }> {
    if (!isCanonicalCompactJws(token)) {
      throw new InvalidAccessTokenError("token is malformed: a JWT of three base64url parts without padding, as issued");
    }
    try {
      const { payload } = await jwtVerify(token, (header: JWTHeaderParameters) => this.keyFor(header), {
        algorithms: [algorithm],
        typ: tokenType,
        issuer: this.options.baseUrl,
        audience: this.options.baseUrl,
        currentDate: new Date(this.options.clock.now()),
        requiredClaims: ["sub", "exp", "iat"],
      });
      if (typeof payload.sub !== "string" || payload.sub === "") throw new InvalidAccessTokenError("token has no subject");
      const clientCreatedAt = payload[clientCreatedAtClaim];
      if (clientCreatedAt !== undefined && typeof clientCreatedAt !== "number") {
        throw new InvalidAccessTokenError("token claims are invalid");
      }
      // Only this service signs its tokens, each living ACCESSD_TOKEN_TTL from its iat. A token
      // that says otherwise was signed elsewhere with this key (a leaked database and key file),
      // or under a longer TTL since lowered: it is good for at most the TTL from its iat, and one
      // issued in the future (beyond a minute of clock steps) is refused.
      const issuedAt = payload.iat ?? 0;
      const nowSeconds = this.options.clock.now() / 1000;
      if (issuedAt > nowSeconds + maxClockStepSeconds) throw new InvalidAccessTokenError("token was issued in the future");
      const expiresAtMs = Math.min(payload.exp ?? 0, issuedAt + this.options.ttlMs / 1000) * 1000;
      if (expiresAtMs <= this.options.clock.now()) throw new InvalidAccessTokenError("token is older than ACCESSD_TOKEN_TTL");
      return { token: { clientId: payload.sub, clientCreatedAt, issuedAt }, expiresAtMs };
    } catch (e) {
      if (e instanceof InvalidAccessTokenError) throw e;
      throw new InvalidAccessTokenError(describeJoseError(e));
    }
  }

  private keyFor(header: JWTHeaderParameters): CryptoKey {
    const key = header.kid === undefined ? undefined : this.verifiers.get(header.kid);
    if (key === undefined) throw new InvalidAccessTokenError("token was not signed by this service");
    return key;
  }
}

/** How far in the future a token's iat may be: the clock stepped back since it was issued. */
const maxClockStepSeconds = 60;

function publicPart(jwk: JWK): JWK {
  const { kty, crv, x } = jwk;
  return { kty, crv, x };
}

/** A short reason for the caller; jose's codes name what failed without echoing the token. */
function describeJoseError(e: unknown): string {
  const code = typeof e === "object" && e !== null && "code" in e ? String(e.code) : "";
  switch (code) {
    case "ERR_JWT_EXPIRED":
      return "token has expired";
    case "ERR_JWS_SIGNATURE_VERIFICATION_FAILED":
      return "token signature is invalid";
    case "ERR_JWT_CLAIM_VALIDATION_FAILED":
      return "token claims are invalid";
    default:
      return "token is malformed or was not issued by this service";
  }
}
