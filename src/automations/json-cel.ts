import { toJson, type JsonValue } from "@bufbuild/protobuf";
import { isReflectMessage } from "@bufbuild/protobuf/reflect";
import { celType, isCelList, isCelMap, isCelType, isCelUint, type CelInput, type CelValue } from "@bufbuild/cel";

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
 * CEL -> JSON, for step outputs: ints and uints become numbers when they fit exactly and decimal
 * strings otherwise, bytes base64, timestamps and durations their proto3 JSON, types their name,
 * non-finite doubles their name ("NaN", "Infinity").
 */
export function celToJson(value: CelValue): JsonValue {
  if (value === null || typeof value === "string" || typeof value === "boolean") return value;
  if (typeof value === "number") return Number.isFinite(value) ? value : String(value);
  if (typeof value === "bigint") return bigintToJson(value);
  if (isCelUint(value)) return bigintToJson(value.value);
  if (value instanceof Uint8Array) return Buffer.from(value).toString("base64");
  if (isCelList(value)) return [...value].map(celToJson);
  if (isCelMap(value)) {
    const object: Record<string, JsonValue> = {};
    for (const [key, item] of value) object[isCelUint(key) ? key.value.toString() : String(key)] = celToJson(item);
    return object;
  }
  if (isCelType(value)) return value.name;
  if (isReflectMessage(value)) return toJson(value.desc, value.message);
  return String(value);
}

/** The CEL type of a value, for messages such as "got double". */
export function celTypeName(value: CelValue): string {
  return celType(value).toString();
}

function bigintToJson(n: bigint): JsonValue {
  return n >= BigInt(Number.MIN_SAFE_INTEGER) && n <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(n) : n.toString();
}
