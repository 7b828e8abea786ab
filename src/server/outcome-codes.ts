import { Code, ConnectError } from "@connectrpc/connect";
import { codeFromString, codeToHttpStatus, codeToString } from "@connectrpc/connect/protocol-connect";
import type { NodeResponse } from "./node-http.js";

/**
 * A code's name as the JSON error shape and the metrics write it (`not_found`), and the HTTP
 * status Connect pairs with it (connectrpc.com/docs/protocol#error-codes): connect-es's own
 * tables, so accessd's refusals and connect-es's answers never disagree.
 */
export const codeName: (code: Code) => string = codeToString;
export const httpStatusOf: (code: Code) => number = codeToHttpStatus;

/** The code a Connect code name (`not_found`) stands for; Unknown for a name that is none. */
export function codeOfName(name: string): Code {
  // connect-es looks the name up on a plain object: "constructor" would find Object's.
  const code: unknown = codeFromString(name);
  return typeof code === "number" ? (code as Code) : Code.Unknown;
}

/**
 * The code an RPC that failed is logged and counted under: the one answered. Once its client went away (its request
 * signal aborted, not by a deadline) that is the reason the signal gives, `canceled` for a reset or a closed
 * connection, whatever error the handler met on its way out: connect-es reported a Watch stream
 * reset before its request message arrived as `unimplemented` ("missing input message").
 */
export function outcomeCodeName(error: unknown, signal: AbortSignal): string {
  // A response stream the client closed before its end (an HTTP/2 reset, a dropped session): its
  // going away can reach the handler as "Premature close" before the signal aborts.
  const prematureClose = (e: unknown): boolean => (e as { code?: unknown } | undefined)?.code === "ERR_STREAM_PREMATURE_CLOSE";
  if (prematureClose(error) || prematureClose((error as { cause?: unknown } | undefined)?.cause)) return codeName(Code.Canceled);
  if (signal.aborted) {
    const reason = ConnectError.from(signal.reason);
    // The client went away: `canceled`, whatever the reset's code said. connect-node's client
    // resets with INTERNAL_ERROR when its own deadline passes, which connect-es reads as
    // `internal`: a call the server never failed was counted internal and logged at error, and
    // any HTTP/2 client could write such lines (a soak: 58 in 3,680 calls with a 1 ms deadline).
    if (reason.code !== Code.DeadlineExceeded) return codeName(Code.Canceled);
    // A deadline that passed leaves the client there, answered the error the call ended with (a
    // call without a token and `connect-timeout-ms: 0` was told unauthenticated, counted
    // deadline_exceeded).
    if (!(error instanceof ConnectError)) return codeName(reason.code);
  }
  // connect-es answers anything but a ConnectError as `internal` ("internal error"), on every
  // protocol: counted so too (ConnectError.from calls it `unknown`, and the log and the metrics
  // said unknown where the client was told internal).
  return codeName(error instanceof ConnectError ? error.code : Code.Internal);
}

/** The code each response was answered with, where no interceptor saw it (see `answeredCodeOf`). */
const answeredCodes = new WeakMap<NodeResponse, string>();

/** Notes the outcome code of an answer that no interceptor counted (a refusal before the handler). */
export function noteAnsweredCode(res: NodeResponse, code: Code): void {
  answeredCodes.set(res, codeName(code));
}

/**
 * The outcome code of an answered response, for the metrics and the log of an answer no
 * interceptor saw: the code noted for it (`writeJsonError` notes every error it writes), `ok` for
 * a success, `canceled` when the answer was not `answered` in full (the client left), else
 * `unknown`.
 */
export function answeredCodeOf(res: NodeResponse, answered: boolean): string {
  const noted = answeredCodes.get(res);
  if (noted !== undefined) return noted;
  if (!answered) return "canceled";
  return res.statusCode >= 200 && res.statusCode < 300 ? "ok" : "unknown";
}
