import type { ServerResponse } from "node:http";
import type { Socket } from "node:net";
import type { Http2Session } from "node:http2";
import type { Server } from "node:net";
import { isHttp2Request, type NodeRequest, type NodeResponse } from "./node-http.js";

/**
 * How long a stopping server keeps an idle HTTP/1.1 keep-alive connection open before it ends it.
 * Nothing tells a client that the server is stopping until an answer says `Connection: close`, so
 * a request may already be on its way on a connection that looks idle; ending the connection at
 * once resets that request (the sender sees ECONNRESET or "other side closed" and has to retry
 * it). Within the grace such a request is answered, with `Connection: close`. In the restart
 * under load test (16 senders, SIGTERM mid-stream), 5 of 15 runs had a sender's request reset
 * this way before the grace was added, none of 10 after with 250 ms; on a machine loaded with the
 * whole test suite a sender's request was still reset once, written more than 250 ms after it was
 * sent, so the grace is a second (what it adds to a stop: the drain allows 10 s).
 */
const idleKeepAliveGraceMs = 1_000;

/**
 * Tracks connections and in-flight requests so that shutdown can stop accepting, let running
 * requests finish, and then close every connection (HTTP/1.1 idle keep-alives after a short
 * grace, HTTP/2 sessions with GOAWAY), destroying stragglers after a deadline.
 */
export class ConnectionTracker {
  private readonly sockets = new Map<Socket, number>(); // HTTP/1.1 socket -> requests in flight
  /** Sockets known to speak HTTP/1.1; the others may carry HTTP/2 sessions, which GOAWAY closes. */
  private readonly http1Sockets = new WeakSet<Socket>();
  private readonly sessions = new Set<Http2Session>();
  private inFlight = 0;
  private draining = false;
  /** The drain's grace has passed: sessions are closed from now on (see drain). */
  private graceOver = false;
  private cutting = false;
  private drained: (() => void) | undefined;

  constructor(server: Server) {
    server.on("connection", (socket: Socket) => {
      this.sockets.set(socket, 0);
      socket.once("close", () => {
        // Its requests still in flight end with it: one pipelined behind an answer that closed
        // the connection (Connection: close, at a drain) is never answered and its response never
        // closes (the drain waited its whole 10 s for two such, and said they were cut). Their
        // responses' own close, if it comes, finds the socket gone and counts nothing again.
        this.inFlight -= this.sockets.get(socket) ?? 0;
        this.sockets.delete(socket);
        if (this.draining && this.inFlight === 0) this.drained?.();
      });
    });
    server.on("session", (session: Http2Session) => this.trackSession(session));
  }

  /** HTTP/1.1 connections with no request in flight. */
  private idleHttp1Sockets(): Socket[] {
    return [...this.sockets].filter(([socket, active]) => active === 0 && this.http1Sockets.has(socket)).map(([socket]) => socket);
  }

  private trackSession(session: Http2Session | undefined): void {
    if (session === undefined || this.sessions.has(session)) return;
    this.sessions.add(session);
    session.once("close", () => this.sessions.delete(session));
    if (this.graceOver) session.close();
  }

  /** HTTP/1.1 and not yet identified connections open now (for tests and diagnostics). */
  get openConnections(): number {
    return this.sockets.size;
  }

  get shuttingDown(): boolean {
    return this.draining;
  }

  /** True once the drain's deadline passed and the connections still open are being destroyed. */
  get cuttingAtShutdown(): boolean {
    return this.cutting;
  }

  /** Call at the start of every request; the request counts as in flight until its response closes. */
  track(req: NodeRequest, res: NodeResponse): void {
    this.inFlight++;
    let socket: Socket | undefined;
    if (isHttp2Request(req)) {
      // httpolyglot emits `session` on its inner http2 server, not on this one: learn sessions here.
      this.trackSession(req.stream.session);
    } else {
      socket = req.socket as Socket;
      this.http1Sockets.add(socket);
      const active = this.sockets.get(socket);
      if (active !== undefined) this.sockets.set(socket, active + 1);
    }
    if (this.draining && socket !== undefined) res.setHeader("connection", "close");
    const onTrackedSocket = socket !== undefined && this.sockets.has(socket);
    res.once("close", () => {
      // A client that hangs up mid-request closes its socket first (this tracker's listener,
      // added at accept, runs before Node's, which closes the response): a socket no longer
      // tracked stays untracked, and its requests were counted out with it. Setting it again kept
      // every such socket, with its request and response, for the life of the process (about 6 KB
      // each; soak review).
      const active = socket === undefined ? undefined : this.sockets.get(socket);
      if (onTrackedSocket && active === undefined) return;
      this.inFlight--;
      if (socket !== undefined && active !== undefined) {
        this.sockets.set(socket, active - 1);
        if (this.draining && active === 1) socket.end();
      }
      if (this.draining && this.inFlight === 0) this.drained?.();
    });
  }

  /**
   * Stops new work on open connections and resolves when in-flight requests are done or the
   * deadline passes. Every connection open at the start is served for idleKeepAliveGraceMs
   * first: an idle HTTP/1.1 one, one accepted whose first request is still on its way (a client
   * that connects for each request), an HTTP/2 session. Every HTTP/1.1 answer from now on
   * carries `Connection: close`, and its connection ends after it; after the grace, HTTP/2
   * sessions get GOAWAY, naming their last stream, and end once their streams have. Resolves to
   * the number of requests still in flight at the deadline, which are cut.
   *
   * Before, with nothing in flight at the signal, every connection was destroyed within
   * milliseconds: HTTP/2 clients got no GOAWAY and their calls sent meanwhile were reset
   * (connect-node: CANCELED), and a request on a connection just accepted was reset unread
   * (curl and one-shot senders, 9 of 10 restarts); and the GOAWAY sent at the signal refused
   * every stream still on its way (REFUSED_STREAM, which connect-node reads as INTERNAL and does
   * not retry: 60 of 60 calls). A first GOAWAY naming the highest stream id (RFC 9113 6.8) would
   * tell HTTP/2 clients sooner, but nghttp2 stops reading a session with no stream open once it
   * has sent any GOAWAY: the calls sent after it were never read.
   */
  async drain(deadlineMs: number, graceOver: () => void = () => {}): Promise<number> {
    const started = performance.now();
    this.draining = true;
    // The answer each HTTP/1.1 connection is writing says the connection ends with it: one that
    // said keep-alive led its client to send the next request on a connection about to be closed.
    for (const socket of this.sockets.keys()) {
      const res = (socket as Socket & { _httpMessage?: ServerResponse | null })._httpMessage; // Node's response in progress on it
      if (res !== undefined && res !== null && !res.headersSent) res.setHeader("connection", "close");
    }
    if (this.sessions.size > 0 || [...this.sockets.values()].some((active) => active === 0)) {
      await new Promise((resolve) => setTimeout(resolve, Math.min(idleKeepAliveGraceMs, deadlineMs)));
    }
    this.graceOver = true;
    graceOver();
    // Ending an HTTP/2 socket would cut its in-flight streams: those sessions get GOAWAY instead
    // (which names the last stream served, so a client knows what to send again elsewhere).
    const sessionsClosed = [...this.sessions].map((session) => new Promise((resolve) => session.close(() => resolve(undefined))));
    for (const socket of this.idleHttp1Sockets()) socket.end();
    if (this.inFlight > 0) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, Math.max(0, deadlineMs - (performance.now() - started)));
        timer.unref();
        this.drained = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    }
    // Sessions with nothing left close once their GOAWAY is written: destroyed in the same turn,
    // an idle session's socket went before its GOAWAY (calls sent meanwhile: ECONNRESET, CANCEL).
    await Promise.race([Promise.all(sessionsClosed), new Promise((resolve) => setTimeout(resolve, Math.max(0, Math.min(1_000, deadlineMs - (performance.now() - started)))).unref())]);
    const cut = this.inFlight;
    this.cutting = true;
    for (const socket of this.sockets.keys()) socket.destroy();
    for (const session of this.sessions) session.destroy();
    return cut;
  }
}
