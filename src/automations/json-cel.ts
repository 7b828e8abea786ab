import { toJson, type JsonValue } from "@bufbuild/protobuf";
import { isReflectMessage } from "@bufbuild/protobuf/reflect";
import { celType, isCelList, isCelMap, isCelType, isCelUint, type CelInput, type CelValue } from "@bufbuild/cel";
import { maxJsonDepth } from "./json-depth.js";
import { loneSurrogate } from "./lone-surrogate.js";

/**
 * JSON -> CEL, the mapping of google.protobuf.Value: objects become maps with string keys,
 * arrays lists, numbers doubles; strings, booleans and null stay. Objects are turned into Map
 * explicitly, so a body with a `$typeName` key is data, never mistaken for a protobuf message.
 */
export function jsonToCel(value: JsonValue): CelInput {
  if (Array.isArray(value)) return value.map(jsonToCel);
  if (value !== null && typeof value === "object") {
    const map = new Map<string, CelInput>();
    for (const [key, item] of Object.entries(value)) map.set(key, jsonToCel(item));
    return map;
  }
  return value;
}

/**
 * The most characters of JSON (counted as they are built: strings as JSON writes them, escapes
 * in full; about 8 for each number, bracket and comma) that the step outputs of one execution may hold together: the API's request-body limit, so a log step can echo any trigger.
 * Per step it was not enough: 40 x 40 references to a 60 KB string made a 96 MB output, and 100
 * steps of 1 MiB each a 100 MB execution, answered to every Get and read whole by the listing
 * that held it (25 such executions in a page exhausted the heap).
 */
export const maxExecutionOutputChars = 1024 * 1024;

/** A value a step produced that cannot be its output (the step fails with its message). */
export class OutputError extends Error {}

/** A step output past what is left of maxExecutionOutputChars. */
export class OutputTooLargeError extends OutputError {
  constructor(left: number) {
    super(
      `the output would take the execution's step outputs past ${maxExecutionOutputChars} characters of JSON in all (${left} were left)`,
    );
    this.name = "OutputTooLargeError";
  }
}

/** A CEL map whose keys of different types are one JSON key (`{true: 1, "true": 2}`): JSON would keep one silently. */
export class OutputKeyClashError extends OutputError {
  constructor(key: string) {
    super(`the output's map has two keys written "${key}" in JSON (keys of different types, such as true and "true")`);
    this.name = "OutputKeyClashError";
  }
}

/** A step output nested deeper than an execution may hold (maxJsonDepth). */
export class OutputTooDeepError extends OutputError {
  constructor() {
    super(`the output nests lists and maps deeper than ${maxJsonDepth} levels`);
    this.name = "OutputTooDeepError";
  }
}

/**
 * CEL -> JSON, for step outputs: ints and uints become numbers when they fit exactly and decimal
 * strings otherwise, bytes base64, timestamps and durations their proto3 JSON, types their name,
 * non-finite doubles their name ("NaN", "Infinity"). Throws OutputTooLargeError past `maxChars`
 * (what is left of the execution's maxExecutionOutputChars), OutputTooDeepError past maxJsonDepth.
 */
export function celToJson(value: CelValue, maxChars = maxExecutionOutputChars): JsonValue {
  const budget: Budget = { chars: maxChars, depth: 0 };
  try {
    return toJsonWithin(value, budget);
  } catch (e) {
    if (e instanceof OutputTooLargeError) throw new OutputTooLargeError(maxChars);
    throw e;
  }
}

/** The characters a JSON value counts against maxExecutionOutputChars (the measure celToJson uses). */
export function outputChars(json: JsonValue): number {
  let chars = typeof json === "string" ? jsonStringChars(json) + 1 : 8;
  if (Array.isArray(json)) {
    for (const item of json) chars += outputChars(item);
  } else if (json !== null && typeof json === "object") {
    for (const [key, item] of Object.entries(json)) chars += jsonStringChars(key) + 1 + outputChars(item);
  }
  return chars;
}

/** Needs JSON escaping: a quote, a backslash, a control character, half of a surrogate pair (maybe lone). */
const escapedInJson = /["\\\u0000-\u001f\ud800-\udfff]/;

/**
 * The characters JSON.stringify writes for `text`, quotes included: `\n` is 2, `\u0001` 6, a lone
 * surrogate 6 (counting the string's length instead let 60,000 control characters, 6 each in
 * JSON, pass for 60,000, and an execution's outputs reach 6 MB).
 */
function jsonStringChars(text: string): number {
  if (!escapedInJson.test(text)) return text.length + 2;
  let chars = 2;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22 || c === 0x5c || c === 0x08 || c === 0x09 || c === 0x0a || c === 0x0c || c === 0x0d) chars += 2;
    else if (c < 0x20) chars += 6;
    else if (c >= 0xd800 && c <= 0xdbff && (text.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
      chars += 2; // a pair, written as it is
      i++;
    } else if (c >= 0xd800 && c <= 0xdfff) chars += 6;
    else chars += 1;
  }
  return chars;
}

/** What is left of an output's characters, and how deep the conversion is now. */
interface Budget {
  chars: number;
  depth: number;
}

/** A step output holding a lone UTF-16 surrogate (lone-surrogate.ts), in a string or a key. */
export class OutputLoneSurrogateError extends OutputError {
  constructor(where: string) {
    super(`the output's ${where} holds half a character (a lone UTF-16 surrogate), which no UTF-8 can carry`);
  }
}

function toJsonWithin(value: CelValue, budget: Budget): JsonValue {
  const json = convert(value, budget);
  if (typeof json === "string" && escapedInJson.test(json) && loneSurrogate.test(json)) throw new OutputLoneSurrogateError("string");
  // Strings count as JSON writes them, everything else a few characters (a number, a bracket, a comma).
  budget.chars -= typeof json === "string" ? jsonStringChars(json) + 1 : 8;
  if (budget.chars < 0) throw new OutputTooLargeError(0);
  return json;
}

function convert(value: CelValue, budget: Budget): JsonValue {
  if (value === null || typeof value === "string" || typeof value === "boolean") return value;
  if (typeof value === "number") return Number.isFinite(value) ? value : String(value);
  if (typeof value === "bigint") return bigintToJson(value);
  if (isCelUint(value)) return bigintToJson(value.value);
  if (value instanceof Uint8Array) return Buffer.from(value).toString("base64");
  if (isCelList(value)) {
    enterContainer(budget);
    const list: JsonValue[] = [];
    for (const item of value) list.push(toJsonWithin(item, budget));
    budget.depth--;
    return list;
  }
  if (isCelMap(value)) {
    enterContainer(budget);
    // No prototype: a key such as "__proto__" is a key like any other (on a plain object, setting
    // it replaced the prototype and the key was lost from the output).
    const object = Object.create(null) as Record<string, JsonValue>;
    for (const [key, item] of value) {
      const name = isCelUint(key) ? key.value.toString() : String(key);
      if (Object.hasOwn(object, name)) throw new OutputKeyClashError(name);
      if (loneSurrogate.test(name)) throw new OutputLoneSurrogateError("map key");
      budget.chars -= jsonStringChars(name) + 1;
      object[name] = toJsonWithin(item, budget);
    }
    budget.depth--;
    return object;
  }
  if (isCelType(value)) return value.name;
  if (isReflectMessage(value)) {
    try {
      return toJson(value.desc, value.message);
    } catch (e) {
      // A message CEL built with fields its JSON form cannot take: a Duration of 2e9 nanos, a
      // Timestamp past year 9999 (protobuf-es threw a RangeError, which failed the execution as
      // an internal error).
      const why = e instanceof RangeError ? "a field is out of range" : e instanceof Error ? e.message : String(e);
      throw new OutputError(`the output's ${value.desc.typeName} cannot be written as JSON: ${why}`);
    }
  }
  return String(value);
}

function enterContainer(budget: Budget): void {
  if (++budget.depth > maxJsonDepth) throw new OutputTooDeepError();
}

/** The CEL type of a value, for messages such as "got double". */
/** "a string", "an int", "null" */
export function aValueOf(value: CelValue): string {
  if (value === null) return "null";
  const type = celTypeName(value);
  return `${/^[aeiou]/.test(type) ? "an" : "a"} ${type}`;
}

export function celTypeName(value: CelValue): string {
  return celType(value).toString();
}

function bigintToJson(n: bigint): JsonValue {
  return n >= BigInt(Number.MIN_SAFE_INTEGER) && n <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(n) : n.toString();
}
