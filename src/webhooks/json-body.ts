import type { JsonValue } from "@bufbuild/protobuf";
import { maxJsonDepth, nestsDeeperThan } from "./json-depth.js";
import { badRequest, type Rejection } from "./rejection.js";

const utf8 = new TextDecoder("utf-8", { fatal: true });

/** Stage 7: the body is UTF-8 JSON nested at most 64 levels; any such value becomes ctx.trigger. */
export function parseJsonBody(body: Uint8Array): JsonValue | Rejection {
  let text: string;
  try {
    text = utf8.decode(body);
  } catch {
    return badRequest("body_not_json", "the body is not valid JSON");
  }
  if (nestsDeeperThan(text, maxJsonDepth)) {
    return badRequest("body_too_deep", `the body nests arrays and objects deeper than ${maxJsonDepth} levels`);
  }
  try {
    return JSON.parse(text) as JsonValue;
  } catch {
    return badRequest("body_not_json", "the body is not valid JSON");
  }
}
