/**
 * Webhook bodies may nest at most this deep. The body becomes ctx.trigger and is stored, listed
 * as a google.protobuf.Value (protobuf-es decodes at most 100 levels) and serialised recursively,
 * so deeper bodies (64 KB of `[` is 65,536 levels) must be refused before anything stores them.
 */
export const maxJsonDepth = 64;

/**
 * True when the JSON text nests arrays and objects deeper than `limit`. A single pass over the
 * text that skips string contents; it does not validate (JSON.parse does that afterwards).
 */
export function nestsDeeperThan(text: string, limit: number): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++; // backslash: skip the escaped character
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) {
      inString = true;
    } else if (c === 0x5b || c === 0x7b) {
      if (++depth > limit) return true;
    } else if (c === 0x5d || c === 0x7d) {
      depth--;
    }
  }
  return false;
}
