import { Code } from "@connectrpc/connect";

/** The statuses the webhook endpoint answers a refused request with (spec 7.1, plus 408 and 413). */
export type RejectionStatus = 400 | 401 | 403 | 404 | 408 | 409 | 413;

const codeOfStatus: Record<RejectionStatus, Code> = {
  400: Code.InvalidArgument,
  401: Code.Unauthenticated,
  403: Code.PermissionDenied,
  404: Code.NotFound,
  408: Code.DeadlineExceeded,
  409: Code.AlreadyExists,
  413: Code.ResourceExhausted,
};

/**
 * A stage's verdict against a request: the HTTP status, a stable machine-readable reason for the
 * delivery log (`signature_mismatch`, `jwt_claim_aud`, ...) and a message that tells the sender
 * precisely what to fix. Never carries a secret or the body.
 */
export class Rejection {
  readonly code: Code;

  constructor(
    readonly status: RejectionStatus,
    readonly reason: string,
    readonly message: string,
  ) {
    this.code = codeOfStatus[status];
  }
}

export const badRequest = (reason: string, message: string) => new Rejection(400, reason, message);
export const unauthenticated = (reason: string, message: string) => new Rejection(401, reason, message);
