import type { Clock } from "../clock.js";
import type { Logger } from "../logger.js";
import type { RawRoute } from "../server/http-server.js";
import type { NodeRequest, NodeResponse } from "../server/json-error.js";
import { BodyTooLargeError, readBody } from "../server/read-body.js";
import type { RequestFacts } from "../server/request-context.js";
import { storeUnavailableHeaders, storeUnavailableMessage } from "../server/store-unavailable.js";
import { isStoreUnavailable } from "../store/store-errors.js";
import type { Store } from "../store/store.js";
import type { AccessTokens } from "./access-tokens.js";
import { jwtBearerAssertionType, verifyClientAssertion } from "./client-assertion.js";
import { decoyHash, verifySecret } from "./client-secret.js";
import type { FailureLimiter } from "./failure-limiter.js";
import { OAuthError, writeOAuthError, writeOAuthJson } from "./oauth-error.js";
import { parseTokenRequest, requireParameter, type TokenParameters } from "./token-request.js";

export const tokenPath = "/auth/v1/token";

const maxBodyBytes = 16 * 1024;

export interface TokenEndpointOptions {
  store: Store;
  tokens: AccessTokens;
  limiter: FailureLimiter;
  clock: Clock;
  baseUrl: string;
  log: Logger;
}

/**
 * `POST /auth/v1/token`: OAuth 2.0 client credentials (RFC 6749 section 4.4) with the client
 * authenticated in the body only, by client_secret_post or private_key_jwt (RFC 7523). Answers
 * `{access_token, token_type, expires_in}` or an RFC 6749 error, never cached. Failures count
 * per client id and per source address; past the limit the answer is 429 with Retry-After.
 */
export function tokenEndpoint(options: TokenEndpointOptions): RawRoute {
  return {
    path: tokenPath,
    async handle(req: NodeRequest, res: NodeResponse, facts: RequestFacts): Promise<void> {
      try {
        const issued = await issueToken(req, facts, options);
        writeOAuthJson(res, 200, { access_token: issued.accessToken, token_type: "Bearer", expires_in: issued.expiresIn });
      } catch (e) {
        if (isStoreUnavailable(e)) {
          // Disk full, locked, I/O error (a private_key_jwt grant records the assertion's jti).
          options.log.error({ err: e, requestId: facts.requestId }, "token request failed: the store is unavailable");
          writeOAuthError(res, new OAuthError("temporarily_unavailable", storeUnavailableMessage, 503, storeUnavailableHeaders));
          return;
        }
        if (!(e instanceof OAuthError)) throw e;
        // The description names the failed check; never the secret, assertion or token.
        options.log.info({ requestId: facts.requestId, error: e.error, reason: e.description }, "token request refused");
        writeOAuthError(res, e);
      }
    },
  };
}

async function issueToken(req: NodeRequest, facts: RequestFacts, options: TokenEndpointOptions) {
  if (req.method !== "POST") {
    throw new OAuthError("invalid_request", "the token endpoint takes POST", 405, { allow: "POST" });
  }
  if (req.headers.authorization !== undefined) {
    throw new OAuthError(
      "invalid_request",
      "client credentials go in the request body (client_secret_post or private_key_jwt), not in an Authorization header",
    );
  }
  let body: Buffer;
  try {
    body = await readBody(req, maxBodyBytes);
  } catch (e) {
    if (e instanceof BodyTooLargeError) throw new OAuthError("invalid_request", e.message, 413);
    throw e;
  }
  const params = parseTokenRequest(req.headers["content-type"], body);
  const grantType = requireParameter(params, "grant_type");
  if (grantType !== "client_credentials") {
    throw new OAuthError("unsupported_grant_type", "grant_type must be client_credentials");
  }
  const clientId = requireParameter(params, "client_id");
  const credential = credentialOf(params);

  const keys = [`client:${clientId}`, `address:${facts.peerAddress}`];
  const retryAfter = options.limiter.retryAfterSeconds(keys);
  if (retryAfter !== undefined) {
    throw new OAuthError("slow_down", `too many failed attempts; retry after ${retryAfter} seconds`, 429, {
      "retry-after": String(retryAfter),
    });
  }
  try {
    await authenticateClient(clientId, credential, options);
  } catch (e) {
    if (e instanceof OAuthError && e.error === "invalid_client") options.limiter.recordFailure(keys);
    throw e;
  }
  return options.tokens.issue(clientId);
}

type Credential = { kind: "secret"; secret: string } | { kind: "assertion"; assertion: string };

function credentialOf(params: TokenParameters): Credential {
  const secret = params.get("client_secret");
  const assertion = params.get("client_assertion");
  if (secret !== undefined && assertion !== undefined) {
    throw new OAuthError("invalid_request", "send either client_secret or client_assertion, not both");
  }
  if (assertion !== undefined) {
    if (params.get("client_assertion_type") !== jwtBearerAssertionType) {
      throw new OAuthError("invalid_request", `client_assertion_type must be ${jwtBearerAssertionType}`);
    }
    return { kind: "assertion", assertion: requireParameter(params, "client_assertion") };
  }
  if (secret !== undefined) return { kind: "secret", secret: requireParameter(params, "client_secret") };
  throw new OAuthError("invalid_request", "client_secret or client_assertion is required");
}

async function authenticateClient(clientId: string, credential: Credential, options: TokenEndpointOptions): Promise<void> {
  const client = options.store.clients.get(clientId);
  if (credential.kind === "secret") {
    // An unknown client is checked against a decoy hash, so it takes as long as a wrong secret.
    const matches = await verifySecret(credential.secret, client?.secretHash ?? decoyHash);
    if (client === undefined || client.secretHash === undefined || !matches) {
      throw new OAuthError("invalid_client", "unknown client or wrong client_secret");
    }
    return;
  }
  if (client === undefined) throw new OAuthError("invalid_client", "unknown client");
  await verifyClientAssertion(credential.assertion, client, {
    audiences: [`${options.baseUrl}${tokenPath}`, options.baseUrl],
    clock: options.clock,
    jtis: options.store.assertionJtis,
  });
}
