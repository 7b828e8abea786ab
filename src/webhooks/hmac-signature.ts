import { createHmac, createSecretKey, timingSafeEqual, type KeyObject } from "node:crypto";
import { unauthenticated, type Rejection } from "./rejection.js";

/** At most this many of the signatures given are looked at (rotation needs two). */
const maxSignatures = 8;
/** base64url of a SHA-256 digest, without padding. */
const signatureShape = /^[A-Za-z0-9_-]{43}$/;

/** Spec 5.2: the key is the secret text exactly as given (not base64-decoded). */
export function hmacKey(secret: string): KeyObject {
  return createSecretKey(Buffer.from(secret, "utf8"));
}

/** HMAC-SHA256 over `<timestamp>.<event_id>.<raw body>`, raw digest. */
export function hmacDigest(key: KeyObject, timestamp: string, eventId: string, body: Uint8Array): Buffer {
  return createHmac("sha256", key).update(`${timestamp}.${eventId}.`).update(body).digest();
}

/** The Webhook-Signature value for a request: base64url without padding. */
export function hmacSignature(secret: string | KeyObject, timestamp: string, eventId: string, body: Uint8Array): string {
  const key = typeof secret === "string" ? hmacKey(secret) : secret;
  return hmacDigest(key, timestamp, eventId, body).toString("base64url");
}

/**
 * Stage 6 for HMAC listeners: any of the signatures given matches any of the listener's valid
 * secrets (the current one and, during a rotation's grace period, the previous one). Several are
 * separated by spaces, or sent as several header lines, which HTTP folds into one value with
 * commas (so their order does not matter). Digests are compared in constant time.
 */
export function verifyHmacSignature(
  keys: readonly KeyObject[],
  header: string | undefined,
  timestamp: string,
  eventId: string,
  body: Uint8Array,
): Rejection | undefined {
  if (header === undefined || header.trim() === "") {
    return unauthenticated("signature_missing", "Webhook-Signature is required for this listener");
  }
  const given = header
    .split(/[ ,]/)
    .filter((s) => s !== "")
    .slice(0, maxSignatures)
    .filter((s) => signatureShape.test(s))
    .map((s) => Buffer.from(s, "base64url"));
  const expected = keys.map((key) => hmacDigest(key, timestamp, eventId, body));
  let matched = false;
  for (const signature of given) {
    for (const digest of expected) {
      if (signature.length === digest.length && timingSafeEqual(signature, digest)) matched = true;
    }
  }
  return matched ? undefined : unauthenticated("signature_mismatch", "Webhook-Signature does not match the request");
}
