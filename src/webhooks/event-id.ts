import { badRequest, type Rejection } from "./rejection.js";

const uuidV4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/i;

/**
 * Stage 4b: Webhook-Event-Id is a UUID v4 (version 4, RFC 4122 variant). Returns it in lower case,
 * the form it is recorded under, so that `A1B2...` and `a1b2...` are the same event.
 */
export function checkEventId(eventId: string): string | Rejection {
  if (!uuidV4.test(eventId)) return badRequest("event_id_invalid", "Webhook-Event-Id must be a UUID v4");
  return eventId.toLowerCase();
}
