import { connect } from "node:net";

/** An HTTP/1.1 answer read off a raw socket. */
export interface RawAnswer {
  status: number;
  /** Lower-cased names; repeated headers joined with ", ". */
  headers: Record<string, string>;
  body: Buffer;
  /** Milliseconds from connecting to the socket closing (or the answer being complete). */
  ms: number;
}

export interface RawRequestOptions {
  /** Pause between the parts, to send a request slowly. */
  gapMs?: number;
  /** Half-close the connection after the last part (a body cut short). */
  endAfterSending?: boolean;
  /** Give up (and destroy the socket) after this long; the answer is then undefined. */
  timeoutMs?: number;
}

/**
 * Writes bytes fetch would refuse to send (control characters, duplicated or contradictory
 * headers, broken framing) to a raw TCP socket and reads the first response. Resolves undefined
 * when the server closed the connection without answering, or on the timeout.
 */
export function rawRequest(port: number, parts: (string | Buffer)[], options: RawRequestOptions = {}): Promise<RawAnswer | undefined> {
  const started = Date.now();
  return new Promise((resolve) => {
    const socket = connect(port, "127.0.0.1");
    const received: Buffer[] = [];
    let settled = false;
    const finish = () => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      resolve(parseAnswer(Buffer.concat(received), Date.now() - started));
    };
    const timer = setTimeout(finish, options.timeoutMs ?? 10_000);
    socket.on("data", (chunk: Buffer) => {
      received.push(chunk);
      if (answerComplete(Buffer.concat(received))) finish();
    });
    socket.on("error", finish);
    socket.on("close", finish);
    void (async () => {
      for (const [i, part] of parts.entries()) {
        if (i > 0 && options.gapMs !== undefined) await new Promise((r) => setTimeout(r, options.gapMs));
        if (socket.destroyed) return;
        socket.write(typeof part === "string" ? Buffer.from(part, "latin1") : part);
      }
      if (options.endAfterSending === true && !socket.destroyed) socket.end();
    })();
  });
}

function headerEnd(bytes: Buffer): number {
  return bytes.indexOf("\r\n\r\n");
}

function parseHead(head: string): { status: number; headers: Record<string, string> } | undefined {
  const [statusLine, ...lines] = head.split("\r\n");
  const match = /^HTTP\/1\.[01] (\d{3})/.exec(statusLine ?? "");
  if (match === null) return undefined;
  const headers: Record<string, string> = {};
  for (const line of lines) {
    const colon = line.indexOf(":");
    if (colon <= 0) continue;
    const name = line.slice(0, colon).trim().toLowerCase();
    const value = line.slice(colon + 1).trim();
    headers[name] = headers[name] === undefined ? value : `${headers[name]}, ${value}`;
  }
  return { status: Number(match[1]), headers };
}

/** True once the head and a Content-Length body (or the end of a chunked body) have arrived. */
function answerComplete(bytes: Buffer): boolean {
  const end = headerEnd(bytes);
  if (end === -1) return false;
  const head = parseHead(bytes.subarray(0, end).toString("latin1"));
  if (head === undefined) return true;
  const body = bytes.subarray(end + 4);
  const length = head.headers["content-length"];
  if (length !== undefined) return body.length >= Number(length);
  if (head.headers["transfer-encoding"] === "chunked") return body.includes("\r\n0\r\n\r\n") || body.subarray(0, 5).equals(Buffer.from("0\r\n\r\n"));
  return false;
}

function parseAnswer(bytes: Buffer, ms: number): RawAnswer | undefined {
  const end = headerEnd(bytes);
  if (end === -1) return undefined;
  const head = parseHead(bytes.subarray(0, end).toString("latin1"));
  if (head === undefined) return undefined;
  let body = bytes.subarray(end + 4);
  if (head.headers["transfer-encoding"] === "chunked") body = dechunk(body);
  else if (head.headers["content-length"] !== undefined) body = body.subarray(0, Number(head.headers["content-length"]));
  return { ...head, body, ms };
}

function dechunk(bytes: Buffer): Buffer {
  const out: Buffer[] = [];
  let at = 0;
  for (;;) {
    const lineEnd = bytes.indexOf("\r\n", at);
    if (lineEnd === -1) break;
    const size = parseInt(bytes.subarray(at, lineEnd).toString("latin1"), 16);
    if (!Number.isFinite(size) || size === 0) break;
    out.push(bytes.subarray(lineEnd + 2, lineEnd + 2 + size));
    at = lineEnd + 2 + size + 2;
  }
  return Buffer.concat(out);
}
