/**
 * The deepest JSON an execution may hold, as its trigger (a webhook body, an Execute context) or
 * as a step's output: arrays and objects nested at most this many levels.
 *
 * Executions are answered as google.protobuf.Value, and protobuf decoders stop at 100 nested
 * messages (protobuf-es, Java, C++), each JSON level costing two (a Value and its Struct or
 * ListValue) below the response and the execution (and a step record). At 64 levels, the limit
 * before, a webhook body was accepted and stored, and then its execution could not be read by a
 * gRPC client of protobuf-es or Java ("maximum recursion depth of 100 reached"); 48 levels read in
 * every one. Deeper bodies (64 KB of `[` is 65,536 levels) must be refused before anything stores
 * them.
 */
export const maxJsonDepth = 48;

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
