import type { JsonValue } from "@bufbuild/protobuf";
import { badRequest, type Rejection } from "./rejection.js";

const utf8 = new TextDecoder("utf-8", { fatal: true });

/** Stage 7: the body is UTF-8 JSON; any JSON value is accepted and becomes ctx.trigger. */
export function parseJsonBody(body: Uint8Array): JsonValue | Rejection {
  try {
    return JSON.parse(utf8.decode(body)) as JsonValue;
  } catch {
    return badRequest("body_not_json", "the body is not valid JSON");
  }
}
