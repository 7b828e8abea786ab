import { randomUUID } from "node:crypto";
import { once } from "node:events";
import type { IncomingMessage, Server as HttpServerBase } from "node:http";
import { Http2ServerResponse, type Http2Server, type Http2Session, type ServerHttp2Session, type ServerHttp2Stream } from "node:http2";
import type { AddressInfo, Socket } from "node:net";
import { finished } from "node:stream/promises";
import * as httpolyglot from "@httptoolkit/httpolyglot";
import { Code } from "@connectrpc/connect";
import type { Logger } from "../logger.js";
import { isStoreUnavailable } from "../store/store-errors.js";
import { answerClientError } from "./client-error.js";
import type { ConnectHandlers } from "./connect-handlers.js";
import { afterPendingReads, yieldToRequests } from "../event-loop.js";
import { ConnectionTracker } from "./connection-tracker.js";
import { refuseMethod, writeJson, writeJsonError } from "./json-error.js";
import { everyValueOf, isHttp2Request, type NodeRequest, type NodeResponse } from "./node-http.js";
import { cutText } from "../cut-text.js";
import { answeredCodeOf, codeName } from "./outcome-codes.js";
import { writeErrorInProtocol } from "./protocol-error.js";
import { protocolOfContentType, type RequestFacts, rpcProtocolOf } from "./request-context.js";
import { enforceDeadlines, RequestTimeoutError } from "./request-deadline.js";
import type { RestTranscoder } from "./rest-transcoder.js";
import { storeUnavailableHeaders, storeUnavailableMessage } from "./store-unavailable.js";

/**
 * Connections the kernel completes and queues for the server to accept (capped by the kernel's
 * net.core.somaxconn, 4096 by default). Node's default is 511: a burst of more senders connecting
 * while the thread is busy (a sender fleet retrying at once, a load balancer refilling its pool)
 * then has its SYNs dropped, and each of those waits for the retry, a second later. Measured in
 * the half-load bench, whose client opens connections when all of its own are busy: 34 dropped
 * SYNs in one run, each a request answered more than 1 s late.
 */
const listenBacklog = 4096;

/**
 * Streams one HTTP/2 connection may have open at once (SETTINGS_MAX_CONCURRENT_STREAMS; clients
 * such as grpc-js, Connect and Go queue calls beyond it). Node advertises no limit, so one
 * connection could hold any number of requests whose bodies never finish, each kept until the
 * request timeout: 20,000 such streams on one connection took the server from 118 to 396 MB.
 * An HTTP/1.1 client needs a connection per request for that. 256 is about Go's default (250).
 */
const maxConcurrentStreamsPerSession = 256;

/** A route served outside Connect, on the raw request (webhooks, the token endpoint). */
export interface RawRoute {
  /** An exact path, or a prefix when it ends with "/". */
  path: string;
  handle(req: NodeRequest, res: NodeResponse, facts: RequestFacts): Promise<void>;
}

export interface HttpServerOptions {
  connect: ConnectHandlers;
  rest: RestTranscoder;
  rawRoutes: readonly RawRoute[];
  /** Readiness: false answers /readyz with 503. */
  ready: () => boolean;
  log: Logger;
  /** Cut a request still sending headers or body after this long. */
  requestTimeoutMs: number;
  /** An API answer no interceptor counted or logged (see `RequestFacts.observed`). */
  onUnobservedAnswer?: (answer: UnobservedAnswer) => void;
  /** A route that threw (answered 500 or 503): the store's noteDamage. */
  onRouteFailed?: (error: unknown) => void;
  /** At a stop, once the connections open at the signal have had their grace: long streams end then. */
  onShutdownGraceOver?: () => void;
}

/** An API request answered before the interceptors saw it: what the metrics and the log need. */
export interface UnobservedAnswer {
  facts: RequestFacts;
  /** Connect code name of the answer (`invalid_argument`, `unimplemented`, `canceled`, ...). */
  code: string;
  /** The HTTP status answered; undefined when the client went away before the answer was out. */
  status: number | undefined;
  seconds: number;
}

/** A path in the shape of an RPC: `/package.Service/Method` (not `/openapi.json/x`). */
const rpcPath = /^\/([a-z_]\w*\.)+[A-Z]\w*\/[A-Z]\w*$/;

/**
 * Every API answer is an authenticated caller's view, and some carry a secret shown once (a new
 * client's secret, a webhook secret): no shared or browser cache may keep them (RFC 9111 5.2.2.5;
 * the token endpoint says the same, RFC 6749 5.1).
 */
const apiCacheControl = "no-store";

/**
 * One listening socket for every protocol: httpolyglot reads the first bytes of each connection
 * and hands HTTP/2 (prior knowledge, as gRPC clients speak it) to an http2 server and anything
 * else to an HTTP/1.1 server; both call the same dispatcher.
 */
export class HttpServer {
  private readonly server: ReturnType<typeof httpolyglot.createServer>;
  private readonly connections: ConnectionTracker;
  /** The last request read on each HTTP/1.1 socket, and its response (answered or not). */
  private readonly lastExchanges = new WeakMap<Socket, { req: IncomingMessage; res: NodeResponse }>();

  constructor(private readonly options: HttpServerOptions) {
    this.server = httpolyglot.createServer(
      {
        http: {
          // Bodies are timed by enforceDeadlines (HTTP/1.1 and HTTP/2 alike, with the JSON
          // error shape); Node times the headers (slowloris), see startHeaderTimeouts.
          requestTimeout: 0,
          headersTimeout: headersTimeoutMs(options.requestTimeoutMs),
          connectionsCheckingInterval: 250,
          keepAliveTimeout: 5_000,
          // Node answers an HTTP/1.1 request without Host with a bare 400 (no body): `start`
          // refuses it instead, in the JSON error shape every other malformed request gets.
          requireHostHeader: false,
        },
        http2: { settings: { maxConcurrentStreams: maxConcurrentStreamsPerSession } },
      },
      (req, res) => this.dispatch(req, res),
    );
    // Same dispatcher for HTTP/2 streams; httpolyglot wires `request` from both servers.
    this.connections = new ConnectionTracker(this.server);
    // httpolyglot hands HTTP/2 the socket as a plain JS stream, which writes a response's frames
    // one by one; with Nagle's algorithm on, the last small frame waits for the client's delayed
    // ACK, 40 ms per gRPC call. HTTP/1.1 sets this itself; do it for every connection.
    this.server.on("connection", (socket: Socket) => socket.setNoDelay(true));
    this.server.on("clientError", (error: Error & { code?: string }, socket: Socket) => {
      const last = this.lastExchanges.get(socket);
      if (last === undefined || error.code === "ECONNRESET") {
        answerClientError(error, socket, false);
        return;
      }
      const { req, res } = last;
      if (!req.complete) {
        // In the body of the request being answered: a 400 unless it was answered already (an
        // early refusal: no second answer, the connection ends).
        answerClientError(error, socket, res.headersSent);
        return;
      }
      // A malformed request pipelined behind one whose body had all arrived: its 400 goes after
      // that one's answer, in order (RFC 9112 9.3.2). Written at once, it took the first
      // request's place (which ran: a webhook accepted, a token issued, its answer lost).
      if (res.writableFinished) {
        answerClientError(error, socket, false);
        return;
      }
      res.once("finish", () => answerClientError(error, socket, false));
      res.once("close", () => {
        if (!res.writableFinished) socket.destroy();
      });
    });
    // An idle keep-alive connection's timeout fires from a timer, and timers run before sockets are
    // read: after the thread was held past it (a write waiting up to 5 s on another process's
    // lock), a request sent meanwhile lay unread, and Node reset the connection. With a listener
    // Node leaves the socket to it: closed once the loop has read what arrived, unless something did.
    innerServers(this.server).http1?.on("timeout", (socket: Socket) => {
      const bytesRead = socket.bytesRead;
      afterPendingReads(() => {
        if (socket.bytesRead === bytesRead && this.lastExchanges.get(socket)?.res.writableFinished !== false) socket.destroy();
      });
    });
    // CONNECT (a proxy's tunnel request) never reaches 'request': without a listener Node drops
    // the connection unanswered. accessd is no proxy: 501 in the JSON error shape, then close.
    innerServers(this.server).http1?.on("connect", (req: IncomingMessage, socket: Socket) => refuseConnectMethod(req, socket));
    // An Expect other than 100-continue: Node answered a bare 417 without a body.
    const { http1, http2 } = innerServers(this.server);
    // CONNECT over HTTP/2 (RFC 9113 8.5): Node answered a bare 405 without a listener.
    http2?.on("connect", (req: NodeRequest, res: NodeResponse) => {
      const message = `CONNECT is not implemented (${cutText(String(req.headers[":authority"] ?? ""), 200)}): accessd is not a proxy`;
      writeJsonError(res, Code.Unimplemented, message, 501);
    });
    http1?.on("checkExpectation", (req: IncomingMessage, res: NodeResponse) => refuseExpectation(req, res, { connection: "close" }));
    http2?.on("checkExpectation", (req: NodeRequest, res: NodeResponse) => refuseExpectation(req, res, {}));
    cutIdleConnections(this.server, {
      silentMs: headersTimeoutMs(options.requestTimeoutMs),
      // Longer than the request timeout: a stream stalled mid-body is cut with 408 first (which is
      // traffic), and the session goes on serving; only a session without traffic is closed.
      http2IdleMs: 2 * options.requestTimeoutMs,
    });
  }

  get shuttingDown(): boolean {
    return this.connections.shuttingDown;
  }

  /** Set as close() begins, before its first await (the drain begins a turn later). */
  private stopping = false;

  async listen(port: number, host: string): Promise<AddressInfo> {
    this.server.listen({ port, host, backlog: listenBacklog });
    await once(this.server, "listening");
    startHeaderTimeouts(this.server);
    return this.server.address() as AddressInfo;
  }

  /** Stop accepting, let in-flight requests finish (up to `deadlineMs`), close every connection. */
  async close(deadlineMs = 10_000): Promise<void> {
    this.stopping = true;
    // The connections the listen backlog holds are taken in first (a turn of the loop accepts
    // them): closing the listener resets every one still queued, and a client that connects for
    // each request saw ECONNRESET on requests sent a few milliseconds before the signal, unrun.
    await yieldToRequests();
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    const cut = await this.connections.drain(deadlineMs, () => this.options.onShutdownGraceOver?.());
    if (cut > 0) {
      this.options.log.warn({ requests: cut, deadlineMs }, "shutdown: requests still in flight at the deadline were cut");
    }
    await closed;
  }

  private dispatch(req: NodeRequest, res: NodeResponse): void {
    try {
      this.start(req, res);
    } catch (e) {
      // The synchronous start of a request (what runs before `route`'s promise catches for it)
      // throwing is a bug; it must cost that request, not the process every request shares.
      this.options.log.error({ err: e, path: shownPath((req.url ?? "").split("?", 1)[0] ?? "") }, "request failed");
      writeJsonError(res, Code.Internal, "internal error");
    }
  }

  private start(req: NodeRequest, res: NodeResponse): void {
    this.connections.track(req, res);
    if (!isHttp2Request(req)) {
      this.lastExchanges.set(req.socket as Socket, { req: req as IncomingMessage, res });
      if (req.httpVersionMajor !== 1) {
        // A request line that says HTTP/0.9 (`GET /` alone) or HTTP/2.0 over an HTTP/1 connection:
        // 400 like the versions Node's parser refuses itself (HTTP/3.0), not a 5xx for bad input.
        writeJsonError(res, Code.InvalidArgument, `HTTP/${req.httpVersion} is not supported: send HTTP/1.1 or HTTP/2`, 400, { connection: "close" });
        return;
      }
      if (req.httpVersionMinor === 1 && req.headers.host === undefined) {
        // RFC 9112 3.2: a server MUST answer 400 to an HTTP/1.1 request without Host.
        writeJsonError(res, Code.InvalidArgument, "an HTTP/1.1 request needs a Host header", 400, { connection: "close" });
        return;
      }
      const framingRefusal = framingRefusalOf(req);
      if (framingRefusal !== undefined) {
        writeJsonError(res, framingRefusal.code, framingRefusal.message, framingRefusal.status, { connection: "close" });
        return;
      }
      toOriginForm(req);
      // Node reads nothing more on a connection after a request asking to upgrade it (h2c,
      // websocket), which accessd answers as HTTP/1.1: a request pipelined behind it was neither
      // run nor answered, and the connection hung until its keep-alive timeout. It ends after the
      // answer, so the client sends the rest again on a new one.
      if (req.headers.upgrade !== undefined && /(^|,)\s*upgrade\s*(,|$)/i.test(req.headers.connection ?? "")) res.setHeader("connection", "close");
    }
    const url = req.url ?? "/";
    const queryStart = url.indexOf("?");
    const path = queryStart === -1 ? url : url.slice(0, queryStart);
    const given = req.headers["x-request-id"];
    const requestId = typeof given === "string" && /^[\w.:-]{1,128}$/.test(given) ? given : randomUUID();
    res.setHeader("x-request-id", requestId);
    const facts: RequestFacts = {
      requestId,
      protocol: "rest",
      peerAddress: peerAddressOf(req),
      receivedAt: performance.now(),
    };
    enforceDeadlines(req, res, this.options.requestTimeoutMs, facts, () => this.stopping);
    this.route(req, res, path, facts).catch((e: unknown) => {
      try {
        this.answerFailedRequest(req, res, path, facts, e);
      } catch (failure) {
        // Answering the failure failed too (a stream gone meanwhile): never an unhandled
        // rejection, which would end the process every request shares.
        this.options.log.error({ err: failure, requestId, path: shownPath(path) }, "could not answer a failed request");
        res.destroy();
      }
    });
  }

  /** A request whose route threw: 503 for a store that failed, nothing for a client gone, else 500. */
  private answerFailedRequest(req: NodeRequest, res: NodeResponse, path: string, facts: RequestFacts, e: unknown): void {
    const { requestId } = facts;
    this.options.onRouteFailed?.(e);
    if (isStoreUnavailable(e)) {
      // Disk full, database locked, I/O error: the request may succeed later (webhooks: nothing was recorded).
      this.options.log.error({ err: e, requestId, path: shownPath(path) }, "request failed: the store is unavailable");
      writeErrorInProtocol(req, res, rpcProtocolOf(facts), Code.Unavailable, storeUnavailableMessage, 503, storeUnavailableHeaders);
      return;
    }
    if (e instanceof RequestTimeoutError) {
      // The request deadline cut the body and answered 408 (request-deadline.ts): the handler
      // that was reading it stops here, having done nothing.
      this.options.log.info({ requestId, path: shownPath(path) }, "request cut by its deadline before its body arrived");
      return;
    }
    if (facts.cutByDeadline === true) {
      // The request deadline answered 408 and cut the body a route was still reading (thrown
      // away unread, for a call without a token): not the client's going away.
      this.options.log.info({ requestId, path: shownPath(path) }, "request cut by its deadline before its body arrived");
      return;
    }
    if (clientWentAway(req, e)) {
      // The client closed the connection (or reset the stream) while its body was being read:
      // nobody to answer, and not the server's fault; an error line each made noise any client
      // could cause (256 lines for one HTTP/2 connection that dropped its streams). Or the
      // shutdown's deadline cut it, which `close` counts in a line of its own.
      const why = this.connections.cuttingAtShutdown ? "request cut by the shutdown" : "request abandoned by the client";
      this.options.log.info({ requestId, path: shownPath(path) }, `${why} before its body arrived`);
      res.destroy();
      return;
    }
    this.options.log.error({ err: e, requestId, path: shownPath(path) }, "request failed");
    writeErrorInProtocol(req, res, rpcProtocolOf(facts), Code.Internal, "internal error");
  }

  /**
   * Counts and logs an API answer that no interceptor saw (see `RequestFacts.observed`): a REST
   * path or body refused before its handler, a Connect or gRPC request connect-es refused, an
   * unknown method. Under the operation the route named, or `unknown`.
   */
  private observeApiAnswer(res: NodeResponse, facts: RequestFacts): void {
    const report = this.options.onUnobservedAnswer;
    if (report === undefined) return;
    const started = performance.now();
    // Timed to the end of the answer, not of the stream: over HTTP/2 the stream of a refused
    // body stays open while the rest of it is discarded, which any client could make long.
    let answeredAt: number | undefined;
    const answered = (): void => {
      answeredAt ??= performance.now();
    };
    if (res instanceof Http2ServerResponse) res.stream.once("finish", answered);
    else res.once("finish", answered);
    res.once("close", () => {
      if (facts.observed === true) return;
      // An HTTP/2 stream the client reset before the answer was out: connect-es may still answer
      // what it read to the closed stream, whose 'finish' comes all the same (10 Creates sent and
      // reset at once were counted `ok`, status 200, none of them run).
      const resetByClient = res instanceof Http2ServerResponse && res.stream.aborted;
      const answered = answeredAt !== undefined && !resetByClient;
      const code = resetByClient ? codeName(Code.Canceled) : answeredCodeOf(res, answered);
      report({ facts, code, status: answered ? res.statusCode : undefined, seconds: ((answeredAt ?? performance.now()) - started) / 1000 });
    });
  }

  private async route(req: NodeRequest, res: NodeResponse, path: string, facts: RequestFacts): Promise<void> {
    const { connect, rest, rawRoutes } = this.options;
    const operation = connect.operationOf(path);
    if (operation !== undefined) {
      keepEveryAuthorization(req);
      facts.protocol = protocolOfContentType(req.headers["content-type"]);
      facts.operation = operation;
      res.setHeader("cache-control", apiCacheControl);
      this.observeApiAnswer(res, facts);
      return connect.handle(req, res, path, facts);
    }
    for (const route of rawRoutes) {
      if (route.path.endsWith("/") ? path.startsWith(route.path) : path === route.path) {
        return route.handle(req, res, facts);
      }
    }
    if ((path === "/healthz" || path === "/readyz") && req.method !== "GET" && req.method !== "HEAD") {
      return refuseMethod(res, req.method, path, ["GET"]); // as /metrics: a probe reads, and POST did too
    }
    if (path === "/healthz") return writeJson(res, 200, { status: "ok" });
    if (path === "/readyz") {
      const ready = !this.shuttingDown && this.options.ready();
      return writeJson(res, ready ? 200 : 503, { status: ready ? "ready" : "not ready" });
    }
    if (path.startsWith("/api/")) {
      keepEveryAuthorization(req);
      res.setHeader("cache-control", apiCacheControl);
      this.observeApiAnswer(res, facts);
      return rest.handle(req, res, facts);
    }
    const protocol = protocolOfContentType(req.headers["content-type"]);
    if (protocol === "grpc" || protocol === "grpc-web") {
      facts.protocol = protocol;
      this.observeApiAnswer(res, facts);
      // A gRPC client reads grpc-status, not the HTTP status: a 404 reaches grpc-js as
      // "Received HTTP status code 404", the message lost. A trailers-only UNIMPLEMENTED instead,
      // once the request is read (answering while it is still sent resets the stream, which
      // grpc-js reports as "Call ended without gRPC status").
      req.resume();
      const read = await finished(req as NodeJS.ReadableStream).then(
        () => true,
        () => false,
      );
      if (!read || res.headersSent) return; // gone, or cut by the request deadline
      writeErrorInProtocol(req, res, protocol, Code.Unimplemented, `unknown method ${path}`);
      return;
    }
    // Counted and logged as an unknown /api/ path is (operation "unknown"): a Connect client with
    // a misspelt method, or a proxy sending the wrong prefix, shows in the metrics and the log.
    const rpcShaped = rpcPath.test(path);
    if (rpcShaped) facts.protocol = protocol;
    this.observeApiAnswer(res, facts);
    if (rpcShaped) {
      // A Connect call to a method the server does not have: `unimplemented`, as gRPC is told, in
      // a 404, which Connect clients that read only the status map to `unimplemented` too.
      writeJsonError(res, Code.Unimplemented, `unknown method ${path}`, 404);
      return;
    }
    writeJsonError(res, Code.NotFound, `no route for ${path}`);
  }
}

/**
 * Node enforces `headersTimeout` (a client trickling its request headers) with a periodic check
 * that an http.Server starts on its own 'listening' event. httpolyglot's inner HTTP/1.1 server
 * never listens itself (it is handed sockets), so the check would never run: start it here. A
 * connection whose headers are late gets a `clientError` (ERR_HTTP_REQUEST_TIMEOUT), answered
 * 408 with the JSON error shape by answerClientError. The slow-clients test fails if the inner
 * server is ever renamed.
 */
function startHeaderTimeouts(server: ReturnType<typeof httpolyglot.createServer>): void {
  innerServers(server).http1?.emit("listening");
}

/** 417 for an `Expect` other than 100-continue (RFC 9110 10.1.1), in the JSON error shape. */
function refuseExpectation(req: NodeRequest, res: NodeResponse, headers: Record<string, string>): void {
  writeJsonError(res, Code.FailedPrecondition, `Expect: ${cutText(String(req.headers.expect), 100)} is not supported (only 100-continue)`, 417, headers);
}

/**
 * A body framed in a way RFC 9112 refuses and Node's parser takes: a `Transfer-Encoding` beside a
 * `Content-Length` (Node framed `Transfer-Encoding:` with no value, then `Content-Length: 2`, by the
 * length: a request a proxy in front may have framed otherwise, 6.3), or a coding other than
 * chunked (`gzip, chunked` was read as the raw body: 501, 6.1). The connection ends after the answer.
 */
function framingRefusalOf(req: IncomingMessage): { code: Code; status: number; message: string } | undefined {
  const transferEncoding = req.headers["transfer-encoding"];
  if (transferEncoding === undefined) return undefined;
  if (req.headers["content-length"] !== undefined) {
    return { code: Code.InvalidArgument, status: 400, message: "a request with both Transfer-Encoding and Content-Length is refused (RFC 9112 6.3)" };
  }
  if (transferEncoding.trim().toLowerCase() !== "chunked") {
    return { code: Code.Unimplemented, status: 501, message: `Transfer-Encoding ${JSON.stringify(transferEncoding.slice(0, 100))} is not supported: send chunked, or a Content-Length` };
  }
  return undefined;
}

/**
 * 501 (the method is not one the server implements: RFC 9110 15.6.2; a 405 would need an Allow
 * for a target that is no resource here), then the socket is destroyed once the answer is out or
 * a second later: it has left Node's HTTP timeouts, and a client that never closed kept it.
 */
function refuseConnectMethod(req: IncomingMessage, socket: Socket): void {
  const body = JSON.stringify({ code: "unimplemented", message: `CONNECT is not implemented (${(req.url ?? "/").slice(0, 200)}): accessd is not a proxy` });
  socket.on("error", () => {}); // the client may be gone already
  const cut = setTimeout(() => socket.destroy(), 1_000).unref();
  socket.end(
    `HTTP/1.1 501 Not Implemented\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n` +
      `connection: close\r\n\r\n${body}`,
    () => {
      clearTimeout(cut);
      socket.destroy();
    },
  );
}

/**
 * A request's path as logged: at most 200 characters. The path is the client's to make as long as
 * its headers may be (a 15,000-character one made each line about it 15 KB), as listener ids and
 * event ids are cut in their lines.
 */
function shownPath(path: string): string {
  return cutText(path, 200);
}

/** How long a client may take to send a request's headers: the request timeout, at most 10 s. */
function headersTimeoutMs(requestTimeoutMs: number): number {
  return Math.min(requestTimeoutMs, 10_000);
}

/**
 * Node keeps the first of two `Authorization` headers and drops the other, while a proxy in front
 * may have read the last: which one authenticates the call would depend on who reads it. Joined
 * here (an API call's headers only), they reach the authorization interceptor as one value with a
 * comma, which no bearer token has, and the call is refused (401) instead of one of them chosen.
 */
function keepEveryAuthorization(req: NodeRequest): void {
  const every = everyValueOf(req.rawHeaders, "authorization");
  if (every !== undefined) req.headers.authorization = every;
}

/** httpolyglot's inner servers, to which it hands each connection once it knows the protocol. */
function innerServers(server: ReturnType<typeof httpolyglot.createServer>): { http1?: HttpServerBase; http2?: Http2Server } {
  const inner = server as unknown as { _httpServer?: HttpServerBase; _http2Server?: Http2Server };
  return { http1: inner._httpServer, http2: inner._http2Server };
}

/**
 * Connections that hold a socket and say nothing are closed, so that they cannot pile up until the
 * process runs out of file descriptors. Two cases escape Node's own timeouts:
 * - a connection that sends nothing, or only part of the HTTP/2 preface: httpolyglot is still
 *   reading its first bytes to pick the protocol, before any server (and any timeout) has it.
 *   It is destroyed after `silentMs` unless it was handed to the HTTP/1.1 or HTTP/2 server (the
 *   first then times the headers, the second the session);
 * - an HTTP/2 session with no open stream and no frame for `http2IdleMs` (Node sets no idle
 *   timeout on sessions): closed with GOAWAY, which lets open streams finish and tells gRPC and Connect clients to
 *   reconnect for their next call. Idle HTTP/1.1 keep-alive connections close after 5 s already.
 * Before: a silent connection stayed open for good (20 s observed with a 3 s request timeout).
 */
function cutIdleConnections(
  server: ReturnType<typeof httpolyglot.createServer>,
  { silentMs, http2IdleMs }: { silentMs: number; http2IdleMs: number },
): void {
  const { http1, http2 } = innerServers(server);
  const handedOver = new WeakSet<Socket>();
  // Listeners added on the inner servers themselves: httpolyglot copies the outer server's
  // listeners onto its inner servers, so the outer 'connection' listener below runs twice per
  // connection (once when accepted, once when handed over, in either order).
  for (const inner of [http1, http2]) inner?.prependListener("connection", (socket: Socket) => handedOver.add(socket));
  const watched = new WeakSet<Socket>();
  server.on("connection", (socket: Socket) => {
    if (watched.has(socket)) return;
    watched.add(socket);
    const timer = setTimeout(() => {
      if (!handedOver.has(socket)) socket.destroy();
    }, silentMs);
    timer.unref();
    socket.once("close", () => clearTimeout(timer));
  });
  // Idle means no open stream, as for gRPC's MAX_CONNECTION_IDLE: a health Watch can be silent
  // for hours while its client's keepalive PINGs (which do not reset Node's timer) say it is
  // there. Closing such a session (GOAWAY) made grpc-js drop the connection at its next PING,
  // and the Watch with it. So a session whose timer fires with a stream open gets a timer of its
  // own again, with this same check as its handler (the server's 'timeout' is emitted only for
  // the timer Node set first), until it fires with none open.
  const openStreams = new WeakMap<Http2Session, number>();
  const startedStreams = new WeakMap<Http2Session, number>();
  http2?.on("stream", (stream: ServerHttp2Stream) => {
    const session = stream.session;
    if (session === undefined) return;
    openStreams.set(session, (openStreams.get(session) ?? 0) + 1);
    startedStreams.set(session, (startedStreams.get(session) ?? 0) + 1);
    stream.once("close", () => openStreams.set(session, (openStreams.get(session) ?? 1) - 1));
  });
  const idle = (session: Http2Session, startedBefore: number): boolean =>
    (openStreams.get(session) ?? 0) === 0 && (startedStreams.get(session) ?? 0) === startedBefore;
  // The timer fires before the sockets are read, as HTTP/1.1's keep-alive timeout does: after the
  // thread was held past it (a write waiting on another process's lock, a paused VM), calls sent
  // meanwhile lay unread, and the GOAWAY refused every one (REFUSED_STREAM: connect-node reads
  // INTERNAL and does not retry). So the session is closed once the loop has read what arrived,
  // unless that started a stream.
  const closeIfIdle = (session: Http2Session): void => {
    const startedBefore = startedStreams.get(session) ?? 0;
    if (!idle(session, startedBefore)) {
      session.setTimeout(http2IdleMs, () => closeIfIdle(session));
      return;
    }
    afterPendingReads(() => {
      if (session.closed || session.destroyed) return;
      if (idle(session, startedBefore)) session.close();
      else session.setTimeout(http2IdleMs, () => closeIfIdle(session));
    });
  };
  http2?.setTimeout(http2IdleMs);
  http2?.on("timeout", (session: ServerHttp2Session) => closeIfIdle(session));
}

/**
 * The address the request came from. Over HTTP/2, httpolyglot hands Node's http2 server the
 * connection as a plain JS stream (it turns off the handle's `isStreamBase`), which Node wraps in
 * a socket of its own with no address: `req.socket.remoteAddress` is undefined for every HTTP/2
 * request, and an IP-restricted listener refused every HTTP/2 sender. That wrapper keeps the
 * connection it wraps as `stream`.
 */
function peerAddressOf(req: NodeRequest): string {
  const socket = req.socket as Socket & { stream?: { remoteAddress?: string } };
  return socket.remoteAddress ?? socket.stream?.remoteAddress ?? "";
}

/**
 * RFC 9112 3.2.2: a server must accept a request target in absolute form (`http://host/path?q`),
 * which proxies send; every route reads the origin form (`/path?q`), so the request is rewritten.
 */
function toOriginForm(req: NodeRequest): void {
  const target = req.url;
  if (target === undefined || target.startsWith("/")) return;
  const schemeAndAuthority = /^https?:\/\/[^/?#]*/i.exec(target)?.[0];
  if (schemeAndAuthority === undefined) return;
  const rest = target.slice(schemeAndAuthority.length);
  req.url = rest.startsWith("/") ? rest : `/${rest}`;
}

/** True when reading the request failed because the client went away (its connection or stream closed early). */
function clientWentAway(req: NodeRequest, error: unknown): boolean {
  const code = (error as { code?: unknown } | undefined)?.code;
  const aborted = code === "ECONNRESET" || code === "ERR_STREAM_PREMATURE_CLOSE" || (error instanceof Error && error.message === "aborted");
  return aborted && (req.destroyed || req.aborted);
}
