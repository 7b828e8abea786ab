import type { NodeRequest } from "./node-http.js";

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
  // Not destroyed when the cap stops the loop: that reset the connection before the 413 could be
  // read (HTTP/1.1) or did nothing to the stream (HTTP/2); the rest is discarded once the answer
  // is sent (request-deadline.ts).
  for await (const chunk of req.iterator({ destroyOnReturn: false }) as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > limit) throw new BodyTooLargeError(limit);
    chunks.push(chunk);
  }
  return chunks.length === 1 && chunks[0] !== undefined ? chunks[0] : Buffer.concat(chunks, size);
}

/**
 * Reads the request body and throws it away, at most `limit` bytes (what is left the request
 * deadline's discard takes once the answer is out): for a request refused before its body is
 * decoded, whose client is still sending it. Over HTTP/2 an answer given while the body is still
 * coming can reach a gRPC client as a reset stream, not as the answer.
 */
export async function discardBody(req: NodeRequest, limit: number): Promise<void> {
  let size = 0;
  for await (const chunk of req.iterator({ destroyOnReturn: false }) as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > limit) return;
  }
}

const fatalUtf8 = new TextDecoder("utf-8", { fatal: true });

/**
 * A body's text, or undefined when its bytes are no UTF-8 (a decoder that is not fatal makes them
 * U+FFFD, and a Latin-1 "Café" was stored as "Caf\uFFFD"). A leading byte order mark is dropped,
 * as connect-es's decoder drops it (RFC 8259 8.1 lets a parser ignore it).
 */
export function utf8Text(bytes: Uint8Array): string | undefined {
  try {
    return fatalUtf8.decode(bytes);
  } catch {
    return undefined;
  }
}

/** What a 415 for a compressed body adds (RFC 9110 15.5.16: the codings that are accepted). */
export const identityOnlyHeaders: Readonly<Record<string, string>> = { "accept-encoding": "identity" };

/**
 * The `Content-Encoding` a request names when it is not `identity` (case and spaces aside), else
 * undefined. Every route reads bodies as sent: a compressed one would be read as garbage (REST,
 * the token endpoint) or signed over the compressed bytes (webhooks), so each refuses it by name.
 */
export function unsupportedContentEncoding(header: string | readonly string[] | undefined): string | undefined {
  const encoding = (typeof header === "string" ? header : header?.join(", "))?.trim();
  return encoding === undefined || encoding === "" || encoding.toLowerCase() === "identity" ? undefined : encoding;
}

/** The refusal's message for `unsupportedContentEncoding`'s answer. */
export const compressedBodyMessage = (encoding: string) => `Content-Encoding ${encoding} is not supported: send the body uncompressed`;

/**
 * The `charset` a JSON `Content-Type` declares when it is not UTF-8 (or its subset US-ASCII),
 * else undefined. JSON between systems is UTF-8 (RFC 8259 8.1) and every route reads it so: a
 * body declared `charset=iso-8859-1` or `utf-16` would be read as something else than its sender
 * meant, so it is refused by name, as Connect's own JSON decoding refuses it.
 */
export function nonUtf8Charset(contentType: string): string | undefined {
  for (const parameter of contentType.split(";").slice(1)) {
    const equals = parameter.indexOf("=");
    if (equals < 0 || parameter.slice(0, equals).trim().toLowerCase() !== "charset") continue;
    const charset = parameter.slice(equals + 1).trim().replace(/^"(.*)"$/, "$1");
    return /^(utf-?8|us-ascii)$/i.test(charset) ? undefined : charset;
  }
  return undefined;
}
