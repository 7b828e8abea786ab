import type { JsonValue } from "@bufbuild/protobuf";

/**
 * A lone UTF-16 surrogate: half a character, which JSON text can escape (`"\ud800"`) and a
 * JavaScript string holds, but UTF-8, and so protobuf's binary form, cannot. An execution holding
 * one read two ways: escaped over REST and Connect's JSON, U+FFFD over gRPC. protobuf-es refuses
 * one in a string field ("invalid UTF8"); a webhook body, an Execute context and a step output
 * holding one are refused too. (In `u` mode the class matches a surrogate only when it is alone.)
 */
export const loneSurrogate = /[\uD800-\uDFFF]/u;

/** True when a string or an object key anywhere in `value` holds a lone surrogate. */
export function holdsLoneSurrogate(value: JsonValue): boolean {
  if (typeof value === "string") return loneSurrogate.test(value);
  if (Array.isArray(value)) return value.some(holdsLoneSurrogate);
  if (value === null || typeof value !== "object") return false;
  return Object.entries(value).some(([key, item]) => loneSurrogate.test(key) || holdsLoneSurrogate(item));
}
