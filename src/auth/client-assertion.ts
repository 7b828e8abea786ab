import { jwtVerify } from "jose";
import type { Clock } from "../clock.js";
import type { AssertionJtisRepository } from "../store/assertion-jtis-repository.js";
import type { Client } from "../store/clients-repository.js";
import { importClientKey } from "./client-public-key.js";
import { OAuthError } from "./oauth-error.js";

export const jwtBearerAssertionType = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";

/** An assertion may not claim to live longer than this (its `exp` at most 5 minutes ahead). */
const maxLifetimeSeconds = 300;

export interface AssertionCheck {
  /** Accepted `aud` values: the token endpoint URL and the base URL. */
  audiences: readonly string[];
  clock: Clock;
  jtis: AssertionJtisRepository;
}

/**
 * RFC 7523 private_key_jwt: the assertion is signed by the client's registered key, `iss` and
 * `sub` are the client id, `aud` names this service, `exp` is present and at most 5 minutes
 * ahead, and its `jti` was not used before. Any failure is invalid_client.
 */
export async function verifyClientAssertion(assertion: string, client: Client, check: AssertionCheck): Promise<void> {
  if (client.publicJwk === undefined) throw invalidClient("this client authenticates with a client_secret");
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
    }));
  } catch (e) {
    const code = typeof e === "object" && e !== null && "code" in e ? String(e.code) : "";
    throw invalidClient(code === "ERR_JWT_EXPIRED" ? "client assertion has expired" : "client assertion is invalid");
  }
  const exp = payload.exp ?? 0;
  if (exp > Math.floor(now / 1000) + maxLifetimeSeconds) {
    throw invalidClient(`client assertion exp must be at most ${maxLifetimeSeconds} seconds ahead`);
  }
  const jti = payload.jti ?? "";
  if (jti === "" || !check.jtis.recordOnce(client.id, jti, exp * 1000, now)) {
    throw invalidClient("client assertion jti was already used");
  }
}

function invalidClient(description: string): OAuthError {
  return new OAuthError("invalid_client", description);
}
