import type { Clock } from "../clock.js";
import type { Logger } from "../logger.js";
import type { RawRoute } from "../server/http-server.js";
import type { NodeRequest, NodeResponse } from "../server/node-http.js";
import { BodyTooLargeError, compressedBodyMessage, identityOnlyHeaders, readBody, unsupportedContentEncoding } from "../server/read-body.js";
import type { RequestFacts } from "../server/request-context.js";
import { RequestTimeoutError } from "../server/request-deadline.js";
import { storeUnavailableHeaders, storeUnavailableMessage } from "../server/store-unavailable.js";
import type { Client } from "../store/clients-repository.js";
import { isStoreUnavailable } from "../store/store-errors.js";
import type { Store } from "../store/store.js";
import { SourceIpResolver } from "../server/source-ip.js";
import type { AccessTokens } from "./access-tokens.js";
import { assertionRefusal, jwtBearerAssertionType, verifyClientAssertion } from "./client-assertion.js";
import { decoyHash, verifySecret } from "./client-secret.js";
import type { FailureLimiter } from "./failure-limiter.js";
import { FamiliarAddresses } from "./familiar-addresses.js";
import { invalidClient, OAuthError, type OAuthErrorCode, writeOAuthError, writeOAuthJson } from "./oauth-error.js";
import { parseTokenRequest, requireParameter, type TokenParameters } from "./token-request.js";

export const tokenPath = "/auth/v1/token";

const maxBodyBytes = 16 * 1024;

/**
 * No client id is longer: generated ids are UUIDs (36 characters) and ACCESSD_BOOTSTRAP_CLIENT_ID
 * takes 1 to 128 characters.
 */
export const maxClientIdLength = 128;

/** The answer to an unknown client and to a wrong secret alike: client ids cannot be probed. */
const secretRefusal = "unknown client or wrong client_secret";

export interface TokenEndpointOptions {
  store: Store;
  tokens: AccessTokens;
  limiter: FailureLimiter;
  clock: Clock;
  baseUrl: string;
  log: Logger;
  /** CIDRs whose X-Forwarded-For is believed (ACCESSD_TRUSTED_PROXIES), as for webhooks. */
  trustedProxies: readonly string[];
  /** Each request's outcome, for the metrics: `issued`, or the RFC 6749 error code answered. */
  onOutcome?: (outcome: "issued" | OAuthErrorCode) => void;
}

/** What the token endpoint's log lines say about who asked. */
interface TokenAudit {
  /** The source address (X-Forwarded-For believed from ACCESSD_TRUSTED_PROXIES only). */
  sourceIp: string;
  /** The client id as given, once read (cut to `maxClientIdLength` characters: no client has a longer one). */
  clientId?: string;
}

/**
 * `POST /auth/v1/token`: OAuth 2.0 client credentials (RFC 6749 section 4.4) with the client
 * authenticated in the body only, by client_secret_post or private_key_jwt (RFC 7523). Answers
 * `{access_token, token_type, expires_in}` or an RFC 6749 error, never cached. Failures count
 * per client id and per source address (X-Forwarded-For believed from trusted proxies only), each
 * attempt from its start; past the limit the answer is 429 with Retry-After. The client id's
 * limit does not apply from an address the client got a token from lately (FamiliarAddresses).
 */
export function tokenEndpoint(endpointOptions: TokenEndpointOptions): RawRoute {
  const options: TokenEndpoint = {
    ...endpointOptions,
    sourceIp: new SourceIpResolver(endpointOptions.trustedProxies),
    familiar: new FamiliarAddresses(endpointOptions.store, endpointOptions.clock),
  };
  return {
    path: tokenPath,
    async handle(req: NodeRequest, res: NodeResponse, facts: RequestFacts): Promise<void> {
      // Who asked, for the log (an access-management API's grants must be attributable): the
      // source address, and the client id as given once the request is read that far.
      const audit: TokenAudit = { sourceIp: options.sourceIp.resolve(facts.peerAddress, req.headers["x-forwarded-for"]) };
      facts.answerLateBody = answerLateTokenRequest;
      try {
        const issued = await issueToken(req, options, audit);
        writeOAuthJson(res, 200, { access_token: issued.accessToken, token_type: "Bearer", expires_in: issued.expiresIn });
        options.onOutcome?.("issued");
        options.log.info({ requestId: facts.requestId, ...audit, expiresIn: issued.expiresIn }, "token issued");
      } catch (e) {
        if (isStoreUnavailable(e)) {
          // Disk full, locked, I/O error (a private_key_jwt grant records the assertion's jti), or
          // a damaged page, which makes the server unready as everywhere else.
          options.store.noteDamage(e);
          options.log.error({ err: e, requestId: facts.requestId, ...audit }, "token request failed: the store is unavailable");
          writeOAuthError(res, new OAuthError("temporarily_unavailable", storeUnavailableMessage, 503, storeUnavailableHeaders));
          options.onOutcome?.("temporarily_unavailable");
          return;
        }
        if (e instanceof RequestTimeoutError) {
          // The request deadline answered 408 (its body did not arrive in time).
          options.log.info({ requestId: facts.requestId, ...audit }, "token request cut by its deadline before its body arrived");
          return;
        }
        if (!(e instanceof OAuthError)) throw e;
        // The log names the failed check (more precisely than the answer may); never the secret,
        // assertion or token.
        const retryAfter = e.headers["retry-after"];
        options.log.info(
          { requestId: facts.requestId, ...audit, error: e.error, reason: e.logReason, ...(retryAfter === undefined ? {} : { retryAfterSeconds: Number(retryAfter) }) },
          "token request refused",
        );
        writeOAuthError(res, e);
        options.onOutcome?.(e.error);
      }
    },
  };
}

/** The endpoint's options and what is built from them once. */
interface TokenEndpoint extends TokenEndpointOptions {
  sourceIp: SourceIpResolver;
  familiar: FamiliarAddresses;
}

/**
 * Steps of a token request: read it, admit it past the failure limiter, check the client's
 * credential, sign, confirm the client still exists, note the address it came from.
 */
async function issueToken(req: NodeRequest, options: TokenEndpoint, audit: TokenAudit) {
  const params = await readTokenRequest(req);
  const grantType = requireParameter(params, "grant_type");
  if (grantType !== "client_credentials") {
    throw new OAuthError("unsupported_grant_type", "grant_type must be client_credentials");
  }
  const clientId = requireParameter(params, "client_id");
  // Behind a reverse proxy the TCP peer is the proxy: keyed on it, ten bad requests from anyone
  // would lock out every client. An id no client can have gets no key of its own (a key per
  // made-up id would let a flood of long ids fill the memory).
  const sourceAddress = audit.sourceIp;
  audit.clientId = clientId.length <= maxClientIdLength ? clientId : `${clientId.slice(0, maxClientIdLength)}…`;
  const credential = credentialOf(params);

  const admission = admit(clientId, sourceAddress, options);
  let client: Client;
  try {
    client = await authenticateClient(clientId, credential, options);
  } catch (e) {
    if (e instanceof OAuthError && e.error === "invalid_client") admission.attempt.fail();
    throw e;
  } finally {
    admission.attempt.release(); // a success, or a failure of the store: not a guess that failed
  }
  const issued = await options.tokens.issue(client);
  // The client may have been deleted while its credential was checked (scrypt, a signature) or
  // its token signed (WebCrypto, on the same thread pool): no token for a client that no longer
  // exists, even one that would fail at its first use.
  const now = options.store.clients.get(clientId);
  if (now === undefined || now.createdAt !== client.createdAt) {
    throw invalidClient(credential.kind === "secret" ? secretRefusal : assertionRefusal, "client deleted while its credential was checked");
  }
  noteFamiliarAddress(clientId, sourceAddress, options);
  return issued;
}

/** The request's parameters, after what the endpoint refuses before reading them. */
async function readTokenRequest(req: NodeRequest): Promise<TokenParameters> {
  if (req.method !== "POST") {
    throw new OAuthError("invalid_request", "the token endpoint takes POST", 405, { allow: "POST" });
  }
  if (req.headers.authorization !== undefined) {
    throw new OAuthError(
      "invalid_request",
      "client credentials go in the request body (client_secret_post or private_key_jwt), not in an Authorization header",
    );
  }
  const encoding = unsupportedContentEncoding(req.headers["content-encoding"]);
  // A compressed body read as a form had no parameters ("grant_type is required").
  if (encoding !== undefined) throw new OAuthError("invalid_request", compressedBodyMessage(encoding), 415, { ...identityOnlyHeaders });
  let body: Buffer;
  try {
    body = await readBody(req, maxBodyBytes);
  } catch (e) {
    if (e instanceof BodyTooLargeError) throw new OAuthError("invalid_request", e.message, 413);
    throw e;
  }
  return parseTokenRequest(req.headers["content-type"], body);
}

/**
 * A place under the failure limiter for this attempt, or 429: keyed on the source address, and on
 * the client id too unless the client got a token from this address before (so strangers who
 * know a client's id cannot lock it out).
 */
function admit(clientId: string, sourceAddress: string, options: TokenEndpoint) {
  const addressKey = `address:${sourceAddress}`;
  const limitsClient = clientId.length <= maxClientIdLength && !options.familiar.has(clientId, sourceAddress);
  const admission = options.limiter.admit(limitsClient ? [`client:${clientId}`, addressKey] : [addressKey]);
  if (!admission.admitted) {
    const retryAfter = admission.retryAfterSeconds;
    throw new OAuthError(
      "slow_down",
      `too many failed attempts; retry after ${retryAfter} seconds`,
      429,
      { "retry-after": String(retryAfter) },
      "too many failed attempts", // one reason to group by; the log line has retryAfterSeconds
    );
  }
  return admission;
}

function noteFamiliarAddress(clientId: string, sourceAddress: string, options: TokenEndpoint): void {
  try {
    options.familiar.remember(clientId, sourceAddress);
  } catch (e) {
    // Best effort: a store that cannot take the write (locked, full) must not cost the client a
    // token already signed; its address is noted at its next token.
    if (!isStoreUnavailable(e)) throw e;
    options.log.warn({ err: e, clientId, sourceIp: sourceAddress }, "token issued; its source address could not be noted as the client's");
  }
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

async function authenticateClient(clientId: string, credential: Credential, options: TokenEndpoint): Promise<Client> {
  if (clientId.length > maxClientIdLength) {
    // No client has such an id; answered as an unknown client is (without the decoy's cost).
    throw invalidClient(credential.kind === "secret" ? secretRefusal : assertionRefusal, "client_id is longer than any client's");
  }
  const client = options.store.clients.get(clientId);
  if (credential.kind === "secret") return checkSecret(credential.secret, client);
  return verifyClientAssertion(credential.assertion, client, {
    audiences: [`${options.baseUrl}${tokenPath}`, options.baseUrl],
    clock: options.clock,
    jtis: options.store.assertionJtis,
  });
}

async function checkSecret(secret: string, client: Client | undefined): Promise<Client> {
  // An unknown client is checked against a decoy hash, so it takes as long as a wrong secret.
  const matches = await verifySecret(secret, client?.secretHash ?? decoyHash);
  if (client === undefined) throw invalidClient(secretRefusal, "unknown client");
  if (client.secretHash === undefined) throw invalidClient(secretRefusal, "this client authenticates with private_key_jwt");
  if (!matches) throw invalidClient(secretRefusal, "wrong client_secret");
  return client;
}

/**
 * The request deadline's 408 for a token request whose body is late, as RFC 6749 refuses a bad
 * request, so that an OAuth client library reads `error` (it was the API's `{"code": ...}`).
 */
function answerLateTokenRequest(res: NodeResponse, message: string, headers: Record<string, string>): void {
  writeOAuthJson(res, 408, { error: "invalid_request", error_description: message }, headers);
}
