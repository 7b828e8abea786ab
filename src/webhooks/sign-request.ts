import { createHash, randomUUID, type KeyObject } from "node:crypto";
import { SignJWT } from "jose";
import { baseUrlOfEndpoint } from "./endpoint-url.js";
import { hmacSignature } from "./hmac-signature.js";
import type { JwtAlgorithm } from "./jwt-verification.js";

/** What a sender signs: the endpoint URL, the raw body, and optionally a fixed event id and time. */
export interface WebhookToSign {
  url: string;
  body: Uint8Array;
  /** Default: a new random UUID v4. */
  eventId?: string;
  /** Unix seconds; default: now. */
  timestamp?: number;
}

export interface SignedHeaders {
  "Content-Type": string;
  "Webhook-Timestamp": string;
  "Webhook-Event-Id": string;
  "Webhook-Signature"?: string;
  Authorization?: string;
}


/** Headers for an HMAC listener (spec 5.2): the signature over `<timestamp>.<event_id>.<body>`. */
export function signHmacWebhook(request: WebhookToSign, secret: string): SignedHeaders {
  const headers = baseHeaders(request);
  return {
    ...headers,
    "Webhook-Signature": hmacSignature(secret, headers["Webhook-Timestamp"], headers["Webhook-Event-Id"], request.body),
  };
}

export interface JwtSigningKey {
  privateKey: KeyObject;
  kid: string;
  /** Default: from the key type (RSA -> RS256, P-256 -> ES256, Ed25519 -> EdDSA). */
  alg?: JwtAlgorithm;
  /** Seconds until `exp`; default 300 (the spec allows at most 600). */
  lifetimeSeconds?: number;
  /** Default: the URL up to /api/v1/webhooks/incoming/. */
  baseUrl?: string;
  /** The `aud`: the listener's endpoint URL as the service shows it. Default: the URL sent to. */
  audience?: string;
}

/** Headers for a JWT listener (spec 5.2): a bearer JWT with sub, aud, exp, jti, htm and htb_s256. */
export async function signJwtWebhook(request: WebhookToSign, key: JwtSigningKey): Promise<SignedHeaders> {
  const headers = baseHeaders(request);
  const aud = key.audience ?? request.url;
  const sub = key.baseUrl ?? baseUrlOfEndpoint(aud);
  if (sub === undefined) throw new Error(`${aud} is not a webhook endpoint URL (…/api/v1/webhooks/incoming/<id>)`);
  const alg = key.alg ?? algorithmOfKey(key.privateKey);
  const now = Number(headers["Webhook-Timestamp"]);
  const jwt = await new SignJWT({
    htm: "POST",
    htb_s256: createHash("sha256").update(request.body).digest("base64url"),
  })
    .setProtectedHeader({ alg, kid: key.kid, typ: "JWT" })
    .setSubject(sub)
    .setAudience(aud)
    .setJti(headers["Webhook-Event-Id"])
    .setIssuedAt(now)
    .setExpirationTime(now + (key.lifetimeSeconds ?? 300))
    .sign(key.privateKey);
  return { ...headers, Authorization: `Bearer ${jwt}` };
}

function baseHeaders(request: WebhookToSign): SignedHeaders {
  return {
    "Content-Type": "application/json",
    "Webhook-Timestamp": String(request.timestamp ?? Math.floor(Date.now() / 1000)),
    "Webhook-Event-Id": request.eventId ?? randomUUID(),
  };
}

/** The JWS algorithm the spec pairs with a key: RS256, ES256 or EdDSA. */
export function algorithmOfKey(key: KeyObject): JwtAlgorithm {
  const type = key.asymmetricKeyType;
  switch (type) {
    case "rsa":
      return "RS256";
    case "ec":
      return "ES256";
    case "ed25519":
      return "EdDSA";
    default:
      throw new Error(`a ${String(type)} key cannot sign webhook JWTs; use RSA, EC P-256 or Ed25519`);
  }
}
