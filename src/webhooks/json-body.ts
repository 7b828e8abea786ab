import type { JsonValue } from "@bufbuild/protobuf";
import { maxJsonDepth, membersIn, scanJsonText } from "../automations/json-depth.js";
import { holdsLoneSurrogate } from "../automations/lone-surrogate.js";
import { utf8Text } from "../server/read-body.js";
import { badRequest, type Rejection } from "./rejection.js";

/** Stage 7: the body is UTF-8 JSON nested at most maxJsonDepth levels, no name twice in one object; any such value becomes ctx.trigger. */
export function parseJsonBody(body: Uint8Array): JsonValue | Rejection {
  const text = utf8Text(body);
  if (text === undefined) return badRequest("body_not_json", "the body is not valid JSON");
  const shape = scanJsonText(text, maxJsonDepth);
  if (shape.deeperThanLimit) {
    return badRequest("body_too_deep", `the body nests arrays and objects deeper than ${maxJsonDepth} levels`);
  }
  let value: JsonValue;
  try {
    value = JSON.parse(text) as JsonValue;
  } catch {
    return badRequest("body_not_json", "the body is not valid JSON");
  }
  // A name given twice in one object: JSON.parse keeps the last, another parser (the sender's
  // own checks, say) the first; what was signed would then be read two ways. Refused, as the
  // API refuses it.
  if (shape.members !== 0 && membersIn(value) !== shape.members) {
    return badRequest("body_duplicate_key", "the body gives a name twice in one object (RFC 8259: names should be unique; readers disagree on which counts)");
  }
  if (mayOverflow.test(text) && holdsNonFiniteNumber(value)) {
    return badRequest("body_number_out_of_range", "the body holds a number beyond the range of a double (about ±1.8e308)");
  }
  // Valid UTF-8 holds no surrogate: only a \uD800-\uDFFF escape can make one, so only a body
  // with such an escape is walked.
  if (surrogateEscape.test(text) && holdsLoneSurrogate(value)) {
    return badRequest("body_lone_surrogate", "the body escapes half a character: a \\uD800-\\uDFFF escape that is not one of a pair");
  }
  return value;
}

const surrogateEscape = /\\u[dD][89a-fA-F]/;

/**
 * What a number beyond a double's range needs in its text: an exponent of three digits or more,
 * or 309 digits in a row. JSON.parse makes such a number ±Infinity, which the automation would see
 * while the stored trigger (JSON) says `null`: an execution resumed after a restart would see
 * other data. Cheap to test on the text; only a body that matches is walked. The lookbehind makes
 * a run of digits tried once, from its start: without it, a 64 KB body of 308-digit runs took
 * 28 ms to test (each position of a run tried again), 0.5 ms with it (JSON.parse: 0.08 ms).
 */
const mayOverflow = /[eE]\+?0*[1-9]\d{2}|(?<!\d)\d{309}/;

function holdsNonFiniteNumber(value: JsonValue): boolean {
  if (typeof value === "number") return !Number.isFinite(value);
  if (value === null || typeof value !== "object") return false;
  for (const item of Array.isArray(value) ? value : Object.values(value)) {
    if (holdsNonFiniteNumber(item)) return true;
  }
  return false;
}
