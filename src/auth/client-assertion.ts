import { jwtVerify } from "jose";
import type { Clock } from "../clock.js";
import type { AssertionJtisRepository } from "../store/assertion-jtis-repository.js";
import type { Client } from "../store/clients-repository.js";
import { importClientKey } from "./client-public-key.js";
import { invalidClient } from "./oauth-error.js";

export const jwtBearerAssertionType = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";

/** An assertion may not claim to live longer than this (its `exp` at most 5 minutes ahead). */
const maxLifetimeSeconds = 300;

/**
 * How far ahead of the server's clock an assertion's optional `nbf` may be: RFC 7523 3 allows
 * "some small leeway, usually no more than a few minutes" for a client's clock; 5 minutes, as
 * webhook senders get (a client stamping `nbf` with its own now, a second ahead, was refused).
 * `exp` has none: an assertion is used once, at once.
 */
const notBeforeLeewaySeconds = 300;

export interface AssertionCheck {
  /** Accepted `aud` values: the token endpoint URL and the base URL. */
  audiences: readonly string[];
  clock: Clock;
  jtis: AssertionJtisRepository;
}

/**
 * The answer to an assertion for an unknown client, for a client_secret client, and to one that
 * does not verify with the client's key: the same for the three, so that the assertion path does
 * not tell which client ids exist and how they authenticate (as the client_secret path does not).
 */
export const assertionRefusal = "unknown client or invalid client_assertion";

/** RFC 7519 makes `jti` a string; ours are kept per client until they expire, so they are bounded. */
const maxJtiLength = 256;

/**
 * RFC 7523 private_key_jwt: the assertion is signed by the client's registered key, `iss` and
 * `sub` are the client id, `aud` names this service, `exp` is present and at most 5 minutes
 * ahead, and its `jti`, a string, was not used before. Returns the client it authenticated. Any
 * failure is invalid_client; only an assertion that verifies with the client's key is told more
 * than `assertionRefusal`.
 */
export async function verifyClientAssertion(assertion: string, client: Client | undefined, check: AssertionCheck): Promise<Client> {
  if (client === undefined) throw invalidClient(assertionRefusal, "unknown client");
  if (client.publicJwk === undefined) throw invalidClient(assertionRefusal, "this client authenticates with a client_secret");
  const { key, alg } = await importClientKey(client.publicJwk);
  const now = check.clock.now();
  let payload;
  try {
    ({ payload } = await jwtVerify(assertion, key, {
      algorithms: [alg],
      issuer: client.id,
      subject: client.id,
      audience: [...check.audiences],
      currentDate: new Date(now),
      requiredClaims: ["exp", "jti"],
      // jose applies one tolerance to nbf and exp alike; exp is held to the clock again below.
      clockTolerance: notBeforeLeewaySeconds,
    }));
  } catch (e) {
    // jose checks the signature before the claims: only the key's holder learns of an expiry.
    const code = typeof e === "object" && e !== null && "code" in e ? String(e.code) : "";
    if (code === "ERR_JWT_EXPIRED") throw invalidClient("client assertion has expired");
    throw invalidClient(assertionRefusal, `client assertion is invalid (${code === "" ? "malformed" : code})`);
  }
  const exp = payload.exp ?? 0;
  if (exp <= Math.floor(now / 1000)) throw invalidClient("client assertion has expired");
  // Valid at no time on any clock (nbf's leeway took it): no honest client writes one.
  if (typeof payload.nbf === "number" && payload.nbf >= exp) throw invalidClient("client assertion nbf is not before its exp: it is valid at no time");
  if (exp > Math.floor(now / 1000) + maxLifetimeSeconds) {
    throw invalidClient(`client assertion exp must be at most ${maxLifetimeSeconds} seconds ahead`);
  }
  // A jti that is not a string must not reach the store (an object or boolean fails to bind, an
  // array would be spread into the statement's parameters).
  const jti: unknown = payload.jti;
  if (typeof jti !== "string" || jti === "" || jti.length > maxJtiLength) {
    throw invalidClient(`client assertion jti must be a string of 1 to ${maxJtiLength} characters`);
  }
  if (!check.jtis.recordOnce(client.id, jti, exp * 1000, now)) {
    throw invalidClient("client assertion jti was already used");
  }
  return client;
}
