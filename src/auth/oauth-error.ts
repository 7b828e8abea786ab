import type { NodeResponse } from "../server/node-http.js";

/**
 * RFC 6749 section 5.2 error codes, plus RFC 8628's `slow_down` for the brute-force limiter and
 * RFC 6749's `temporarily_unavailable` (section 4.1.2.1) for a failing store.
 */
export const oauthErrorCodes = ["invalid_request", "invalid_client", "unsupported_grant_type", "slow_down", "temporarily_unavailable"] as const;

export type OAuthErrorCode = (typeof oauthErrorCodes)[number];

/** A token-endpoint failure, answered as `{"error", "error_description"}`. */
export class OAuthError extends Error {
  /** What the server log says; more precise than `description` where the caller is told less. */
  readonly logReason: string;

  constructor(
    readonly error: OAuthErrorCode,
    readonly description: string,
    readonly status: number = statusOf(error),
    readonly headers: Record<string, string> = {},
    logReason?: string,
  ) {
    super(`${error}: ${description}`);
    this.name = "OAuthError";
    this.logReason = logReason ?? description;
  }
}

/**
 * invalid_client whose description is the same for several causes on purpose (an unknown client
 * answers like a wrong credential, so client ids cannot be probed); `logReason` names the cause
 * for the operator.
 */
export function invalidClient(description: string, logReason: string = description): OAuthError {
  return new OAuthError("invalid_client", description, statusOf("invalid_client"), {}, logReason);
}

function statusOf(error: OAuthErrorCode): number {
  switch (error) {
    case "invalid_client":
      return 401;
    case "slow_down":
      return 429;
    case "temporarily_unavailable":
      return 503;
    default:
      return 400;
  }
}

/** Token responses must never be cached (RFC 6749 section 5.1). */
export const noStoreHeaders = { "cache-control": "no-store", pragma: "no-cache" } as const;

export function writeOAuthJson(res: NodeResponse, status: number, value: unknown, headers: Record<string, string> = {}): void {
  const body = JSON.stringify(value);
  res.writeHead(status, {
    ...headers,
    ...noStoreHeaders,
    "content-type": "application/json",
    "content-length": Buffer.byteLength(body),
  });
  res.end(body);
}

export function writeOAuthError(res: NodeResponse, e: OAuthError): void {
  writeOAuthJson(res, e.status, { error: e.error, error_description: e.description }, e.headers);
}
