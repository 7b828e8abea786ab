import { badRequest, type Rejection } from "./rejection.js";

/** Spec 8: Webhook-Timestamp must be within 5 minutes of the server time. */
export const timestampToleranceSeconds = 300;

/**
 * Stage 4a: a Unix time in whole seconds, at most 300 s before or after `nowMs`. Written as a
 * decimal integer without leading zeros (the signature covers the header's text, so one instant
 * has one spelling; with zeros allowed, `00<now>` passed and `000<now>` was too long).
 */
export function checkTimestamp(timestamp: string, nowMs: number): Rejection | undefined {
  if (!/^(0|[1-9]\d{0,11})$/.test(timestamp)) {
    return badRequest("timestamp_invalid", "Webhook-Timestamp must be a Unix time in seconds");
  }
  const skew = Number(timestamp) - Math.floor(nowMs / 1000);
  if (Math.abs(skew) > timestampToleranceSeconds) {
    const direction = skew < 0 ? "behind" : "ahead of";
    return badRequest(
      "timestamp_out_of_window",
      `Webhook-Timestamp is ${Math.abs(skew)} s ${direction} the server time; at most ${timestampToleranceSeconds} s is accepted`,
    );
  }
  return undefined;
}
