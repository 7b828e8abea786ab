import type { NodeRequest } from "./json-error.js";

export class BodyTooLargeError extends Error {
  constructor(readonly limit: number) {
    super(`request body is larger than ${limit} bytes`);
    this.name = "BodyTooLargeError";
  }
}

/**
 * Reads the whole request body, refusing early (from Content-Length) or as soon as more than
 * `limit` bytes have arrived, so an oversized body is never buffered past the cap.
 */
export async function readBody(req: NodeRequest, limit: number): Promise<Buffer> {
  const declared = Number(req.headers["content-length"]);
  if (Number.isFinite(declared) && declared > limit) throw new BodyTooLargeError(limit);
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > limit) throw new BodyTooLargeError(limit);
    chunks.push(chunk);
  }
  return chunks.length === 1 && chunks[0] !== undefined ? chunks[0] : Buffer.concat(chunks, size);
}
