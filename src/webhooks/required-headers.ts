import { compressedBodyMessage, nonUtf8Charset, unsupportedContentEncoding } from "../server/read-body.js";
import { badRequest, type Rejection } from "./rejection.js";

/** Request headers by lower-case name, as node:http and node:http2 give them. */
export type HeaderMap = Readonly<Record<string, string | string[] | undefined>>;

export interface WebhookHeaders {
  timestamp: string;
  eventId: string;
}

/**
 * Stage 3: `Content-Type: application/json`, `Webhook-Timestamp` and `Webhook-Event-Id` are
 * present, and the body is not compressed (`Content-Encoding` absent or `identity`): the signature
 * and the JSON are of the body as sent, so a gzipped one failed later as "not valid JSON" or a
 * signature mismatch, and a plain body labelled gzip was accepted.
 */
export function requireHeaders(headers: HeaderMap): WebhookHeaders | Rejection {
  const encoding = unsupportedContentEncoding(headers["content-encoding"]);
  if (encoding !== undefined) return badRequest("content_encoding_not_supported", compressedBodyMessage(JSON.stringify(encoding)));
  const contentType = single(headers["content-type"]);
  if (contentType === undefined) {
    return badRequest("content_type_missing", "Content-Type is required and must be application/json");
  }
  const mediaType = contentType.split(";", 1)[0]?.trim().toLowerCase();
  if (mediaType !== "application/json") {
    return badRequest("content_type_not_json", `Content-Type must be application/json, not ${JSON.stringify(contentType)}`);
  }
  const charset = nonUtf8Charset(contentType);
  if (charset !== undefined) {
    return badRequest("content_type_not_json", `the body is read as UTF-8 JSON: charset=${JSON.stringify(charset)} is not taken`);
  }
  const timestamp = single(headers["webhook-timestamp"]);
  if (timestamp === undefined) return badRequest("timestamp_missing", "Webhook-Timestamp is required");
  const eventId = single(headers["webhook-event-id"]);
  if (eventId === undefined) return badRequest("event_id_missing", "Webhook-Event-Id is required");
  return { timestamp, eventId };
}

function single(value: string | string[] | undefined): string | undefined {
  const text = Array.isArray(value) ? value.join(",") : value;
  return text === undefined || text.trim() === "" ? undefined : text.trim();
}

/** One header's value; repeated headers are joined as HTTP folds them. */
export function headerValue(headers: HeaderMap, name: string): string | undefined {
  const value = headers[name];
  return Array.isArray(value) ? value.join(", ") : value;
}
