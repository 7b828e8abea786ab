/**
 * An open-loop HTTP/1.1 load generator for latency at a given rate (the webhooks bench's
 * half-load phases): every millisecond, the requests due by then go out, each on an idle
 * keep-alive connection, never waiting for earlier answers. Each latency runs from the moment
 * its request was due, so a stall delays the requests behind it and shows (no coordinated
 * omission). autocannon's `overallRate` is no substitute: it sends each second's budget back to
 * back and then waits, which measures bursts at full speed, not the rate.
 *
 * The connections are opened, and each carries one request, before the clock starts: a
 * measurement of steady load, as wrk2 and other rate-based generators make it. Opening them on
 * demand put the TCP handshakes, the server's first request on each connection and the growth of
 * the pool into the first phase's tail (a first phase opened 182-261 connections where later
 * ones opened 59-114, and its p99 was up to three times theirs). When every open connection is
 * busy a new one is still opened, and counted in the result.
 */
import { createConnection, type Socket } from "node:net";
import { monitorEventLoopDelay } from "node:perf_hooks";

/**
 * One keep-alive HTTP/1.1 connection: writes a prepared request, reads the answer's status line,
 * headers and body (Content-Length or chunked), and is free again. Raw bytes, because node:http's
 * client costs more per request than the server under test (it alone added a p99 of 11 ms at
 * 2,700 req/s against the bare server).
 */
class PacedConnection {
  private readonly socket: Socket;
  private pending: Buffer = Buffer.alloc(0);
  private answered: ((status: number) => void) | undefined;
  /** Closed by either side (the server closes keep-alive connections idle for 5 s). */
  closed = false;

  constructor(host: string, port: number) {
    this.socket = createConnection({ host, port, noDelay: true });
    this.socket.on("data", (chunk: Buffer) => this.read(chunk));
    this.socket.on("error", () => {});
    this.socket.on("close", () => {
      this.closed = true;
      this.answered?.(0);
    });
  }

  send(request: Buffer, answered: (status: number) => void): void {
    this.answered = answered;
    this.socket.write(request);
  }

  close(): void {
    this.socket.destroy();
  }

  private read(chunk: Buffer): void {
    this.pending = this.pending.length === 0 ? chunk : Buffer.concat([this.pending, chunk]);
    const headerEnd = this.pending.indexOf("\r\n\r\n");
    if (headerEnd < 0) return;
    const head = this.pending.toString("latin1", 0, headerEnd);
    let end: number;
    if (/\r\ntransfer-encoding: *chunked/i.test(head)) {
      const last = this.pending.indexOf("\r\n0\r\n\r\n", headerEnd + 4); // small bodies: no chunk looks like this
      if (last < 0) return;
      end = last + 7;
    } else {
      end = headerEnd + 4 + Number(/\r\ncontent-length: *(\d+)/i.exec(head)?.[1] ?? 0);
      if (this.pending.length < end) return;
    }
    this.pending = this.pending.subarray(end);
    const answered = this.answered;
    this.answered = undefined;
    answered?.(Number(head.slice(9, 12)));
  }
}

export interface PacedLoad {
  url: string;
  path: string;
  /** Each request's headers (called per request: fresh event ids and signatures). */
  headers: () => Record<string, string>;
  body: Buffer;
  /** Requests per second. */
  rate: number;
  durationS: number;
  /** Connections opened (and used once) before the clock starts. */
  connections: number;
}

export interface PacedResult {
  /** Achieved requests per second. */
  rps: number;
  /** Latency percentiles from each request's due time, ms. */
  p50: number;
  p99: number;
  max: number;
  /** Connections used, the pre-opened ones included. */
  connections: number;
  /** Requests not answered 200 (the warm-up ones included). */
  failed: number;
  /** Requests answered 200, the warm-up ones included. */
  succeeded: number;
  /** This process's longest event-loop stall while the clock ran, ms: latency the client added. */
  clientStallMs: number;
}

export async function pacedRun(load: PacedLoad): Promise<PacedResult> {
  const { hostname, port } = new URL(load.url);
  const idle: PacedConnection[] = [];
  const all: PacedConnection[] = [];
  const latencies: number[] = [];
  let failed = 0;
  let succeeded = 0;
  let outstanding = 0;
  const requestBytes = () => {
    const lines = Object.entries(load.headers()).map(([name, value]) => `${name}: ${value}\r\n`);
    const head = `POST ${load.path} HTTP/1.1\r\nhost: ${hostname}:${port}\r\ncontent-length: ${load.body.length}\r\n${lines.join("")}\r\n`;
    return Buffer.concat([Buffer.from(head, "latin1"), load.body]);
  };
  /** Sends on an idle connection (a new one when none is idle); `done` is told the ms since `due` (undefined unless 200). */
  const send = (done: (ms: number | undefined) => void, due = performance.now()) => {
    // The longest idle first: every connection stays in use (the server closes one idle for 5 s).
    let connection = idle.shift();
    while (connection?.closed === true) connection = idle.shift();
    if (connection === undefined) {
      connection = new PacedConnection(hostname, Number(port));
      all.push(connection);
    }
    const used = connection;
    outstanding++;
    used.send(requestBytes(), (status) => {
      outstanding--;
      if (status === 200) succeeded++;
      else failed++;
      if (status !== 0) idle.push(used);
      done(status === 200 ? performance.now() - due : undefined);
    });
  };
  // Warm-up: every connection open and past its first request, then a pause for the server to settle.
  await Promise.all(Array.from({ length: load.connections }, () => new Promise<void>((resolve) => send(() => resolve()))));
  await new Promise((resolve) => setTimeout(resolve, 200));

  const stalls = monitorEventLoopDelay({ resolution: 1 });
  stalls.enable();
  const started = performance.now();
  const total = Math.round(load.rate * load.durationS);
  let sent = 0;
  await new Promise<void>((resolve) => {
    const tick = setInterval(() => {
      const due = Math.min(total, Math.floor(((performance.now() - started) / 1000) * load.rate));
      for (; sent < due; sent++) {
        send((ms) => {
          if (ms !== undefined) latencies.push(ms);
        }, started + (sent * 1000) / load.rate);
      }
      if (sent >= total && outstanding === 0) {
        clearInterval(tick);
        resolve();
      }
    }, 1);
  });
  const elapsed = (performance.now() - started) / 1000;
  stalls.disable();
  for (const connection of all) connection.close();
  latencies.sort((a, b) => a - b);
  const at = (p: number) => latencies[Math.min(latencies.length - 1, Math.floor((p / 100) * latencies.length))] ?? 0;
  return { rps: total / elapsed, p50: at(50), p99: at(99), max: at(100), connections: all.length, failed, succeeded, clientStallMs: stalls.max / 1e6 };
}
