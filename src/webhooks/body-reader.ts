import { Rejection, badRequest } from "./rejection.js";

/** Spec 8: at most 64 KB; 65,536 bytes pass, one more is refused. */
export const maxWebhookBodyBytes = 64 * 1024;

export interface BodySource extends AsyncIterable<Buffer> {
  /** The Content-Length header, if any. */
  readonly declaredLength: number | undefined;
}

export interface ReadBody {
  body: Buffer;
}

/**
 * Stage 5: the raw body bytes, with a hard cap. A declared length over the cap is refused before
 * reading; otherwise reading stops at the first chunk that crosses it, so no more than one chunk
 * past the cap is ever held.
 */
export async function readCappedBody(source: BodySource, limit = maxWebhookBodyBytes): Promise<ReadBody | Rejection> {
  if (source.declaredLength !== undefined && source.declaredLength > limit) return tooLarge(limit);
  const chunks: Buffer[] = [];
  let size = 0;
  try {
    for await (const chunk of source) {
      size += chunk.length;
      if (size > limit) return tooLarge(limit);
      chunks.push(chunk);
    }
  } catch {
    return badRequest("body_incomplete", "the request body ended early");
  }
  const body = chunks.length === 1 && chunks[0] !== undefined ? chunks[0] : Buffer.concat(chunks, size);
  return { body };
}

function tooLarge(limit: number): Rejection {
  return new Rejection(413, "body_too_large", `the body is larger than ${limit} bytes`);
}
