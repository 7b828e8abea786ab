import { randomUUID } from "node:crypto";
import { once } from "node:events";
import { connect as netConnect } from "node:net";
import { connect as http2Connect, constants as http2Constants } from "node:http2";
import { Code, ConnectError, createClient, createContextValues, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Health } from "../gen/grpc/health/v1/health_pb.js";
import { Apps } from "../gen/svc/api/app/v1/app_pb.js";
import { ManualClock } from "../src/clock.js";
import { reusedWhenSlow } from "../src/observability/reused-when-slow.js";
import { Metrics } from "../src/observability/metrics.js";
import { metricsInterceptor } from "../src/observability/metrics-interceptor.js";
import { requestFactsKey } from "../src/server/request-context.js";
import { busyFor } from "./support/busy-thread.js";
import { rawRequest } from "./support/raw-http.js";
import { bootstrapAuthorization, startLoggedAccessd, startTestServer, testBootstrapClient, type TestServer } from "./support/test-server.js";
import { createWebhookAutomation, hmacHeaders, postWebhook } from "./support/webhook-fixtures.js";

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer();
});
afterAll(() => server.close());

/** The value of the sample `name{labels}` in a Prometheus text exposition; 0 when absent. */
function sample(text: string, name: string, labels: Record<string, string> = {}): number {
  for (const line of text.split("\n")) {
    const match = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (match === null || match[1] !== name) continue;
    const found = Object.fromEntries([...(match[2] ?? "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((m) => [m[1], m[2]]));
    if (JSON.stringify(Object.entries(found).sort()) === JSON.stringify(Object.entries(labels).sort())) {
      return Number(match[3]);
    }
  }
  return 0;
}

async function scrape(target: { url: string } = server): Promise<string> {
  const res = await fetch(`${target.url}/metrics`); // no token: Prometheus scrapes bare
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toMatch(/^text\/plain; version=0\.0\.4/);
  return res.text();
}

describe("/metrics", () => {
  it("counts API requests by protocol, operation and code, and times them", async () => {
    const before = await scrape();
    const create = "svc.api.app.v1.Apps.Create";
    const get = "svc.api.app.v1.Apps.Get";

    expect((await server.call("POST", "/api/v1/apps", { displayName: "Metered" })).status).toBe(200);
    expect((await server.call("POST", "/api/v1/apps", { displayName: "Metered 2" })).status).toBe(200);
    expect((await server.call("GET", `/api/v1/apps/${randomUUID()}`)).status).toBe(404);
    expect((await fetch(`${server.url}/api/v1/apps/x`)).status).toBe(401); // no token
    const grpc = createClient(Apps, createGrpcTransport({ baseUrl: server.url }));
    await grpc.create({ displayName: "Over gRPC" }, { headers: server.headers });
    const connect = createClient(Apps, createConnectTransport({ baseUrl: server.url, httpVersion: "1.1" }));
    await connect.create({ displayName: "Over Connect" }, { headers: server.headers });

    const after = await scrape();
    const delta = (labels: Record<string, string>): number =>
      sample(after, "accessd_requests_total", labels) - sample(before, "accessd_requests_total", labels);
    expect(delta({ protocol: "rest", operation: create, code: "ok" })).toBe(2);
    expect(delta({ protocol: "rest", operation: get, code: "not_found" })).toBe(1);
    expect(delta({ protocol: "rest", operation: get, code: "unauthenticated" })).toBe(1);
    expect(delta({ protocol: "grpc", operation: create, code: "ok" })).toBe(1);
    expect(delta({ protocol: "connect", operation: create, code: "ok" })).toBe(1);

    const timed = (text: string): number =>
      sample(text, "accessd_request_duration_seconds_count", { protocol: "rest", operation: create });
    expect(timed(after) - timed(before)).toBe(2);
    const bucket = (text: string): number =>
      sample(text, "accessd_request_duration_seconds_bucket", { protocol: "rest", operation: create, le: "+Inf" });
    expect(bucket(after) - bucket(before)).toBe(2);
    expect(sample(after, "accessd_request_duration_seconds_sum", { protocol: "rest", operation: create })).toBeGreaterThan(0);
  });

  it("counts and logs API requests answered before their handler: REST and Connect bodies refused, unknown paths and methods", async () => {
    const { accessd: own, lines: logLines } = await startLoggedAccessd("info");
    try {
      // With a token: a call without one is refused before its body is read (401).
      const authorization = await bootstrapAuthorization(own.url);
      const post = (path: string, body: string, contentType = "application/json") =>
        fetch(`${own.url}${path}`, { method: "POST", headers: { ...authorization, "content-type": contentType, "x-request-id": `refused-${path.length}-${body.length}` }, body });
      expect((await post("/api/v1/apps", "{not json")).status).toBe(400);
      expect((await post("/api/v1/apps", "x", "text/plain")).status).toBe(415);
      expect((await fetch(`${own.url}/api/v1/no-such-thing`)).status).toBe(404);
      expect((await fetch(`${own.url}/api/v1/apps`, { method: "PATCH" })).status).toBe(405);
      expect((await post("/svc.api.app.v1.Apps/Create", "{not json")).status).toBe(400);
      // Refused by connect-es's decoder under REST (an unknown field, an enum name that is none).
      expect((await post("/api/v1/apps", '{"nme":"x"}')).status).toBe(400);
      expect((await fetch(`${own.url}/api/v1/automation_executions?state=BOGUS`, { headers: authorization })).status).toBe(400);
      // A gRPC-Web body that is no protobuf: its status is in a trailer frame under HTTP 200.
      const garbled = await fetch(`${own.url}/svc.api.app.v1.Apps/Create`, {
        method: "POST",
        headers: { ...authorization, "content-type": "application/grpc-web+proto" },
        body: new Uint8Array([0, 0, 0, 0, 3, 0xff, 0xff, 0xff]),
      });
      expect(garbled.status).toBe(200);
      await garbled.arrayBuffer();
      // Refusals answered compressed to a client that accepts it (a gRPC-Web trailer frame of
      // 1 KiB or more, a Connect error body): read all the same.
      const longUnknownField = JSON.stringify({ ["x".repeat(3_000)]: 1 });
      const frame = Buffer.concat([Buffer.from([0, 0, 0, 0, 0]), Buffer.from(longUnknownField)]);
      frame.writeUInt32BE(Buffer.byteLength(longUnknownField), 1);
      const gzippedTrailer = await fetch(`${own.url}/svc.api.app.v1.Apps/Create`, {
        method: "POST",
        headers: { ...authorization, "content-type": "application/grpc-web+json", "grpc-accept-encoding": "gzip" },
        body: frame,
      });
      const trailerFrame = Buffer.from(await gzippedTrailer.arrayBuffer());
      expect(trailerFrame[0]).toBe(0x81); // a trailer, compressed
      expect((await post("/svc.api.app.v1.Apps/Create", longUnknownField, "application/json")).status).toBe(400);
      const grpc = createClient(Apps, createGrpcTransport({ baseUrl: own.url }));
      // A method the server does not have, through a client that believes it does.
      const unknownMethod = await fetch(`${own.url}/svc.api.app.v1.Apps/Archive`, {
        method: "POST",
        headers: { "content-type": "application/grpc-web+proto" },
        body: new Uint8Array(5),
      });
      expect(unknownMethod.headers.get("grpc-status")).toBe(String(Code.Unimplemented));
      await grpc.get({ id: "x" }).catch(() => undefined); // no token: the interceptors count it, once
      // Outside /api/: a Connect call to a method the server does not have, and any other path.
      expect((await post("/svc.api.app.v1.Apps/Nope", "{}")).status).toBe(404);
      expect((await fetch(`${own.url}/nothing/here`)).status).toBe(404);
      const text = await scrape(own as TestServer);
      const count = (protocol: string, operation: string, code: string) => sample(text, "accessd_requests_total", { protocol, operation, code });
      expect(count("rest", "unknown", "not_found")).toBe(2);
      expect(count("connect", "unknown", "unimplemented")).toBe(1); // the Connect call to Apps/Nope
      expect(count("rest", "unknown", "unimplemented")).toBe(1); // 405
      expect(count("grpc-web", "unknown", "unimplemented")).toBe(1);
      expect(count("grpc", "svc.api.app.v1.Apps.Get", "unauthenticated")).toBe(1);
      expect(count("rest", "svc.api.app.v1.Apps.Create", "invalid_argument")).toBe(3); // and the unknown field
      expect(count("rest", "svc.api.automations.v1.AutomationExecutions.List", "invalid_argument")).toBe(1);
      expect(count("grpc-web", "svc.api.app.v1.Apps.Create", "internal")).toBe(1); // connect-es's code for it, as grpc-go's
      expect(count("grpc-web", "svc.api.app.v1.Apps.Create", "invalid_argument")).toBe(1); // the compressed trailer
      expect(count("connect", "svc.api.app.v1.Apps.Create", "invalid_argument")).toBe(2);
      expect(sample(text, "accessd_requests_total", { protocol: "grpc-web", operation: "svc.api.app.v1.Apps.Create", code: "ok" })).toBe(0);
      const lines = logLines().filter((line) => line.msg === "rpc");
      expect(lines).toContainEqual(
        expect.objectContaining({ requestId: "refused-12-9", protocol: "rest", procedure: "svc.api.app.v1.Apps.Create", code: "invalid_argument", status: 400, level: 30 }),
      );
      expect(lines).toContainEqual(expect.objectContaining({ protocol: "grpc-web", procedure: "unknown", code: "unimplemented" }));
      expect(lines.filter((line) => line.procedure === "svc.api.app.v1.Apps.Get")).toHaveLength(1);
      expect(lines).toHaveLength(14);
      // None at error level: a client's refusal must not fill the log operators alert on.
      expect(lines.filter((line) => line.level !== 30)).toEqual([]);
    } finally {
      await own.close();
    }
  });

  it("times a refusal to its answer, not to the end of its stream (over HTTP/2 the rest of a refused body is read for as long as the client sends)", async () => {
    const { accessd: own, lines: logLines } = await startLoggedAccessd("info");
    const client = http2Connect(own.url);
    client.on("error", () => {});
    try {
      const stream = client.request({
        ":method": "POST",
        ":path": "/api/v1/apps",
        "content-type": "application/json",
        "x-request-id": "timed-refusal",
        ...(await bootstrapAuthorization(own.url)),
      });
      stream.on("error", () => {});
      stream.resume();
      stream.write(Buffer.alloc(1_200_000, 0x20)); // past the 1 MiB limit: 413 at once
      const [headers] = (await once(stream, "response")) as [Record<string, string | number>];
      expect(headers[":status"]).toBe(413);
      for (let i = 0; i < 8; i++) {
        stream.write(Buffer.alloc(1_000, 0x20)); // and the client goes on sending for a while
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      stream.end();
      await once(stream, "close");
      await new Promise((resolve) => setTimeout(resolve, 50));
    } finally {
      client.close();
      await own.close();
    }
    const line = logLines().find((l) => l.msg === "rpc" && l.requestId === "timed-refusal");
    expect(line).toMatchObject({ code: "resource_exhausted", status: 413 });
    expect(line?.durationMs).toBeLessThan(500); // the stream lasted 800 ms more
  });

  it("logs at info, not as an error, a reflection or Watch message that does not decode or says it is compressed without an encoding (no token needed), and answers it invalid_argument over Connect", async () => {
    const { accessd: own, lines: logLines } = await startLoggedAccessd("info");
    const messages = {
      truncated: Buffer.from([0, 0, 0, 0, 3, 0x0a, 0x05, 0x41]), // a string field 5 bytes long, 1 sent
      "compressed-unnamed": Buffer.from([1, 0, 0, 0, 2, 0x08, 0x01]), // flag 1, and no grpc-encoding named
    };
    const paths = ["/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", "/grpc.health.v1.Health/Watch"];
    const client = http2Connect(own.url);
    client.on("error", () => {});
    try {
      for (const [name, message] of Object.entries(messages)) {
        const grpcTrailers = [];
        for (const path of paths) {
          const stream = client.request({ ":method": "POST", ":path": path, "content-type": "application/grpc", te: "trailers", "x-request-id": `grpc-${name}-${path.length}` });
          stream.on("error", () => {});
          stream.resume();
          stream.end(message);
          grpcTrailers.push((await once(stream, "trailers"))[0] as Record<string, string>);
        }
        // gRPC answers it INTERNAL, as grpc-go does.
        expect(grpcTrailers.map((t) => t["grpc-status"])).toEqual([String(Code.Internal), String(Code.Internal)]);
        // Connect (bidi reflection needs HTTP/2; Watch is served over HTTP/1.1 too): the end-stream frame, first and only.
        const connectStreamEnd = async (path: string): Promise<unknown> => {
          const stream = client.request({ ":method": "POST", ":path": path, "content-type": "application/connect+proto", "x-request-id": `connect-${name}-${path.length}` });
          stream.on("error", () => {});
          const chunks: Buffer[] = [];
          stream.on("data", (chunk: Buffer) => chunks.push(chunk));
          stream.end(message);
          await once(stream, "end");
          const body = Buffer.concat(chunks);
          expect(body[0]).toBe(0x02);
          return JSON.parse(body.subarray(5).toString("utf8"));
        };
        for (const path of paths) {
          expect(await connectStreamEnd(path)).toEqual({
            error: { code: "invalid_argument", message: expect.stringMatching(/^(parse binary: |received compressed envelope)/) },
          });
        }
      }
    } finally {
      client.close();
      await own.close();
    }
    const lines = logLines();
    expect(lines.filter((l) => (l.level as number) >= 50)).toEqual([]);
    const rpcLines = lines.filter((l) => l.msg === "rpc" && typeof l.requestId === "string" && /^(grpc|connect)-/.test(l.requestId));
    const grpc = ["grpc", "internal", 30, false];
    const connect = ["connect", "invalid_argument", 30, false];
    expect(rpcLines.map((l) => [l.protocol, l.code, l.level, "err" in l])).toEqual([grpc, grpc, connect, connect, grpc, grpc, connect, connect]);
  });

  it("logs a call without a token whose body the deadline cut as cut by its deadline, not abandoned by the client", async () => {
    const { accessd: own, lines: logLines } = await startLoggedAccessd("info", { requestTimeoutMs: 1_000 });
    try {
      const port = own.address.port;
      const answer = await rawRequest(port, [
        `POST /svc.api.app.v1.Apps/Create HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\nX-Request-Id: late-no-token\r\n\r\n{"dis`,
      ]);
      expect(answer?.status).toBe(408);
      await expect.poll(() => logLines().filter((l) => l.requestId === "late-no-token").map((l) => l.msg)).toContain("request cut by its deadline before its body arrived");
      expect(logLines().filter((l) => l.requestId === "late-no-token").map((l) => l.msg)).not.toContain("request abandoned by the client before its body arrived");
    } finally {
      await own.close();
    }
  });

  it("ends a Watch at its deadline with DEADLINE_EXCEEDED (gRPC trailers, Connect end-stream) and counts it so, not canceled (it ended OK)", async () => {
    const before = await scrape();
    const client = http2Connect(server.url);
    let trailers: Record<string, string> = {};
    try {
      const stream = client.request({ ":method": "POST", ":path": "/grpc.health.v1.Health/Watch", "content-type": "application/grpc", te: "trailers", "grpc-timeout": "300m" });
      stream.on("error", () => {});
      stream.on("trailers", (t: Record<string, string>) => (trailers = t));
      stream.resume();
      stream.end(Buffer.from([0, 0, 0, 0, 0]));
      await once(stream, "close");
    } finally {
      client.close();
    }
    expect(trailers["grpc-status"]).toBe(String(Code.DeadlineExceeded));
    // Connect over HTTP/1.1: the SERVING message, then the end-stream frame with the error.
    const res = await fetch(`${server.url}/grpc.health.v1.Health/Watch`, {
      method: "POST",
      headers: { "content-type": "application/connect+json", "connect-timeout-ms": "300" },
      body: Buffer.concat([Buffer.from([0, 0, 0, 0, 2]), Buffer.from("{}")]),
    });
    const body = Buffer.from(await res.arrayBuffer());
    const firstLength = body.readUInt32BE(1);
    expect(JSON.parse(body.subarray(5, 5 + firstLength).toString())).toEqual({ status: "SERVING" });
    const end = body.subarray(5 + firstLength);
    expect(end[0]).toBe(0x02);
    expect(JSON.parse(end.subarray(5).toString())).toMatchObject({ error: { code: "deadline_exceeded" } });
    const grpc = { protocol: "grpc", operation: "grpc.health.v1.Health.Watch", code: "deadline_exceeded" };
    const connect = { ...grpc, protocol: "connect" };
    await expect.poll(async () => sample(await scrape(), "accessd_requests_total", grpc) - sample(before, "accessd_requests_total", grpc)).toBe(1);
    await expect.poll(async () => sample(await scrape(), "accessd_requests_total", connect) - sample(before, "accessd_requests_total", connect)).toBe(1);
  });

  it("names the caller's client id on rpc lines, the listener on webhook refusals, and its version when it starts listening", async () => {
    const { accessd: own, lines: logLines } = await startLoggedAccessd("info");
    const listenerId = `no-such-listener-${"x".repeat(100)}`;
    try {
      const token = await fetch(`${own.url}/auth/v1/token`, {
        method: "POST",
        body: new URLSearchParams({ grant_type: "client_credentials", client_id: testBootstrapClient.clientId, client_secret: testBootstrapClient.clientSecret }),
      });
      const { access_token: accessToken } = (await token.json()) as { access_token: string };
      const authorization = `Bearer ${accessToken}`;
      expect((await fetch(`${own.url}/api/v1/apps/${randomUUID()}`, { headers: { authorization } })).status).toBe(404);
      expect((await fetch(`${own.url}/api/v1/apps`, { headers: { authorization: "Bearer not.a.token" } })).status).toBe(401);
      expect((await fetch(`${own.url}/api/v1/webhooks/incoming/${listenerId}`, { method: "POST", body: "{}" })).status).toBe(404);
    } finally {
      await own.close();
    }
    const lines = logLines();
    expect(lines).toContainEqual(expect.objectContaining({ msg: "accessd listening", version: expect.stringMatching(/^\d+\.\d+\.\d+/), pid: process.pid, eventRecords: 0 }));
    expect(lines).toContainEqual(expect.objectContaining({ msg: "rpc", procedure: "svc.api.app.v1.Apps.Get", code: "not_found", clientId: testBootstrapClient.clientId }));
    const unauthenticated = lines.find((line) => line.msg === "rpc" && line.code === "unauthenticated");
    expect(unauthenticated).toBeDefined();
    expect(unauthenticated).not.toHaveProperty("clientId");
    expect(lines).toContainEqual(expect.objectContaining({ msg: "webhook refused", reason: "listener_unknown", listenerId: listenerId.slice(0, 64) }));
  });

  it("counts health checks and measures a streamed Watch until it ends", async () => {
    const before = await scrape();
    const health = createClient(Health, createGrpcTransport({ baseUrl: server.url }));
    await health.check({});
    const abort = new AbortController();
    const cancelled = (async () => {
      for await (const _ of health.watch({}, { signal: abort.signal })) abort.abort(); // cancel after the first status
    })();
    await expect(cancelled).rejects.toThrow(/canceled|aborted/);
    const after = await scrape();
    const check = { protocol: "grpc", operation: "grpc.health.v1.Health.Check", code: "ok" };
    expect(sample(after, "accessd_requests_total", check) - sample(before, "accessd_requests_total", check)).toBe(1);
    await expect
      .poll(async () => sample(await scrape(), "accessd_requests_total", { protocol: "grpc", operation: "grpc.health.v1.Health.Watch", code: "canceled" }))
      .toBe(1);
  });

  it("has the series the README names for alerts at 0 from the start (a series born at 1 is missed by increase() and rate())", async () => {
    const fresh = await startTestServer();
    try {
      const text = await scrape(fresh);
      const present = (name: string, labels: Record<string, string>) =>
        text.includes(`${name}{${Object.entries(labels).map(([k, v]) => `${k}="${v}"`).join(",")}} 0\n`);
      for (const protocol of ["grpc", "grpc-web", "connect", "rest"]) {
        for (const operation of ["svc.api.app.v1.Apps.Create", "svc.api.automations.v1.Automations.Execute", "svc.api.user.v1.Users.List"]) {
          expect(present("accessd_requests_total", { protocol, operation, code: "unavailable" }), `${protocol} ${operation}`).toBe(true);
        }
      }
      expect(present("accessd_webhook_verdicts_total", { reason: "store_unavailable", status: "503" })).toBe(true);
      expect(present("accessd_token_requests_total", { outcome: "temporarily_unavailable" })).toBe(true);
      expect(text).not.toContain('operation="grpc.health.v1.Health.Check",code="unavailable"'); // the API's operations, not the probes'
    } finally {
      await fresh.close();
    }
  });

  it("counts webhook verdicts by reason and status", async () => {
    const before = await scrape();
    const res = await fetch(`${server.url}/api/v1/webhooks/incoming/no-such-listener`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: "{}",
    });
    expect(res.status).toBe(404);
    const after = await scrape();
    const labels = { reason: "listener_unknown", status: "404" };
    expect(sample(after, "accessd_webhook_verdicts_total", labels) - sample(before, "accessd_webhook_verdicts_total", labels)).toBe(1);
  });

  it("counts and logs a webhook request with a method other than POST, refused 405 (it went unseen)", async () => {
    const { accessd: own, lines: logLines } = await startLoggedAccessd("info");
    try {
      const before = await scrape(own);
      const res = await fetch(`${own.url}/api/v1/webhooks/incoming/some-listener`, { headers: { "x-request-id": "webhook-get" } });
      expect(res.status).toBe(405);
      expect(res.headers.get("allow")).toBe("POST");
      const labels = { reason: "method_not_allowed", status: "405" };
      const after = await scrape(own);
      expect(sample(after, "accessd_webhook_verdicts_total", labels) - sample(before, "accessd_webhook_verdicts_total", labels)).toBe(1);
      expect(logLines()).toContainEqual(
        expect.objectContaining({ msg: "webhook refused", requestId: "webhook-get", listenerId: "some-listener", reason: "method_not_allowed", status: 405, method: "GET" }),
      );
    } finally {
      await own.close();
    }
  });

  it("reports executions by state and the queue depth from the store", async () => {
    const text = await scrape();
    for (const state of ["PENDING", "RUNNING", "SUCCEEDED", "FAILED"]) {
      expect(text).toContain(`accessd_automation_executions{state="${state}"} 0`);
    }
    expect(text).toContain("accessd_automation_queue_depth 0");
  });

  it("exposes event-loop lag and process metrics", async () => {
    const text = await scrape();
    expect(text).toMatch(/^nodejs_eventloop_lag_seconds \d/m);
    expect(text).toMatch(/^nodejs_eventloop_lag_p99_seconds \d/m);
    expect(text).toMatch(/^process_resident_memory_bytes \d/m);
    // Only counters end in _total (promtool refuses prom-client's nodejs_active_handles_total gauges).
    const gaugesNamedTotal = [...text.matchAll(/^# TYPE (\w+_total) (\w+)$/gm)].filter((m) => m[2] !== "counter").map((m) => m[1]);
    expect(gaugesNamedTotal).toEqual([]);
    expect(text).toMatch(/^nodejs_active_handles\{type="\w+"\} \d/m);
  });

  it("answers 405 to anything but GET", async () => {
    const res = await fetch(`${server.url}/metrics`, { method: "POST" });
    expect(res.status).toBe(405);
    expect(res.headers.get("allow")).toBe("GET, HEAD");
  });
});

/** An execution's state, read over REST. */
async function executionState(target: TestServer, id: string): Promise<string> {
  const res = await target.call("GET", `/api/v1/automation_executions/${id}`);
  expect(res.status).toBe(200);
  return ((await res.json()) as { execution: { state: string } }).execution.state;
}

describe("/metrics as webhooks and executions move", () => {
  it("counts an accepted webhook and shows its execution SUCCEEDED", async () => {
    const own = await startTestServer();
    try {
      const before = await scrape(own);
      expect(before).toContain('accessd_automation_executions{state="SUCCEEDED"} 0');
      expect(sample(before, "accessd_webhook_verdicts_total", { reason: "accepted", status: "200" })).toBe(0);
      expect(sample(before, "accessd_webhook_event_records")).toBe(0);
      const emptyIndexBytes = sample(before, "accessd_webhook_event_keys_bytes");
      expect(emptyIndexBytes).toBeGreaterThan(0);

      const hook = await createWebhookAutomation(own, { authMethod: "HMAC" });
      const body = JSON.stringify({ user: "u-1" });
      const answer = await postWebhook(hook.postUrl, hmacHeaders(hook, body), body);
      expect(answer.status).toBe(200);
      const executionId = String(answer.body.executionId);
      await expect.poll(() => executionState(own, executionId), { timeout: 10_000, interval: 20 }).toBe("SUCCEEDED");

      const after = await scrape(own);
      expect(sample(after, "accessd_webhook_verdicts_total", { reason: "accepted", status: "200" })).toBe(1);
      expect(after).toContain('accessd_webhook_verdicts_total{reason="accepted",status="200"} 1');
      expect(sample(after, "accessd_automation_executions", { state: "SUCCEEDED" })).toBe(1);
      expect(after).toContain('accessd_automation_executions{state="PENDING"} 0');
      expect(after).toContain('accessd_automation_executions{state="RUNNING"} 0');
      expect(after).toContain('accessd_automation_executions{state="FAILED"} 0');
      expect(sample(after, "accessd_automation_queue_depth")).toBe(0);
      // The duplicate check holds the event's (listener, id) pair, in an index no smaller than before.
      expect(sample(after, "accessd_webhook_event_records")).toBe(1);
      expect(sample(after, "accessd_webhook_event_keys_bytes")).toBeGreaterThanOrEqual(emptyIndexBytes);
    } finally {
      await own.close();
    }
  });

  it("reports the executions waiting in the queue while they wait, and 0 once they finished", async () => {
    // The worker waits 1 s before each step: three one-step executions take 3 s to drain.
    const slow = await startTestServer({ testStepDelayMs: 1000 });
    try {
      expect(sample(await scrape(slow), "accessd_automation_queue_depth")).toBe(0);
      const created = await slow.call("POST", "/api/v1/automations", {
        displayName: "Slow",
        trigger: { manual: {} },
        steps: [{ name: "echo", log: { messageCel: "ctx.trigger" } }],
      });
      expect(created.status).toBe(200);
      const automationId = ((await created.json()) as { automation: { id: string } }).automation.id;
      const executionIds: string[] = [];
      for (let i = 0; i < 3; i++) {
        const res = await slow.call("POST", `/api/v1/automations/${automationId}/execute`, { context: { i } });
        expect(res.status).toBe(200);
        executionIds.push(((await res.json()) as { execution: { id: string } }).execution.id);
      }

      const waiting = await scrape(slow);
      expect(sample(waiting, "accessd_automation_queue_depth")).toBe(3);
      const unfinished =
        sample(waiting, "accessd_automation_executions", { state: "PENDING" }) +
        sample(waiting, "accessd_automation_executions", { state: "RUNNING" });
      expect(unfinished).toBe(3);

      for (const id of executionIds) {
        await expect.poll(() => executionState(slow, id), { timeout: 15_000, interval: 50 }).toBe("SUCCEEDED");
      }
      const drained = await scrape(slow);
      expect(sample(drained, "accessd_automation_queue_depth")).toBe(0);
      expect(drained).toContain("accessd_automation_queue_depth 0");
      expect(sample(drained, "accessd_automation_executions", { state: "SUCCEEDED" })).toBe(3);
    } finally {
      await slow.close();
    }
  });
});

describe("/metrics as the retention deletes executions", () => {
  it("lowers accessd_automation_executions but not accessd_automation_executions_finished_total", async () => {
    const hour = 3_600_000;
    const clock = new ManualClock(Date.now());
    const own = await startTestServer({ executionRetentionMs: hour, tokenTtlMs: 24 * hour }, { clock });
    try {
      const created = await own.call("POST", "/api/v1/automations", {
        displayName: "kept an hour",
        trigger: { manual: {} },
        steps: [{ name: "note", log: { messageCel: "'ran'" } }],
      });
      const { automation } = (await created.json()) as { automation: { id: string } };
      const execute = async () => {
        const res = await own.call("POST", `/api/v1/automations/${automation.id}/execute`, { context: {} });
        const id = ((await res.json()) as { execution: { id: string } }).execution.id;
        await expect.poll(() => executionState(own, id), { timeout: 10_000, interval: 20 }).toBe("SUCCEEDED");
      };
      for (let i = 0; i < 3; i++) await execute();
      const counts = async () => {
        const text = await scrape(own);
        return [sample(text, "accessd_automation_executions", { state: "SUCCEEDED" }), sample(text, "accessd_automation_executions_finished_total", { state: "SUCCEEDED" })];
      };
      expect(await counts()).toEqual([3, 3]);
      clock.advance(2 * hour);
      expect((await own.housekeeping.runOnce()).executions).toBe(3);
      expect(await counts()).toEqual([0, 3]);
      await execute();
      expect(await counts()).toEqual([1, 4]);
    } finally {
      await own.close();
    }
  });
});

describe("Metrics", () => {
  it("reads gauges from the sources other modules register, at scrape time", async () => {
    const metrics = new Metrics({ processMetrics: false });
    let depth = 3;
    metrics.observeQueueDepth(() => depth);
    metrics.observeExecutionsByState(() => ({ PENDING: 2, RUNNING: 1, SUCCEEDED: 7, FAILED: 0 }));
    metrics.recordWebhookVerdict("signature_mismatch", 401);
    metrics.recordWebhookVerdict("signature_mismatch", 401);
    let { body } = await metrics.exposition();
    expect(sample(body, "accessd_automation_queue_depth")).toBe(3);
    expect(sample(body, "accessd_automation_executions", { state: "SUCCEEDED" })).toBe(7);
    expect(sample(body, "accessd_webhook_verdicts_total", { reason: "signature_mismatch", status: "401" })).toBe(2);
    depth = 0;
    ({ body } = await metrics.exposition());
    expect(sample(body, "accessd_automation_queue_depth")).toBe(0);
    expect(body).not.toContain("nodejs_eventloop_lag_seconds");
  });
});

describe("counts that take long to read", () => {
  it("are read again at every scrape when quick, and reused for 5 s after a slow read (a backlog's count held the thread 200 ms a scrape)", () => {
    let reads = 0;
    let cost = 0;
    const count = reusedWhenSlow(() => {
      reads++;
      busyFor(cost);
      return reads;
    }, 20, 5_000);
    expect([count(), count(), count()]).toEqual([1, 2, 3]); // quick: fresh each time
    cost = 30;
    expect(count()).toBe(4); // slow: read once...
    expect(count()).toBe(4); // ...and reused
    expect(reads).toBe(4);
  });
});

describe("the outcome code of an RPC whose client went away", () => {
  it("is canceled, not the error the handler met on its way out (a Watch reset before its request: unimplemented)", async () => {
    const metrics = new Metrics({ processMetrics: false });
    const abort = new AbortController();
    abort.abort(new ConnectError("the client went away", Code.Canceled));
    const request = {
      service: Health,
      method: Health.method.watch,
      signal: abort.signal,
      contextValues: createContextValues().set(requestFactsKey, { requestId: "r", protocol: "grpc", peerAddress: "" }),
    } as unknown as Parameters<ReturnType<Interceptor>>[0];
    const missingInput = () => Promise.reject(new ConnectError("protocol error: missing input message", Code.Unimplemented));
    await expect(metricsInterceptor(metrics)(missingInput)(request)).rejects.toThrow("missing input message");
    const { body } = await metrics.exposition();
    expect(sample(body, "accessd_requests_total", { protocol: "grpc", operation: "grpc.health.v1.Health.Watch", code: "canceled" })).toBe(1);
    expect(body).not.toContain('code="unimplemented"');
  });
});


describe("the outcome code of an RPC reset by its client before any handler ran", () => {
  it("is canceled, with no status, where the HTTP/2 stream was reset before the answer was out (connect-es's answer to the closed stream was counted ok, status 200)", async () => {
    const { accessd: own, lines: logLines } = await startLoggedAccessd("info");
    const client = http2Connect(own.url);
    client.on("error", () => {});
    try {
      const token = await fetch(`${own.url}/auth/v1/token`, {
        method: "POST",
        body: new URLSearchParams({ grant_type: "client_credentials", client_id: testBootstrapClient.clientId, client_secret: testBootstrapClient.clientSecret }),
      });
      const { access_token: accessToken } = (await token.json()) as { access_token: string };
      const message = Buffer.concat([Buffer.from([0x0a, 5]), Buffer.from("reset")]); // Create { displayName: "reset" }
      const closed = [];
      for (let i = 0; i < 10; i++) {
        const stream = client.request({
          ":method": "POST",
          ":path": "/svc.api.app.v1.Apps/Create",
          "content-type": "application/grpc",
          te: "trailers",
          authorization: `Bearer ${accessToken}`,
          "x-request-id": `reset-${i}`,
        });
        stream.on("error", () => {});
        closed.push(once(stream, "close"));
        stream.end(Buffer.concat([Buffer.from([0, 0, 0, 0, message.length]), message]));
        setImmediate(() => stream.close(http2Constants.NGHTTP2_CANCEL));
      }
      await Promise.all(closed);
      await new Promise((resolve) => setTimeout(resolve, 100));
      const apps = (await (await fetch(`${own.url}/api/v1/apps?page_size=100`, { headers: { authorization: `Bearer ${accessToken}` } })).json()) as { list: unknown[] };
      const lines = logLines().filter((line) => line.msg === "rpc" && String(line.requestId).startsWith("reset-"));
      expect(lines).toHaveLength(10);
      // Each one either reached its handler (the app was made; the interceptor logged it with its
      // caller) or was reset before: canceled, and no status, as nothing was answered.
      const ran = lines.filter((line) => line.clientId === testBootstrapClient.clientId);
      expect(ran.map((line) => line.code)).toEqual(ran.map(() => "ok"));
      expect(apps.list).toHaveLength(ran.length);
      const reset = lines.filter((line) => line.clientId === undefined);
      expect(reset.map((line) => [line.code, line.status])).toEqual(reset.map(() => ["canceled", undefined]));
    } finally {
      client.close();
      await own.close();
    }
  });

  it("is canceled, once, for a REST call over HTTP/2 reset after its body, which is not run (it ran, was logged twice, and its answer's write failed with an error line any client could cause)", async () => {
    const { accessd: own, lines: logLines } = await startLoggedAccessd("info");
    const client = http2Connect(own.url);
    client.on("error", () => {});
    try {
      const { authorization } = await bootstrapAuthorization(own.url);
      const closed = [];
      for (let i = 0; i < 10; i++) {
        const stream = client.request({ ":method": "POST", ":path": "/api/v1/apps", "content-type": "application/json", authorization, "x-request-id": `rest-reset-${i}` });
        stream.on("error", () => {});
        closed.push(once(stream, "close"));
        stream.end('{"displayName":"reset"}');
        stream.close(http2Constants.NGHTTP2_CANCEL); // right behind the body, in the same write
      }
      await Promise.all(closed);
      await new Promise((resolve) => setTimeout(resolve, 200));
      const apps = (await (await fetch(`${own.url}/api/v1/apps?page_size=100`, { headers: { authorization } })).json()) as { list: unknown[] };
      expect(logLines().filter((line) => line.level === 50)).toEqual([]);
      const lines = logLines().filter((line) => String(line.requestId).startsWith("rest-reset-"));
      expect(new Set(lines.map((line) => line.requestId)).size).toBe(10); // one line each
      expect(lines).toHaveLength(10);
      // Reset before its handler (as the body and the reset arrive together, nearly always): canceled, not run.
      const ran = lines.filter((line) => line.code !== "canceled");
      expect(ran.map((line) => line.code)).toEqual(ran.map(() => "ok"));
      expect(apps.list).toHaveLength(ran.length);
    } finally {
      client.close();
      await own.close();
    }
  });
});

describe("a request the shutdown cuts", () => {
  it("is logged as cut by the shutdown, with no status, and the shutdown says how many it cut (it read as abandoned by the client, status 200)", async () => {
    const { accessd: own, lines: logLines } = await startLoggedAccessd("info", {}, { shutdownDeadlineMs: 300 });
    const socket = netConnect(own.address.port, "127.0.0.1");
    socket.on("error", () => {});
    await once(socket, "connect");
    socket.write('POST /api/v1/apps HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\nX-Request-Id: cut-at-shutdown\r\n\r\n{"displayName"');
    await new Promise((resolve) => setTimeout(resolve, 100));
    await own.close();
    socket.destroy();
    // The cut request's own lines follow once its connection's close has been handled.
    await expect.poll(() => logLines().some((line) => line.msg === "rpc" && line.requestId === "cut-at-shutdown")).toBe(true);
    const lines = logLines();
    expect(lines).toContainEqual(expect.objectContaining({ level: 40, msg: "shutdown: requests still in flight at the deadline were cut", requests: 1 }));
    expect(lines).toContainEqual(expect.objectContaining({ msg: "request cut by the shutdown before its body arrived", requestId: "cut-at-shutdown" }));
    const rpc = lines.find((line) => line.msg === "rpc" && line.requestId === "cut-at-shutdown");
    expect(rpc).toMatchObject({ code: "canceled" });
    expect(rpc).not.toHaveProperty("status");
  });
});

describe("the path a request line logs", () => {
  it("is cut to 200 characters: the client chooses its length (a 15,000-character path made a 15 KB line)", async () => {
    const { accessd: own, lines: logLines } = await startLoggedAccessd("info");
    try {
      const socket = netConnect(own.address.port, "127.0.0.1");
      socket.on("error", () => {});
      await once(socket, "connect");
      const path = `/api/v1/apps/${"A".repeat(15_000)}`;
      socket.write(`POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\nX-Request-Id: long-path\r\n\r\n{`);
      await new Promise((resolve) => setTimeout(resolve, 100));
      socket.destroy();
      await expect.poll(() => logLines().find((line) => line.requestId === "long-path" && line.msg !== "rpc")).toMatchObject({
        msg: "request abandoned by the client before its body arrived",
        path: `${path.slice(0, 200)}… (${path.length - 200} more characters)`,
      });
    } finally {
      await own.close();
    }
  });
});
