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

/** What a single pass over a JSON text finds (scanJsonText). */
export interface JsonTextShape {
  /** Arrays and objects nest deeper than the limit given (the pass stopped there). */
  deeperThanLimit: boolean;
  /** Object members written: colons outside strings (in valid JSON each follows a member's name). */
  members: number;
}

/**
 * One pass over a JSON text that skips string contents: how deep it nests (against `limit`) and
 * how many object members it writes. It does not validate (JSON.parse does that afterwards).
 * Fewer members in the parsed value than written (membersIn) means a name given twice in one
 * object, which JSON.parse takes silently, keeping the last.
 */
export function scanJsonText(text: string, limit: number): JsonTextShape {
  let depth = 0;
  let members = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++; // backslash: skip the escaped character
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) {
      inString = true;
    } else if (c === 0x3a) {
      members++;
    } else if (c === 0x5b || c === 0x7b) {
      if (++depth > limit) return { deeperThanLimit: true, members };
    } else if (c === 0x5d || c === 0x7d) {
      depth--;
    }
  }
  return { deeperThanLimit: false, members };
}

/**
 * How many members the objects of a parsed JSON value hold, at every depth. Recursive: for a
 * value whose text scanJsonText found within a depth limit (a deeper one, which JSON.parse takes
 * to 200,000 levels, runs out of stack: a RangeError).
 */
export function membersIn(value: unknown): number {
  if (value === null || typeof value !== "object") return 0;
  let members = 0;
  if (Array.isArray(value)) {
    for (const item of value) members += membersIn(item);
    return members;
  }
  for (const key in value) {
    if (Object.hasOwn(value, key)) members += 1 + membersIn((value as Record<string, unknown>)[key]);
  }
  return members;
}
