import { createHmac, createSecretKey, timingSafeEqual, type KeyObject } from "node:crypto";
import { unauthenticated, type Rejection } from "./rejection.js";

/** At most this many of the signatures given are looked at (rotation needs two). */
const maxSignatures = 8;
/**
 * base64url of a SHA-256 digest, without padding, spelled canonically: the 43rd character
 * carries the digest's last 4 bits and two zero bits, so it is one of 16 (another one decoded to
 * the same digest, and was a second spelling of a valid signature).
 */
const signatureShape = /^[A-Za-z0-9_-]{42}[AEIMQUYcgkosw048]$/;

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
  const values = header
    .split(/[ ,]/)
    .filter((s) => s !== "")
    .slice(0, maxSignatures);
  const given = values.filter((s) => signatureShape.test(s)).map((s) => Buffer.from(s, "base64url"));
  if (given.length === 0) {
    // None is a digest in the spec's spelling: say so, rather than "does not match", which
    // sends the sender looking for a wrong key or a wrong body.
    return unauthenticated(
      "signature_malformed",
      `Webhook-Signature must be the HMAC-SHA256 digest in base64url without padding (43 characters of A-Z, a-z, 0-9, - and _): ${spellingMistake(values[0] ?? "")}`,
    );
  }
  const expected = keys.map((key) => hmacDigest(key, timestamp, eventId, body));
  let matched = false;
  for (const signature of given) {
    for (const digest of expected) {
      if (signature.length === digest.length && timingSafeEqual(signature, digest)) matched = true;
    }
  }
  return matched ? undefined : unauthenticated("signature_mismatch", "Webhook-Signature does not match the request");
}

/** What is wrong with the spelling of a signature value, in a few words (the value itself is not repeated). */
function spellingMistake(value: string): string {
  if (/^[0-9a-fA-F]{64}$/.test(value)) return "got 64 hexadecimal digits (encode the digest's bytes as base64url instead)";
  if (/^[A-Za-z0-9]+=[^=]/.test(value)) return `got a prefix (${value.slice(0, value.indexOf("=") + 1)}) before the digest: send the digest alone`;
  if (value.includes("=")) return `got ${value.length} characters with = padding (leave the padding out)`;
  if (/[+/]/.test(value)) return `got ${value.length} characters with + or / (standard base64: use - and _ instead)`;
  if (value.length !== 43) return `got ${value.length} characters`;
  if (/^[A-Za-z0-9_-]+$/.test(value)) return "its last character is not one that ends the base64url of a 32-byte digest";
  return "got characters outside base64url";
}
