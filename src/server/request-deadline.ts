import { Http2ServerResponse, constants as http2Constants } from "node:http2";
import type { Socket } from "node:net";
import { Code, ConnectError } from "@connectrpc/connect";
import { afterPendingReads } from "../event-loop.js";
import { isHttp2Request, type NodeRequest, type NodeResponse } from "./node-http.js";
import { writeErrorInProtocol } from "./protocol-error.js";
import { type RequestFacts, rpcProtocolOf } from "./request-context.js";

/**
 * The deadlines of one request, both `timeoutMs` (ACCESSD_REQUEST_TIMEOUT):
 *
 * - its body must arrive within `timeoutMs` of its headers (a client that stalls or trickles the
 *   body): else 408 with the JSON error shape if no response has started (a gRPC or gRPC-Web
 *   call: DEADLINE_EXCEEDED, trailers-only), then the request is destroyed (HTTP/2: its stream
 *   closed), which frees the handler waiting on the body and the connection. The inner HTTP/1.1
 *   server's own `requestTimeout` is 0 (its periodic check times headers only, see
 *   `startHeaderTimeouts` in http-server.ts), and http2 servers have no such timeout at all:
 *   bodies are timed here, for both.
 * - the client must take its answer: see cutStalledHttp1Answer.
 */
export function enforceDeadlines(req: NodeRequest, res: NodeResponse, timeoutMs: number, facts: RequestFacts, stopping: () => boolean = () => false): void {
  if (res instanceof Http2ServerResponse) {
    enforceHttp2Deadlines(req, res, timeoutMs, facts, stopping);
    return;
  }
  let closed = false;
  // Judged once the loop has read what arrived: after the thread was held past the deadline (a
  // lock wait, a paused VM), a body that had all arrived lay unread, and was cut with 408 as late.
  const timer = setTimeout(() => {
    afterPendingReads(() => {
      if (!closed && !req.complete) cutIncompleteRequest(req, res, timeoutMs, facts);
    });
  }, timeoutMs).unref();
  res.once("close", () => {
    closed = true;
    clearTimeout(timer);
    if (res.writableFinished && !req.complete && !req.destroyed) discardRestOfBody(req, timeoutMs, () => req.destroy());
  });
  cutStalledHttp1Answer(req, res, timeoutMs);
}

/** What a request's body reader meets once the request deadline has cut its body (HTTP/2). */
export class RequestTimeoutError extends Error {
  readonly code = "ERR_REQUEST_TIMEOUT";
  constructor(timeoutMs: number) {
    super(`the request body did not arrive within ${timeoutMs} ms`);
    this.name = "RequestTimeoutError";
  }
}

/**
 * Most of a request body accessd throws away after answering before it all arrived (HTTP/1.1
 * and HTTP/2). A refusal of a body too large reads at most its limit (1 MiB on the API) first.
 */
export const maxDiscardedBodyBytes = 8 * 1024 * 1024;

/**
 * After an answer given before the request's body all arrived (a refusal: too large, an unknown
 * listener, a bad signature), the rest of the body is read and thrown away, so that the client,
 * still sending, takes its answer and the connection goes on. HTTP/1.1: a socket closed with
 * bytes unread is reset, and the client's reads fail with ECONNRESET (2 of 5 chunked 2 MB bodies
 * sent to the API lost their 413 so). HTTP/2: a body left unread holds the client's flow-control
 * window shut and the stream open (a stream reset after the answer instead, as RFC 9113 8.1
 * allows, can overtake a gRPC answer's trailers: grpc-js then waited for its deadline, and Node's
 * client waits for good on a NO_ERROR reset while it still has bytes to send). At most
 * `maxDiscardedBodyBytes` and `timeoutMs`; past either, `cut` ends the connection or stream.
 */
function discardRestOfBody(req: NodeRequest, timeoutMs: number, cut: () => void): void {
  let discarded = 0;
  const timer = setTimeout(cut, timeoutMs).unref();
  const stop = (): void => clearTimeout(timer);
  req.on("data", (chunk: Buffer) => {
    discarded += chunk.length;
    if (discarded > maxDiscardedBodyBytes) {
      stop();
      cut();
    }
  });
  req.once("end", stop);
  req.once("close", stop);
  req.resume();
}

/** `facts.protocol` is read when the deadline passes: by then the route has named the protocol. */
function cutIncompleteRequest(req: NodeRequest, res: NodeResponse, timeoutMs: number, facts: RequestFacts): void {
  facts.cutByDeadline = true; // before the request's destroy() aborts a call in progress
  if (res instanceof Http2ServerResponse) {
    // The body's reader must fail: reset, an HTTP/2 stream ends its request body as if complete,
    // and a handler went on to act on what had come (an app created after its client got 408).
    // An HTTP/2 request's destroy() leaves its stream open: the stream itself is reset.
    req.on("error", () => {}); // its reader, if one is reading, meets the error; nobody else need
    if (res.headersSent) {
      // A streaming call whose answer has begun (a reflection stream gone quiet): its handler
      // meets DEADLINE_EXCEEDED reading its next message and ends the stream with that status,
      // and the stream is reset once that is out (at most a second later), as a 408's. A bare
      // reset read CANCELLED to gRPC clients, as if they had cancelled it themselves.
      req.destroy(new ConnectError(`no message arrived within ${timeoutMs} ms`, Code.DeadlineExceeded));
      cutOnceAnswered(res);
      return;
    }
    req.destroy(new RequestTimeoutError(timeoutMs));
    res.stream.once("finish", () => cutOnceAnswered(res));
  } else {
    if (res.headersSent) {
      req.destroy();
      return;
    }
    res.once("finish", () => req.destroy());
  }
  const message = `the request body did not arrive within ${timeoutMs} ms`;
  const headers: Record<string, string> = isHttp2Request(req) ? {} : { connection: "close" };
  if (facts.answerLateBody !== undefined) facts.answerLateBody(res, message, headers);
  else writeErrorInProtocol(req, res, rpcProtocolOf(facts), Code.DeadlineExceeded, message, 408, headers);
}

/**
 * A client that does not take its answer (it stops reading, or over HTTP/2 grants no
 * flow-control window) would otherwise hold the answer in the server's memory and its connection
 * or stream open for good: 1,000 HTTP/2 streams asking for /openapi.json with a window of 0 took
 * the server from 86 to 190 MB, and neither the streams nor their sessions were ever closed; 20
 * HTTP/1.1 connections that sent 200 requests each and read nothing stayed open for good.
 *
 * HTTP/2: one timer per stream, every `timeoutMs` while the stream is open: an answer with bytes
 * still waiting at two checks in a row is reset (RST_STREAM CANCEL), so between one and two
 * `timeoutMs` after the client stopped taking it. A stream that is only idle (a
 * `grpc.health.v1.Health/Watch` waiting for a change, a handler still working) has nothing waiting
 * and stays. (Node's own stream timeout is not used: it is put off while anything else is sent
 * on the session, so a client could keep it from firing with PINGs.)
 */
function enforceHttp2Deadlines(req: NodeRequest, res: Http2ServerResponse, timeoutMs: number, facts: RequestFacts, stopping: () => boolean): void {
  const { stream } = res;
  let waitingAtLastCheck = false;
  const timer = setTimeout(() => afterPendingReads(check), timeoutMs).unref();
  function check(): void {
    if (stream.closed || stream.destroyed) return;
    // Sent to its end by the client (`req.complete` is also false while a handler leaves the body unread).
    if (!req.complete && stream.state.remoteClose !== 1) {
      // A stream of messages (reflection) is timed message by message: one that came within the
      // last timeoutMs keeps it, so it is cut between one and two timeoutMs after its last.
      const lastMessageAt = facts.streamedMessageAt;
      if (lastMessageAt !== undefined && performance.now() - lastMessageAt < timeoutMs) {
        timer.refresh();
        return;
      }
      cutIncompleteRequest(req, res, timeoutMs, facts);
      return;
    }
    const waiting = stream.writableLength > 0;
    if (waiting && waitingAtLastCheck) {
      stream.close(http2Constants.NGHTTP2_CANCEL);
      return;
    }
    waitingAtLastCheck = waiting;
    timer.refresh();
  }
  res.once("close", () => clearTimeout(timer));
  // An answer given before the client sent all of its body: the rest is read and discarded.
  // Left unread, a body that outgrew the flow-control window kept the client waiting for good and
  // its stream open. A request that can no longer be read (connect-es destroys one whose message
  // is too large) has its stream reset once the answer is out, as a 408's.
  stream.once("finish", () => {
    if (stream.closed || stream.destroyed || stream.state.remoteClose === 1) return;
    // While the server stops, a stream answered whose client still holds its side open (a
    // reflection stream ended at shutdown: it is bidirectional) is reset once the answer is out,
    // rather than waited for: it held the drain its 10 s.
    if (req.destroyed || stopping()) cutOnceAnswered(res);
    else discardRestOfBody(req, timeoutMs, () => stream.close(http2Constants.NGHTTP2_CANCEL));
  });
}

/**
 * A stream whose request can no longer be read (a 408's, one connect-es destroyed): reset
 * (CANCEL) once its answer has been sent to its end, trailers and all (polled, at most a second).
 * A reset sent with the answer still queued could overtake it.
 */
function cutOnceAnswered(res: Http2ServerResponse, triesLeft = 100): void {
  const { stream } = res;
  if (stream.closed || stream.destroyed) return;
  if (stream.state.localClose === 1 || triesLeft === 0) stream.close(http2Constants.NGHTTP2_CANCEL);
  else setTimeout(() => cutOnceAnswered(res, triesLeft - 1), 10).unref();
}

const stalledAnswerTimer = Symbol("accessd.stalledAnswerTimer");

/**
 * HTTP/1.1: once an answer is handed to the socket, the bytes the client has not taken wait in
 * the socket's buffer; if it has not drained `timeoutMs` later the connection is destroyed. One
 * timer per connection, however many pipelined answers wait, and none while the socket keeps up.
 */
function cutStalledHttp1Answer(req: NodeRequest, res: NodeResponse, timeoutMs: number): void {
  const socket = req.socket as Socket & { [stalledAnswerTimer]?: NodeJS.Timeout };
  res.once("finish", () => {
    if (socket.destroyed || socket.writableLength === 0 || socket[stalledAnswerTimer] !== undefined) return;
    const timer = setTimeout(() => socket.destroy(), timeoutMs).unref();
    socket[stalledAnswerTimer] = timer;
    const clear = (): void => {
      clearTimeout(timer);
      socket[stalledAnswerTimer] = undefined;
      socket.off("drain", clear);
      socket.off("close", clear);
    };
    socket.once("drain", clear);
    socket.once("close", clear);
  });
}
