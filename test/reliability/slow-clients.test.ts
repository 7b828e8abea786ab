import { once } from "node:events";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import * as grpc from "@grpc/grpc-js";
import { connect as http2Connect, constants as http2Constants, type ClientHttp2Session, type ClientHttp2Stream } from "node:http2";
import { Agent, request as httpRequest } from "node:http";
import { connect } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  HealthCheckRequestSchema,
  HealthCheckResponse_ServingStatus,
  HealthCheckResponseSchema,
  type HealthCheckRequest,
  type HealthCheckResponse,
} from "../../gen/grpc/health/v1/health_pb.js";
import { rawRequest } from "../support/raw-http.js";
import { until } from "../support/served-process.js";
import { startTestServer, type TestServer } from "../support/test-server.js";
import { createWebhookAutomation, hmacHeaders, postWebhook, type WebhookAutomation } from "../support/webhook-fixtures.js";

const requestTimeoutMs = 1_000;
/** How late past the timeout a cut may come (timers on a busy 2-core machine). */
const slackMs = 1_500;

describe("slow clients", () => {
  let server: TestServer;
  let hook: WebhookAutomation;

  beforeAll(async () => {
    server = await startTestServer({ requestTimeoutMs });
    hook = await createWebhookAutomation(server, { authMethod: "HMAC" });
  });
  afterAll(() => server.close());

  /** Signed headers and a Content-Length promising more body than will ever come. */
  function slowHead(): string {
    const body = '{"slow":true}';
    const lines = Object.entries(hmacHeaders(hook, body)).map(([k, v]) => `${k}: ${v}\r\n`).join("");
    return `POST ${new URL(hook.postUrl).pathname} HTTP/1.1\r\nHost: 127.0.0.1\r\n${lines}Content-Length: 10000\r\n\r\n`;
  }

  /** An HTTP/2 webhook stream, signed, whose Content-Length promises more body than it sends. */
  function stalledWebhookStream(client: ClientHttp2Session): ClientHttp2Stream {
    const body = '{"slow":true}';
    const stream = client.request({
      ":method": "POST",
      ":path": new URL(hook.postUrl).pathname,
      ...Object.fromEntries(Object.entries(hmacHeaders(hook, body)).map(([k, v]) => [k.toLowerCase(), v])),
      "content-length": "10000",
    });
    stream.write('{"slo');
    return stream;
  }

  it("cuts connections that stall or trickle the body after the request timeout, while other senders keep being answered", async () => {
    const stalled = Array.from({ length: 15 }, () => rawRequest(server.address.port, [slowHead(), '{"slo'], { timeoutMs: 10_000 }));
    const trickled = Array.from({ length: 15 }, () =>
      rawRequest(server.address.port, [slowHead(), ...'{"slow":true,"padding":"'.split(""), ..."x".repeat(200).split("")], { gapMs: 100, timeoutMs: 10_000 }),
    );
    const slow = Promise.all([...stalled, ...trickled]);

    // Meanwhile four senders post valid webhooks back to back for longer than the timeout.
    const latencies: number[] = [];
    const statuses: number[] = [];
    const sendUntil = Date.now() + requestTimeoutMs + 1_000;
    await Promise.all(
      Array.from({ length: 4 }, async () => {
        while (Date.now() < sendUntil) {
          const body = JSON.stringify({ at: Date.now() });
          const started = performance.now();
          const answer = await postWebhook(hook.postUrl, hmacHeaders(hook, body), body);
          latencies.push(performance.now() - started);
          statuses.push(answer.status);
        }
      }),
    );

    const answers = await slow;
    for (const answer of answers) {
      expect(answer?.status).toBe(408);
      expect(JSON.parse(answer?.body.toString() ?? "")).toEqual({
        code: "deadline_exceeded",
        message: `the request body did not arrive within ${requestTimeoutMs} ms`,
      });
      expect(answer?.headers.connection).toBe("close");
      expect(answer?.ms).toBeGreaterThanOrEqual(requestTimeoutMs - 50);
      expect(answer?.ms).toBeLessThan(requestTimeoutMs + slackMs);
    }
    expect(statuses.length).toBeGreaterThan(40);
    expect(statuses.every((s) => s === 200)).toBe(true);
    // A sender held up behind a slow one would wait for its cut (about requestTimeoutMs): none did.
    expect(Math.max(...latencies)).toBeLessThan(requestTimeoutMs / 2);
    // Each was counted and logged as the 408 its sender read (it was a 400 body_incomplete there).
    const metrics = await (await fetch(`${server.url}/metrics`)).text();
    expect(metrics).toMatch(/accessd_webhook_verdicts_total\{[^}]*reason="body_timeout"[^}]*status="408"[^}]*\} 30/);
    expect(metrics).not.toMatch(/reason="body_incomplete"/);
  });

  it("cuts a connection that trickles its request headers with a JSON 408", async () => {
    const head = slowHead();
    const started = Date.now();
    const answer = await rawRequest(server.address.port, head.slice(0, 60).split(""), { gapMs: 100, timeoutMs: 10_000 });
    expect(answer?.status).toBe(408);
    expect(JSON.parse(answer?.body.toString() ?? "")).toEqual({
      code: "deadline_exceeded",
      message: "the request was not received in time",
    });
    expect(Date.now() - started).toBeLessThan(requestTimeoutMs + slackMs);
  });

  it("closes connections that send nothing, or only part of the HTTP/2 preface, and HTTP/2 sessions left idle, while other senders keep being answered", async () => {
    const started = Date.now();
    /** A raw connection that writes `first` (maybe nothing) and then stays silent; resolves with when it was closed. */
    const silent = (first: string) =>
      new Promise<number>((resolve) => {
        const socket = connect(server.address.port, "127.0.0.1", () => {
          if (first !== "") socket.write(first);
        });
        socket.resume();
        socket.on("error", () => {}); // a reset is a close too; when it came is what counts
        socket.on("close", () => resolve(Date.now() - started));
      });
    const quiet = [
      ...Array.from({ length: 20 }, () => silent("")),
      ...Array.from({ length: 20 }, () => silent("PRI * HTTP/2.0\r\n")),
      ...Array.from({ length: 10 }, () => silent("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")), // preface, then no SETTINGS
    ];
    const idleSession = http2Connect(server.url);
    idleSession.on("error", () => {});
    const health = idleSession.request({ ":path": "/healthz" });
    health.resume();
    expect(((await once(health, "response")) as [Record<string, unknown>])[0][":status"]).toBe(200);
    const goaway = once(idleSession, "goaway").then(() => Date.now() - started);

    const statuses: number[] = [];
    while (Date.now() - started < requestTimeoutMs + 200) {
      const body = JSON.stringify({ at: Date.now() });
      statuses.push((await postWebhook(hook.postUrl, hmacHeaders(hook, body), body)).status);
    }
    // Silent connections: the headers timeout (the request timeout here); idle sessions: twice it.
    for (const closedAfter of await Promise.all(quiet)) {
      expect(closedAfter).toBeGreaterThanOrEqual(requestTimeoutMs - 50);
      expect(closedAfter).toBeLessThan(requestTimeoutMs + slackMs);
    }
    const idleClosedAfter = await goaway;
    expect(idleClosedAfter).toBeGreaterThanOrEqual(2 * requestTimeoutMs - 50);
    expect(idleClosedAfter).toBeLessThan(2 * requestTimeoutMs + slackMs);
    idleSession.close();
    expect(statuses.length).toBeGreaterThan(10);
    expect(statuses.every((s) => s === 200)).toBe(true);
  });

  it("keeps an HTTP/2 session with an open stream (a grpc-js health Watch with keepalive) past the idle limit", async () => {
    const client = new grpc.Client(`${server.address.address}:${server.address.port}`, grpc.credentials.createInsecure(), {
      "grpc.keepalive_time_ms": 300,
      "grpc.keepalive_permit_without_calls": 1,
    });
    const events: string[] = [];
    const watch = client.makeServerStreamRequest(
      "/grpc.health.v1.Health/Watch",
      (m: HealthCheckRequest) => Buffer.from(toBinary(HealthCheckRequestSchema, m)),
      (bytes: Buffer) => fromBinary(HealthCheckResponseSchema, bytes),
      create(HealthCheckRequestSchema, {}),
    );
    watch.on("data", (m: HealthCheckResponse) => events.push(`status ${m.status}`));
    watch.on("error", (e: grpc.ServiceError) => events.push(`error ${e.code} ${e.details}`));
    try {
      // Idle sessions are closed after twice the request timeout; this one holds a stream for
      // 4.5x (the idle timer fires twice with it open).
      await new Promise((r) => setTimeout(r, 4.5 * requestTimeoutMs));
      expect(events).toEqual([`status ${HealthCheckResponse_ServingStatus.SERVING}`]);
    } finally {
      watch.cancel();
      client.close();
    }
  });

  it("closes an HTTP/2 session within the idle limit once its long stream ended (a session cannot earn an exemption)", async () => {
    const session = http2Connect(server.url);
    session.on("error", () => {});
    const watch = session.request({ ":method": "POST", ":path": "/grpc.health.v1.Health/Watch", "content-type": "application/grpc" });
    watch.on("error", () => {});
    watch.resume();
    watch.end(Buffer.from([0, 0, 0, 0, 0])); // one empty HealthCheckRequest
    const goaway = once(session, "goaway");
    await new Promise((r) => setTimeout(r, 4.5 * requestTimeoutMs)); // two idle periods with the stream open
    expect(session.closed || session.destroyed).toBe(false);
    const ended = Date.now();
    watch.close(http2Constants.NGHTTP2_CANCEL);
    const closedAfter = await Promise.race([
      goaway.then(() => Date.now() - ended),
      new Promise<number>((r) => setTimeout(() => r(Infinity), 3 * requestTimeoutMs + slackMs)),
    ]);
    expect(closedAfter).toBeLessThan(2 * requestTimeoutMs + slackMs);
    session.close();
  });

  it("holds at most 256 streams of one HTTP/2 connection at once, so stalled ones cannot pile up", async () => {
    const client = http2Connect(server.url);
    client.on("error", () => {});
    try {
      await once(client, "remoteSettings");
      expect(client.remoteSettings.maxConcurrentStreams).toBe(256);
      // 400 webhooks whose bodies never finish, on one connection: the server takes 256 of them
      // (Node's own limit would take all 400) and cuts them at the request timeout.
      const cutAt: number[] = [];
      const streams = Array.from({ length: 400 }, () => {
        const stream = stalledWebhookStream(client);
        stream.on("error", () => {});
        stream.on("response", (headers) => {
          if (headers[":status"] === 408) cutAt.push(Date.now());
        });
        return stream;
      });
      // Other senders are served meanwhile.
      const ok = JSON.stringify({ while: "a connection holds 256 stalled streams" });
      expect((await postWebhook(hook.postUrl, hmacHeaders(hook, ok), ok)).status).toBe(200);

      await until("the stalled streams were cut", () => cutAt.length > 0);
      await new Promise((r) => setTimeout(r, requestTimeoutMs / 2));
      expect(cutAt.length).toBe(256);
      for (const stream of streams) stream.destroy();
    } finally {
      client.destroy();
    }
  });

  it("cuts an HTTP/2 stream whose body stalls with 408, and the session keeps serving", async () => {
    const client = http2Connect(server.url);
    try {
      const stream = stalledWebhookStream(client);
      const started = Date.now();
      const [headers] = (await once(stream, "response")) as [Record<string, string | number>];
      expect(headers[":status"]).toBe(408);
      expect(Date.now() - started).toBeLessThan(requestTimeoutMs + slackMs);
      // And the stream is reset once the 408 is sent: a request's destroy() left it open for good.
      await once(stream, "close");
      expect(stream.rstCode).toBe(http2Constants.NGHTTP2_CANCEL);

      const health = client.request({ ":path": "/healthz" });
      const [answer] = (await once(health, "response")) as [Record<string, string | number>];
      expect(answer[":status"]).toBe(200);
      health.destroy();
    } finally {
      client.close();
    }
  });

  describe("a body refused before it all arrived", () => {
    /** POSTs `size` bytes to `path` in 64 KB chunks (no Content-Length), on `agent`'s connection. */
    function postChunked(path: string, size: number, headers: Record<string, string>, agent: Agent): Promise<{ status: number | string; body: string; reused: boolean }> {
      return new Promise((resolve) => {
        const req = httpRequest({ host: "127.0.0.1", port: server.address.port, method: "POST", path, agent, headers: { ...headers, "transfer-encoding": "chunked" } }, (res) => {
          let body = "";
          res.on("data", (chunk: Buffer) => (body += chunk.toString()));
          res.on("end", () => resolve({ status: res.statusCode ?? 0, body, reused: req.reusedSocket }));
        });
        req.on("error", (error: NodeJS.ErrnoException) => resolve({ status: error.code ?? "error", body: "", reused: req.reusedSocket }));
        const chunk = Buffer.alloc(64 * 1024, 0x20);
        let sent = 0;
        const pump = (): void => {
          while (sent < size) {
            sent += chunk.length;
            if (!req.write(chunk)) {
              req.once("drain", pump);
              return;
            }
          }
          req.end();
        };
        pump();
      });
    }

    it("answers it over HTTP/1.1 every time (no connection reset before the answer), and the connection serves the next request", async () => {
      const agent = new Agent({ keepAlive: true, maxSockets: 1 });
      try {
        const json = { ...server.headers, "content-type": "application/json" };
        const answers = [];
        for (let i = 0; i < 5; i++) answers.push(await postChunked("/api/v1/apps", 2_000_000, json, agent));
        const hookBody = "x".repeat(100);
        for (let i = 0; i < 5; i++) answers.push(await postChunked(new URL(hook.postUrl).pathname, 300_000, hmacHeaders(hook, hookBody), agent));
        expect(answers.map((a) => a.status)).toEqual(Array(10).fill(413));
        // The rest of each body was read and discarded: the next request rides the same connection.
        const next = await new Promise<{ status: number; reused: boolean }>((resolve, reject) => {
          const req = httpRequest({ host: "127.0.0.1", port: server.address.port, path: "/healthz", agent }, (res) => {
            res.resume();
            res.on("end", () => resolve({ status: res.statusCode ?? 0, reused: req.reusedSocket }));
          });
          req.on("error", reject);
          req.end();
        });
        expect(next).toEqual({ status: 200, reused: true });
      } finally {
        agent.destroy();
      }
    });

    it("answers it over HTTP/2 and then reads the rest, so the stream ends; past 8 MiB more, or a request connect-es destroyed, the stream is reset", async () => {
      const client = http2Connect(server.url);
      client.on("error", () => {});
      const post = async (size: number, path = "/api/v1/apps") => {
        const stream = client.request({ ":method": "POST", ":path": path, "content-type": "application/json", ...server.headers });
        let status: unknown;
        stream.on("response", (headers) => (status = headers[":status"]));
        stream.resume();
        stream.on("error", () => {});
        const chunk = Buffer.alloc(64 * 1024, 0x20);
        let sent = 0;
        const pump = (): void => {
          while (sent < size && !stream.destroyed) {
            sent += chunk.length;
            if (!stream.write(chunk)) {
              stream.once("drain", pump);
              return;
            }
          }
          if (!stream.destroyed) stream.end();
        };
        pump();
        const closed = await Promise.race([once(stream, "close").then(() => "closed"), new Promise((resolve) => setTimeout(() => resolve("still open"), 5_000))]);
        return { status, closed, rstCode: stream.rstCode };
      };
      try {
        // Before: the client's upload waited for a window that never came, and the stream stayed open.
        expect(await post(2_000_000)).toEqual({ status: 413, closed: "closed", rstCode: http2Constants.NGHTTP2_NO_ERROR });
        expect(await post(12_000_000)).toEqual({ status: 413, closed: "closed", rstCode: http2Constants.NGHTTP2_CANCEL });
        // connect-es refuses a message over its limit and destroys the request: reset once answered.
        expect(await post(2_000_000, "/svc.api.app.v1.Apps/Create")).toEqual({ status: 429, closed: "closed", rstCode: http2Constants.NGHTTP2_CANCEL });
      } finally {
        client.close();
      }
    });

    it("answers grpc-js a message over the limit with RESOURCE_EXHAUSTED at once, trailers and all", async () => {
      const client = new grpc.Client(`127.0.0.1:${server.address.port}`, grpc.credentials.createInsecure());
      const metadata = new grpc.Metadata();
      metadata.set("authorization", server.headers.authorization ?? "");
      try {
        const started = Date.now();
        const error = await new Promise<grpc.ServiceError | null>((resolve) => {
          client.makeUnaryRequest("/svc.api.app.v1.Apps/Create", (bytes: Buffer) => bytes, (bytes: Buffer) => bytes, Buffer.alloc(2_000_000, 1), metadata, { deadline: Date.now() + 10_000 }, (err) => resolve(err));
        });
        expect(error?.code).toBe(grpc.status.RESOURCE_EXHAUSTED);
        expect(Date.now() - started).toBeLessThan(3_000);
      } finally {
        client.close();
      }
    });
  });

  it("does nothing with an HTTP/2 body cut by the deadline, even one that looks whole (REST and Connect: no app after the 408)", async () => {
    const client = http2Connect(server.url);
    client.on("error", () => {});
    try {
      for (const path of ["/api/v1/apps", "/svc.api.app.v1.Apps/Create"]) {
        const displayName = `after the 408 ${path}`;
        const stream = client.request({ ":method": "POST", ":path": path, "content-type": "application/json", ...server.headers });
        stream.on("error", () => {});
        stream.write(JSON.stringify({ displayName })); // all of it, but no END_STREAM
        const [headers] = (await once(stream, "response")) as [Record<string, string | number>];
        expect(headers[":status"]).toBe(408);
        await once(stream, "close");
        // Reset, the stream once ended its request body as if it were complete, and the handler created the app.
        await new Promise((resolve) => setTimeout(resolve, 200));
        const listed = (await (await server.call("GET", "/api/v1/apps?page_size=100")).json()) as { list: { displayName: string }[] };
        expect(listed.list.map((app) => app.displayName)).not.toContain(displayName);
      }
    } finally {
      client.close();
    }
  });

  it("answers a gRPC, gRPC-Web or Connect streaming call whose body stalls with DEADLINE_EXCEEDED in its own protocol, not an HTTP 408 its client cannot read", async () => {
    const message = `the request body did not arrive within ${requestTimeoutMs} ms`;
    // A length prefix promising 100 bytes of message, and 10 of them.
    const partialFrame = Buffer.concat([Buffer.from([0, 0, 0, 0, 100]), Buffer.alloc(10)]);
    const client = http2Connect(server.url);
    client.on("error", () => {});
    try {
      const stream = client.request({
        ":method": "POST",
        ":path": "/svc.api.app.v1.Apps/Create",
        "content-type": "application/grpc",
        te: "trailers",
        ...server.headers,
      });
      stream.on("error", () => {});
      stream.write(partialFrame);
      const started = Date.now();
      const [headers, flags] = (await once(stream, "response")) as [Record<string, string | number>, number];
      expect(Date.now() - started).toBeLessThan(requestTimeoutMs + slackMs);
      // Trailers-only: HTTP 200, the status in the one HEADERS frame, which ends the stream.
      expect(headers[":status"]).toBe(200);
      expect(headers["grpc-status"]).toBe(String(grpc.status.DEADLINE_EXCEEDED));
      expect(headers["grpc-message"]).toBe(message);
      expect(headers["content-type"]).toBe("application/grpc");
      expect(headers["x-request-id"]).toBeTruthy();
      expect(flags & http2Constants.NGHTTP2_FLAG_END_STREAM).toBeTruthy();
      await once(stream, "close");

      // A server-streaming call (Health Watch) runs its interceptors before its message arrives:
      // cut, it is counted and logged as what its client was answered, not as `canceled`.
      const deadlineExceededWatches = async () => {
        const metrics = await (await fetch(`${server.url}/metrics`)).text();
        const line = metrics.split("\n").find((l) => l.startsWith("accessd_requests_total{") && l.includes('operation="grpc.health.v1.Health.Watch"') && l.includes('code="deadline_exceeded"'));
        return line === undefined ? 0 : Number(line.split(" ").at(-1));
      };
      const before = await deadlineExceededWatches();
      const watch = client.request({ ":method": "POST", ":path": "/grpc.health.v1.Health/Watch", "content-type": "application/grpc", te: "trailers" });
      watch.on("error", () => {});
      watch.write(partialFrame);
      const [watchHeaders] = (await once(watch, "response")) as [Record<string, string | number>];
      expect(watchHeaders["grpc-status"]).toBe(String(grpc.status.DEADLINE_EXCEEDED));
      await once(watch, "close");
      await until("the cut Watch is counted", async () => (await deadlineExceededWatches()) === before + 1, 3_000);
    } finally {
      client.close();
    }

    // gRPC-Web over HTTP/1.1: the same, in the response headers.
    const head =
      `POST /svc.api.app.v1.Apps/Create HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/grpc-web+proto\r\n` +
      `authorization: ${server.headers.authorization}\r\nContent-Length: 105\r\n\r\n`;
    const answer = await rawRequest(server.address.port, [head, partialFrame], { timeoutMs: 10_000 });
    expect(answer?.status).toBe(200);
    expect(answer?.headers["grpc-status"]).toBe(String(grpc.status.DEADLINE_EXCEEDED));
    expect(answer?.headers["grpc-message"]).toBe(message);
    expect(answer?.headers.connection).toBe("close");
    expect(answer?.ms).toBeLessThan(requestTimeoutMs + slackMs);

    // A Connect streaming call (Health Watch): HTTP 200 and one end-of-stream message holding the
    // error, where Connect clients read a stream's error (a 408 reached connect-es as `unknown`).
    const connectHead = (contentType: string) =>
      `POST /grpc.health.v1.Health/Watch HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: ${contentType}\r\n` +
      `Content-Length: 105\r\n\r\n`;
    const [streamed, mixedCase] = await Promise.all(
      ["application/connect+json", "Application/Connect+JSON"].map((type) => rawRequest(server.address.port, [connectHead(type), partialFrame], { timeoutMs: 10_000 })),
    );
    // Media types are case-insensitive, and connect-es takes this one: the same answer.
    expect(mixedCase?.status).toBe(200);
    expect(mixedCase?.body.subarray(5).toString()).toBe(streamed?.body.subarray(5).toString());
    expect(streamed?.status).toBe(200);
    expect(streamed?.headers["content-type"]).toBe("application/connect+json");
    const frame = streamed?.body ?? Buffer.alloc(0);
    expect(frame[0]).toBe(0x02); // end of stream
    expect(frame.readUInt32BE(1)).toBe(frame.length - 5);
    expect(JSON.parse(frame.subarray(5).toString())).toEqual({ error: { code: "deadline_exceeded", message } });
  });

  it("closes an HTTP/1.1 connection whose client stops reading its answers after the request timeout", async () => {
    const oneAnswer = (await (await fetch(`${server.url}/openapi.json`)).arrayBuffer()).byteLength;
    const socket = connect({ port: server.address.port, host: "127.0.0.1" });
    await once(socket, "connect");
    let received = 0;
    socket.on("data", (chunk: Buffer) => (received += chunk.length));
    const closed = once(socket, "close");
    // 200 answers of about 90 KB asked for at once, none read: more than the kernel's buffers hold.
    socket.pause();
    socket.write("GET /openapi.json HTTP/1.1\r\nhost: accessd\r\n\r\n".repeat(200));

    // Other clients are answered meanwhile.
    await new Promise((r) => setTimeout(r, requestTimeoutMs + slackMs));
    expect((await fetch(`${server.url}/healthz`)).status).toBe(200);

    // The client reads again: what the kernel held arrives, then the end, well short of 200 answers.
    socket.resume();
    const resumedAt = Date.now();
    await closed;
    expect(Date.now() - resumedAt).toBeLessThan(slackMs);
    expect(received).toBeLessThan(200 * oneAnswer);
  });

  it("resets an HTTP/2 stream whose client grants no window for its answer, and leaves a stream that is only idle open", async () => {
    const stalled = http2Connect(server.url, { settings: { initialWindowSize: 0 } });
    const watching = http2Connect(server.url);
    try {
      const started = Date.now();
      const streams = Array.from({ length: 20 }, () => stalled.request({ ":path": "/openapi.json" }));
      const resets = streams.map((stream) => {
        stream.on("error", () => {});
        return once(stream, "close").then(() => ({ code: stream.rstCode, ms: Date.now() - started }));
      });
      // A Health/Watch stream: it gets its first status, then waits for a change with nothing to send.
      const watch = watching.request({ ":method": "POST", ":path": "/grpc.health.v1.Health/Watch", "content-type": "application/grpc", te: "trailers" });
      watch.end(Buffer.from([0, 0, 0, 0, 0]));
      let watchBytes = 0;
      watch.on("data", (chunk: Buffer) => (watchBytes += chunk.length));

      for (const reset of await Promise.all(resets)) {
        expect(reset.code).toBe(8); // NGHTTP2_CANCEL
        expect(reset.ms).toBeGreaterThanOrEqual(requestTimeoutMs - 50);
        expect(reset.ms).toBeLessThan(2 * requestTimeoutMs + slackMs);
      }
      await new Promise((r) => setTimeout(r, 2 * requestTimeoutMs));
      expect(watchBytes).toBeGreaterThan(0);
      expect(watch.closed).toBe(false);
      watch.close();
    } finally {
      stalled.destroy();
      watching.destroy();
    }
  });
});

describe("slow clients under a long request timeout", () => {
  it("cuts a connection that trickles its request headers after 10 s even when ACCESSD_REQUEST_TIMEOUT is 30 s (slowloris)", async () => {
    const server = await startTestServer({ requestTimeoutMs: 30_000 });
    try {
      const head = `GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: ${"x".repeat(100)}\r\n\r\n`;
      const started = Date.now();
      const answer = await rawRequest(server.address.port, head.split(""), { gapMs: 200, timeoutMs: 20_000 });
      const took = Date.now() - started;
      expect(answer?.status).toBe(408);
      expect(took).toBeGreaterThanOrEqual(10_000 - 50);
      expect(took).toBeLessThan(10_000 + slackMs);
    } finally {
      await server.close();
    }
  }, 30_000);
});
