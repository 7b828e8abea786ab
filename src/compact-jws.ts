/**
 * True when `token` is a JWS in compact serialization spelled the one way RFC 7515 7.1 allows:
 * three base64url parts without padding, each as its bytes encode (the last character's unused
 * bits zero). jose decodes `=`, `+`, `/` and such bits too, so without this a token had other
 * spellings that were accepted alike: a rule that blocks or searches for a leaked token's exact
 * text misses them.
 */
export function isCanonicalCompactJws(token: string): boolean {
  const parts = token.split(".");
  return parts.length === 3 && parts.every((part) => /^[A-Za-z0-9_-]*$/.test(part) && Buffer.from(part, "base64url").toString("base64url") === part);
}
