import { createHash } from "node:crypto";
import { decodeProtectedHeader, errors, jwtVerify, type JWTPayload, type ProtectedHeaderParameters } from "jose";
import { isCanonicalCompactJws } from "../compact-jws.js";
import { JwksHttpNotAllowedError, JwksHttpStatusError, JwksNotJsonError, JwksTooLargeError, type JwksCache } from "./jwks-cache.js";
import { unauthenticated, type Rejection } from "./rejection.js";
import { timestampToleranceSeconds } from "./timestamp-window.js";

/** Spec 5.2: RS256, ES256 and EdDSA only; never `none` or an HMAC algorithm. */
export const allowedJwtAlgorithms = ["RS256", "ES256", "EdDSA"] as const;
export type JwtAlgorithm = (typeof allowedJwtAlgorithms)[number];
const isAllowedJwtAlgorithm = (alg: unknown): alg is JwtAlgorithm => allowedJwtAlgorithms.some((a) => a === alg);
/** Spec 5.2: `exp` at most 10 minutes after the current time. */
export const maxJwtLifetimeSeconds = 600;
const requiredClaims = ["sub", "aud", "exp", "jti", "htm", "htb_s256"];
/**
 * How far ahead of the server's clock an optional `nbf` may be: the Webhook-Timestamp window
 * (spec 5.3), so a sender whose clock runs up to 5 minutes ahead, as that window accepts, is not
 * refused for stamping `nbf` with its own now. `exp` has no such leeway (checkWebhookClaims).
 */
const notBeforeLeewaySeconds = timestampToleranceSeconds;

export interface JwtCheckInput {
  authorization: string | undefined;
  jwksUrl: string;
  /** The tenant base URL: the required `sub`. */
  baseUrl: string;
  /** This listener's full endpoint URL: the required `aud`. */
  endpointUrl: string;
  /** The Webhook-Event-Id header as sent: the required `jti`. */
  eventId: string;
  body: Uint8Array;
  nowMs: number;
}

/**
 * Stage 6 for JWT listeners. Every failure, including a JWKS that cannot be fetched, is a 401
 * with a reason naming the check (`jwt_claim_aud`, `jwks_unreachable`, ...); a JWKS failure is
 * one message to the sender.
 */
export async function verifyWebhookJwt(jwks: JwksCache, input: JwtCheckInput): Promise<Rejection | undefined> {
  if (input.authorization?.includes(",") === true) {
    // Two Authorization headers (joined), or a list in one: no JWT has a comma.
    return unauthenticated("authorization_repeated", "Authorization must be given once, as Bearer <JWT>");
  }
  if (input.authorization === undefined || input.authorization.trim() === "") {
    return unauthenticated("authorization_missing", "Authorization: Bearer <JWT> is required for this listener");
  }
  const token = bearerToken(input.authorization);
  if (token === undefined) {
    // Sent, but another scheme, or a token with characters no JWT has (one URL-encoded: %3D).
    return unauthenticated("authorization_malformed", "Authorization must be Bearer <JWT>, the JWT in compact form (base64url parts joined by dots)");
  }
  if (!isCanonicalCompactJws(token)) {
    // A padded signature, or one whose last character's unused bits are set, was a second
    // spelling of a valid one.
    return unauthenticated("jwt_malformed", "the JWT's parts must be base64url without padding (no +, / or =), each as its bytes encode");
  }
  let header: ProtectedHeaderParameters;
  try {
    header = decodeProtectedHeader(token);
  } catch {
    return unauthenticated("jwt_malformed", "the bearer token is not a JWS compact JWT");
  }
  if (!isAllowedJwtAlgorithm(header.alg)) {
    return unauthenticated("jwt_alg_not_allowed", `JWT alg must be one of ${allowedJwtAlgorithms.join(", ")}`);
  }
  if (typeof header.kid !== "string" || header.kid === "") {
    return unauthenticated("jwt_kid_missing", "the JWT header must name its key (kid)");
  }
  if (header.crit !== undefined) {
    // jose refuses it too, but as JOSENotSupported, which names the JWKS (jwks_invalid) for a
    // fault of the sender's token.
    return unauthenticated("jwt_crit_not_supported", "the JWT header names critical extensions (crit); none is supported");
  }
  let payload: JWTPayload;
  try {
    ({ payload } = await jwtVerify(token, jwks.get(input.jwksUrl), {
      algorithms: [...allowedJwtAlgorithms],
      subject: input.baseUrl,
      audience: input.endpointUrl,
      requiredClaims,
      currentDate: new Date(input.nowMs),
      // jose applies one tolerance to nbf and exp alike; exp is held to the clock again below.
      clockTolerance: notBeforeLeewaySeconds,
    }));
  } catch (e) {
    if (isKeyDataError(e)) jwks.reportUnusableKey(input.jwksUrl, e);
    const rejection = rejectionOf(e);
    return rejection.reason === "jwt_signature_invalid" && header.alg === "ES256" ? withDerHint(rejection, token) : rejection;
  }
  return checkWebhookClaims(payload, input);
}

/** The claims jose does not know: `exp` in the future (without jose's leeway) and not too far ahead, `jti`, `htm`, `htb_s256`. */
function checkWebhookClaims(payload: JWTPayload, input: JwtCheckInput): Rejection | undefined {
  const nowSeconds = Math.floor(input.nowMs / 1000);
  if (typeof payload.exp === "number" && payload.exp <= nowSeconds) return jwtExpired;
  // Valid at no time on any clock (nbf's leeway took it): no honest sender writes one.
  if (typeof payload.nbf === "number" && typeof payload.exp === "number" && payload.nbf >= payload.exp) {
    return unauthenticated("jwt_claim_nbf", "JWT nbf is not before its exp: the JWT is valid at no time");
  }
  if (typeof payload.exp !== "number" || payload.exp - nowSeconds > maxJwtLifetimeSeconds) {
    return unauthenticated("jwt_claim_exp", `JWT exp must be at most ${maxJwtLifetimeSeconds} s after the current time`);
  }
  if (payload.jti !== input.eventId) {
    return unauthenticated("jwt_claim_jti", "JWT jti must equal Webhook-Event-Id");
  }
  if (payload["htm"] !== "POST") {
    return unauthenticated("jwt_claim_htm", 'JWT htm must be "POST"');
  }
  const bodyHash = createHash("sha256").update(input.body).digest("base64url");
  if (payload["htb_s256"] !== bodyHash) {
    return unauthenticated("jwt_claim_htb_s256", "JWT htb_s256 is not the base64url SHA-256 of the body");
  }
  return undefined;
}

const jwtExpired = unauthenticated("jwt_expired", "the JWT has expired");

function bearerToken(authorization: string | undefined): string | undefined {
  const match = /^Bearer +([A-Za-z0-9_.~+/=-]+)\s*$/i.exec(authorization ?? "");
  return match?.[1];
}

function rejectionOf(e: unknown): Rejection {
  if (e instanceof errors.JWTExpired) return jwtExpired;
  if (e instanceof errors.JWTClaimValidationFailed) {
    const claim = e.claim.replace(/[^a-z0-9_]/gi, "");
    const problem =
      e.reason === "missing"
        ? "is missing"
        : e.reason === "invalid"
          ? "must be a number (seconds since the epoch)"
          : claim === "nbf"
            ? "is in the future: the JWT is not valid yet"
            : "has the wrong value";
    return unauthenticated(`jwt_claim_${claim}`, `JWT claim ${claim} ${problem}`);
  }
  if (e instanceof errors.JWKSNoMatchingKey) {
    return unauthenticated("jwt_kid_unknown", "no key in the listener's JWKS matches the JWT kid and alg");
  }
  if (e instanceof errors.JWKSMultipleMatchingKeys) {
    return unauthenticated("jwt_kid_ambiguous", "several keys in the listener's JWKS match the JWT kid");
  }
  if (e instanceof errors.JWSSignatureVerificationFailed) {
    return unauthenticated("jwt_signature_invalid", "the JWT signature does not verify");
  }
  if (e instanceof errors.JOSEAlgNotAllowed) {
    return unauthenticated("jwt_alg_not_allowed", `JWT alg must be one of ${allowedJwtAlgorithms.join(", ")}`);
  }
  if (e instanceof errors.JWTInvalid || e instanceof errors.JWSInvalid) {
    return unauthenticated("jwt_malformed", "the bearer token is not a valid JWT");
  }
  // The JWKS's own troubles are named in the delivery log (the reason) and the server log, not to
  // the anonymous sender: "answered HTTP 500" would tell a stranger about the listener's key host.
  if (e instanceof errors.JWKSTimeout) return jwksUnusable("jwks_timeout");
  if (e instanceof errors.JWKSInvalid || e instanceof errors.JWKInvalid || e instanceof errors.JOSENotSupported) {
    return jwksUnusable("jwks_invalid");
  }
  if (e instanceof JwksTooLargeError) return jwksUnusable("jwks_too_large");
  if (e instanceof JwksHttpStatusError) return jwksUnusable("jwks_http_status");
  if (e instanceof JwksNotJsonError || isKeyDataError(e)) return jwksUnusable("jwks_invalid");
  if (e instanceof JwksHttpNotAllowedError) return jwksUnusable("jwks_http_not_allowed");
  // jose refuses a key it fetched but cannot use with a plain TypeError (an RSA key under 2,048
  // bits: "RS256 requires key modulusLength to be 2048 bits or larger"): the JWKS was reached, and
  // holds no usable key. Everything else left is the fetch failing.
  if (e instanceof TypeError && /key/i.test(e.message)) return jwksUnusable("jwks_invalid");
  return jwksUnusable("jwks_unreachable");
}

/** WebCrypto's refusal of a key's material (jose imports with it): the JWKS answered, unusably. */
const isKeyDataError = (e: unknown): boolean => e instanceof DOMException && e.name === "DataError";

/**
 * An ES256 signature is r || s, 64 bytes (RFC 7518 3.4); OpenSSL and most crypto libraries sign
 * in DER (a SEQUENCE, 0x30, of about 70 bytes), the usual mistake of a sender signing by hand.
 */
function withDerHint(rejection: Rejection, token: string): Rejection {
  const signature = Buffer.from(token.slice(token.lastIndexOf(".") + 1), "base64url");
  if (signature.length === 64 || signature[0] !== 0x30) return rejection;
  return unauthenticated(
    rejection.reason,
    `${rejection.message}: an ES256 signature is the 64 bytes r || s (RFC 7518 3.4), and this one is ${signature.length} bytes of DER`,
  );
}

/** One message for every JWKS failure; `reason` tells them apart in the delivery log. */
export const jwksUnusableMessage = "the listener's JWKS could not be used to verify the JWT";

function jwksUnusable(reason: string): Rejection {
  return unauthenticated(reason, jwksUnusableMessage);
}
