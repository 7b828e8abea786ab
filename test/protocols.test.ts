import { Agent as HttpAgent, request as httpRequest } from "node:http";
import { connect as http2Connect } from "node:http2";
import { connect as netConnect } from "node:net";
import { once } from "node:events";
import * as grpc from "@grpc/grpc-js";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, type Interceptor, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import {
  AddAppEntitlementOwnerRequestSchema,
  AddAppEntitlementOwnerResponseSchema,
  AppEntitlementOwners,
  ListAppEntitlementOwnersRequestSchema,
  ListAppEntitlementOwnersResponseSchema,
} from "../gen/svc/api/app/v1/app_entitlement_owners_pb.js";
import { Apps } from "../gen/svc/api/app/v1/app_pb.js";
import { createApp, createEntitlement, createUser, listOwnerIds, ownersPath } from "./support/api-fixtures.js";
import { rawRequest } from "./support/raw-http.js";
import { startTestServer, testBootstrapClient, type TestServer } from "./support/test-server.js";

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer();
});
afterAll(() => server.close());

/** server.headers as gRPC metadata (the bearer token, once auth exists). */
function metadata(): grpc.Metadata {
  const md = new grpc.Metadata();
  for (const [name, value] of Object.entries(server.headers)) md.set(name.toLowerCase(), value);
  return md;
}

const withServerHeaders: Interceptor = (next) => (req) => {
  for (const [name, value] of Object.entries(server.headers)) req.header.set(name, value);
  return next(req);
};

const grpcClients: grpc.Client[] = [];
afterEach(() => {
  for (const c of grpcClients.splice(0)) c.close();
});

/** A plain @grpc/grpc-js client (its own HTTP/2 stack), speaking h2c to the server's one port. */
function grpcJsClient(): grpc.Client {
  const client = new grpc.Client(`${server.address.address}:${server.address.port}`, grpc.credentials.createInsecure());
  grpcClients.push(client);
  return client;
}

function grpcJsUnary<I, O>(
  client: grpc.Client,
  path: string,
  serialize: (value: I) => Buffer,
  deserialize: (bytes: Buffer) => O,
  request: I,
): Promise<O> {
  return new Promise((resolve, reject) => {
    client.makeUnaryRequest(path, serialize, deserialize, request, metadata(), {}, (err, value) => {
      if (err !== null) reject(err);
      else if (value === undefined) reject(new Error("no response message"));
      else resolve(value);
    });
  });
}

/** An Add request sent to `path` (the Add RPC unless another method is named). */
function grpcJsAddCall(
  client: grpc.Client,
  request: { appId?: string; entitlementId?: string; userId?: string },
  path = "/svc.api.app.v1.AppEntitlementOwners/Add",
) {
  return grpcJsUnary(
    client,
    path,
    (m: ReturnType<typeof create<typeof AddAppEntitlementOwnerRequestSchema>>) =>
      Buffer.from(toBinary(AddAppEntitlementOwnerRequestSchema, m)),
    (bytes) => fromBinary(AddAppEntitlementOwnerResponseSchema, bytes),
    create(AddAppEntitlementOwnerRequestSchema, request),
  );
}

function grpcJsAdd(client: grpc.Client, appId: string, entitlementId: string, userId: string) {
  return grpcJsAddCall(client, { appId, entitlementId, userId });
}

/** The error a call failed with; undefined when it succeeded. */
function failureOf(call: Promise<unknown>): Promise<grpc.ServiceError | undefined> {
  return call.then(
    () => undefined,
    (e: unknown) => e as grpc.ServiceError,
  );
}

describe("one port, every protocol", () => {
  it("serves REST, gRPC (grpc-js over h2c) and Connect JSON Add on one port, and List shows all three owners", async () => {
    const appId = await createApp(server);
    const entitlementId = await createEntitlement(server, appId);
    const [restUser, grpcUser, connectUser] = [
      await createUser(server, "Rest User"),
      await createUser(server, "Grpc User"),
      await createUser(server, "Connect User"),
    ];

    const rest = await server.call("POST", ownersPath(appId, entitlementId), { userId: restUser });
    expect(rest.status).toBe(200);
    expect(rest.headers.get("content-type")).toMatch(/^application\/json/);
    expect(await rest.text()).toBe("{}");

    const grpcAnswer = await grpcJsAdd(grpcJsClient(), appId, entitlementId, grpcUser);
    expect(grpcAnswer.$typeName).toBe("svc.api.app.v1.AddAppEntitlementOwnerResponse");

    const connect = await server.call("POST", "/svc.api.app.v1.AppEntitlementOwners/Add", {
      appId,
      entitlementId,
      userId: connectUser,
    });
    expect(connect.status).toBe(200);
    expect(await connect.json()).toEqual({});

    const owners = await listOwnerIds(server, appId, entitlementId);
    expect(owners.sort()).toEqual([restUser, grpcUser, connectUser].sort());

    // And List over gRPC sees the same three.
    const listed = await grpcJsUnary(
      grpcJsClient(),
      "/svc.api.app.v1.AppEntitlementOwners/List",
      (m: ReturnType<typeof create<typeof ListAppEntitlementOwnersRequestSchema>>) =>
        Buffer.from(toBinary(ListAppEntitlementOwnersRequestSchema, m)),
      (bytes) => fromBinary(ListAppEntitlementOwnersResponseSchema, bytes),
      create(ListAppEntitlementOwnersRequestSchema, { appId, entitlementId }),
    );
    expect(listed.list.map((u) => u.id).sort()).toEqual(owners.sort());
    expect(listed.nextPageToken).toBe("");
  });

  it("answers a grpc-js call for an unknown user with gRPC status NOT_FOUND", async () => {
    const appId = await createApp(server);
    const entitlementId = await createEntitlement(server, appId);
    const error = await failureOf(grpcJsAdd(grpcJsClient(), appId, entitlementId, "no-such-user"));
    expect(error?.code).toBe(grpc.status.NOT_FOUND);
    expect(error?.details).toBe('user "no-such-user" not found');
  });

  it("spells grpc-message as the gRPC spec does, so grpc-js users read the message as sent (spaces, colons, slashes, UTF-8)", async () => {
    const appId = await createApp(server);
    const entitlementId = await createEntitlement(server, appId);
    const userId = "café/x,y:z 100%";
    const error = await failureOf(grpcJsAdd(grpcJsClient(), appId, entitlementId, userId));
    expect(error?.code).toBe(grpc.status.NOT_FOUND);
    expect(error?.details).toBe(`user "${userId}" not found`);
  });

  it("spells a gRPC-Web grpc-message, in the trailer frame of the body, as gRPC's (protobuf-ts's gRPC-Web transport, which does not decode it, showed app%20%22...)", async () => {
    const id = Buffer.from("café/x,y:z 100%");
    const message = Buffer.concat([Buffer.from([0x0a, id.length]), id]); // GetAppRequest { id }
    const envelope = Buffer.concat([Buffer.from([0, 0, 0, 0, message.length]), message]);
    const res = await fetch(`${server.url}/svc.api.app.v1.Apps/Get`, {
      method: "POST",
      headers: { ...server.headers, "content-type": "application/grpc-web+proto" },
      body: envelope,
    });
    const body = Buffer.from(await res.arrayBuffer());
    expect(body[0]).toBe(0x80); // the trailer frame
    expect(body.readUInt32BE(1)).toBe(body.length - 5);
    expect(body.subarray(5).toString("latin1").split("\r\n")).toEqual(
      expect.arrayContaining(['grpc-message: app "caf%C3%A9/x,y:z 100%25" not found', "grpc-status: 5"]),
    );
  });

  it("keeps a keep-alive HTTP/1.1 connection after refusing a gRPC-Web message over 1 MiB: the next request on it is answered (it was reset, 2 times in 3)", async () => {
    const agent = new HttpAgent({ keepAlive: true, maxSockets: 1 });
    const post = (path: string, contentType: string, body: Buffer) =>
      new Promise<{ status: number | undefined; body: Buffer; reused: boolean }>((resolve, reject) => {
        const req = httpRequest(`${server.url}${path}`, { method: "POST", agent, headers: { ...server.headers, "content-type": contentType } }, (res) => {
          const chunks: Buffer[] = [];
          res.on("data", (chunk: Buffer) => chunks.push(chunk));
          res.on("end", () => resolve({ status: res.statusCode, body: Buffer.concat(chunks), reused: req.reusedSocket }));
        });
        req.on("error", reject);
        req.end(body);
      });
    const message = Buffer.from(JSON.stringify({ displayName: "x".repeat(1_200_000) }));
    const envelope = Buffer.concat([Buffer.from([0, 0, 0, 0, 0]), message]);
    envelope.writeUInt32BE(message.length, 1);
    try {
      for (let i = 0; i < 3; i++) {
        const refused = await post("/svc.api.app.v1.Apps/Create", "application/grpc-web+json", envelope);
        expect(refused.body.subarray(5).toString("latin1")).toContain("grpc-status: 8");
        const next = await post("/svc.api.app.v1.Apps/List", "application/json", Buffer.from("{}"));
        expect(next).toMatchObject({ status: 200, reused: true });
      }
    } finally {
      agent.destroy();
    }
  });

  it("answers a grpc-js call to a method the server does not have with gRPC status UNIMPLEMENTED and a message", async () => {
    const error = await failureOf(grpcJsAddCall(grpcJsClient(), {}, "/svc.api.app.v1.AppEntitlementOwners/Nope"));
    expect(error?.code).toBe(grpc.status.UNIMPLEMENTED);
    expect(error?.details).toBe("unknown method /svc.api.app.v1.AppEntitlementOwners/Nope");
    // The request id too, as on every other answer (the trailers-only answer is written apart).
    expect(error?.metadata.get("x-request-id")).toEqual([expect.stringMatching(/^[\w-]{36}$/)]);
  });

  it("answers a grpc-js call without userId with gRPC status INVALID_ARGUMENT", async () => {
    const appId = await createApp(server);
    const entitlementId = await createEntitlement(server, appId);
    const error = await failureOf(grpcJsAddCall(grpcJsClient(), { appId, entitlementId }));
    expect(error?.code).toBe(grpc.status.INVALID_ARGUMENT);
  });

  it("answers sequential gRPC calls over one h2c connection without a Nagle delay (median well under 40 ms)", async () => {
    const appId = await createApp(server);
    const entitlementId = await createEntitlement(server, appId);
    const userId = await createUser(server);
    const client = grpcJsClient();
    await grpcJsAdd(client, appId, entitlementId, userId); // connect
    const times: number[] = [];
    for (let i = 0; i < 15; i++) {
      const started = performance.now();
      await grpcJsAdd(client, appId, entitlementId, userId);
      times.push(performance.now() - started);
    }
    times.sort((a, b) => a - b);
    expect(times[Math.floor(times.length / 2)]).toBeLessThan(20);
  });

  const transports: [string, () => Transport][] = [
    ["gRPC over HTTP/2", () => createGrpcTransport({ baseUrl: server.url, interceptors: [withServerHeaders] })],
    [
      "Connect over HTTP/2",
      () => createConnectTransport({ baseUrl: server.url, httpVersion: "2", interceptors: [withServerHeaders] }),
    ],
    [
      "Connect over HTTP/1.1",
      () => createConnectTransport({ baseUrl: server.url, httpVersion: "1.1", interceptors: [withServerHeaders] }),
    ],
    [
      "Connect binary over HTTP/1.1",
      () =>
        createConnectTransport({
          baseUrl: server.url,
          httpVersion: "1.1",
          useBinaryFormat: true,
          interceptors: [withServerHeaders],
        }),
    ],
    [
      "gRPC-Web over HTTP/1.1",
      () => createGrpcWebTransport({ baseUrl: server.url, httpVersion: "1.1", interceptors: [withServerHeaders] }),
    ],
  ];

  for (const [name, transport] of transports) {
    it(`adds and lists owners with a connect-es client (${name})`, async () => {
      const appId = await createApp(server);
      const entitlementId = await createEntitlement(server, appId);
      const userId = await createUser(server);
      const client = createClient(AppEntitlementOwners, transport());

      const added = await client.add({ appId, entitlementId, userId });
      expect(added.$typeName).toBe("svc.api.app.v1.AddAppEntitlementOwnerResponse");
      const listed = await client.list({ appId, entitlementId });
      expect(listed.list.map((u) => u.id)).toEqual([userId]);
      expect(listed.nextPageToken).toBe("");

      const error = await client.add({ appId, entitlementId, userId: "nobody" }).then(
        () => undefined,
        (e: unknown) => ConnectError.from(e),
      );
      expect(error?.code).toBe(Code.NotFound);
    });
  }

  it("serves REST over h2c (prior knowledge) on the same port", async () => {
    const appId = await createApp(server);
    const entitlementId = await createEntitlement(server, appId);
    const userId = await createUser(server);
    const session = http2Connect(server.url);
    try {
      const rest = (method: string, path: string, body?: string) =>
        new Promise<{ status: number; text: string }>((resolve, reject) => {
          const stream = session.request({
            ":method": method,
            ":path": path,
            ...server.headers,
            ...(body === undefined ? {} : { "content-type": "application/json" }),
          });
          let status = 0;
          let text = "";
          stream.on("response", (h) => (status = Number(h[":status"])));
          stream.on("data", (c: Buffer) => (text += c.toString()));
          stream.on("end", () => resolve({ status, text }));
          stream.on("error", reject);
          stream.end(body);
        });
      expect(await rest("POST", ownersPath(appId, entitlementId), JSON.stringify({ userId }))).toEqual({ status: 200, text: "{}" });
      const listed = await rest("GET", ownersPath(appId, entitlementId));
      expect(listed.status).toBe(200);
      expect((JSON.parse(listed.text) as { list: { id: string }[] }).list.map((u) => u.id)).toEqual([userId]);
      expect((await rest("GET", "/api/v1/nope")).status).toBe(404);
    } finally {
      session.close();
    }
  });

  it("cuts a gRPC error message that quotes a long input to 4 KiB encoded, so the status reaches the client (a 100,000-character updateMask reset the stream)", async () => {
    const apps = createClient(Apps, createGrpcTransport({ baseUrl: server.url, interceptors: [withServerHeaders] }));
    const { app } = await apps.create({ displayName: "masked" });
    const path = "x".repeat(100_000);
    const refused = await apps.update({ app: { id: app?.id ?? "", displayName: "y" }, updateMask: { paths: [path] } }).catch((e: unknown) => ConnectError.from(e));
    expect(refused).toBeInstanceOf(ConnectError);
    expect((refused as ConnectError).code).toBe(Code.InvalidArgument);
    expect((refused as ConnectError).rawMessage).toMatch(/… \(\d+ more characters\)$/);
    expect((refused as ConnectError).rawMessage.length).toBeLessThanOrEqual(4_096);
  });

  it("keeps grpc-message within 4 KiB also for characters that encode long (900 CJK characters, 9 bytes each encoded, passed C core's and grpc-java's 8 KiB metadata limit: RESOURCE_EXHAUSTED instead of NOT_FOUND)", async () => {
    const id = "中".repeat(1_000);
    const message = Buffer.concat([Buffer.from([0x0a]), varint(Buffer.byteLength(id)), Buffer.from(id)]); // GetAppRequest { id }
    const frame = Buffer.concat([Buffer.from([0, 0, 0, 0, 0]), message]);
    frame.writeUInt32BE(message.length, 1);
    const session = http2Connect(server.url);
    try {
      const stream = session.request({ ":method": "POST", ":path": "/svc.api.app.v1.Apps/Get", "content-type": "application/grpc", te: "trailers", ...server.headers });
      let status: Record<string, unknown> = {};
      stream.on("response", (headers) => (status = { ...status, ...headers }));
      stream.on("trailers", (trailers) => (status = { ...status, ...trailers }));
      stream.resume();
      stream.end(frame);
      await new Promise((resolve) => stream.on("close", resolve));
      expect(status["grpc-status"]).toBe(String(Code.NotFound));
      const header = String(status["grpc-message"]);
      expect(header.length).toBeLessThanOrEqual(4_096);
      expect(decodeURIComponent(header)).toMatch(/^[^%]*中+… \(\d+ more characters\)$/);
    } finally {
      session.close();
    }
  });

  it.each(["GET", "PUT", "DELETE"])("answers %s on an RPC path with 405, Allow: POST and a JSON error (RFC 9110: a 405 names the methods taken)", async (method) => {
    const res = await fetch(`${server.url}/svc.api.app.v1.Apps/Get`, { method, headers: server.headers });
    expect(res.status).toBe(405);
    expect(res.headers.get("allow")).toBe("POST");
    expect(await res.json()).toEqual({ code: "unimplemented", message: "/svc.api.app.v1.Apps/Get does not accept this HTTP method; use POST" });
  });

  it("answers /healthz and /readyz with 200 over HTTP/1.1", async () => {
    const health = await fetch(`${server.url}/healthz`);
    expect(health.status).toBe(200);
    expect(await health.json()).toEqual({ status: "ok" });
    const ready = await fetch(`${server.url}/readyz`);
    expect(ready.status).toBe(200);
    expect(await ready.json()).toEqual({ status: "ready" });
  });
});

/** `n` as a protobuf varint. */
function varint(n: number): Buffer {
  const bytes: number[] = [];
  for (let rest = n; ; rest >>>= 7) {
    if (rest < 0x80) {
      bytes.push(rest);
      return Buffer.from(bytes);
    }
    bytes.push((rest & 0x7f) | 0x80);
  }
}

describe("a call whose deadline has passed before its handler begins", () => {
  /** Apps/Create over gRPC (h2c) with these headers (a deadline); resolves with its grpc-status. */
  async function grpcCreate(displayName: string, deadlineHeaders: Record<string, string>): Promise<string | undefined> {
    const client = http2Connect(server.url);
    client.on("error", () => {});
    let trailers: Record<string, string> = {};
    try {
      const stream = client.request({
        ":method": "POST",
        ":path": "/svc.api.app.v1.Apps/Create",
        "content-type": "application/grpc+json",
        te: "trailers",
        ...deadlineHeaders,
        ...server.headers,
      });
      stream.on("error", () => {});
      stream.on("response", (headers: Record<string, string>) => (trailers = { ...trailers, ...headers }));
      stream.on("trailers", (t: Record<string, string>) => (trailers = { ...trailers, ...t }));
      stream.resume();
      const message = Buffer.from(JSON.stringify({ displayName }));
      const frame = Buffer.alloc(5);
      frame.writeUInt32BE(message.length, 1);
      stream.end(Buffer.concat([frame, message]));
      await once(stream, "close");
    } finally {
      client.close();
    }
    return trailers["grpc-status"];
  }

  it("is not run: DEADLINE_EXCEEDED over Connect (connect-timeout-ms: 0) and gRPC (grpc-timeout: 0n), and no app is created (it answered 200 and created it)", async () => {
    const name = `Past deadline ${Date.now()}`;
    const connect = await fetch(`${server.url}/svc.api.app.v1.Apps/Create`, {
      method: "POST",
      headers: { ...server.headers, "content-type": "application/json", "connect-timeout-ms": "0" },
      body: JSON.stringify({ displayName: name }),
    });
    expect(connect.status).toBe(504);
    expect(await connect.json()).toMatchObject({ code: "deadline_exceeded" });
    expect(await grpcCreate(name, { "grpc-timeout": "0n" })).toBe(String(Code.DeadlineExceeded));
    const apps = (await (await server.call("GET", "/api/v1/apps?page_size=100")).json()) as { list: { displayName: string }[] };
    expect(apps.list.length).toBeGreaterThan(0);
    expect(apps.list.filter((item) => item.displayName === name)).toEqual([]);
  });

  it("is not run when its deadline passed a moment ago (grpc-timeout: 1n, 1u): connect-es's timer had not fired, and the app was created while its client read DEADLINE_EXCEEDED", async () => {
    const name = `Just past deadline ${Date.now()}`;
    expect(await grpcCreate(name, { "grpc-timeout": "1n" })).toBe(String(Code.DeadlineExceeded));
    expect(await grpcCreate(name, { "grpc-timeout": "1u" })).toBe(String(Code.DeadlineExceeded));
    const apps = (await (await server.call("GET", "/api/v1/apps?page_size=100")).json()) as { list: { displayName: string }[] };
    expect(apps.list.filter((item) => item.displayName === name)).toEqual([]);
    // A deadline still ahead runs as ever.
    expect(await grpcCreate(name, { "grpc-timeout": "10S" })).toBe("0");
  });

  it("reads the deadline of the call's own protocol only: a grpc-timeout on a Connect call, or a connect-timeout-ms on a gRPC one, is not its deadline (either refused the call)", async () => {
    const connect = await fetch(`${server.url}/svc.api.app.v1.Apps/Create`, {
      method: "POST",
      headers: { ...server.headers, "content-type": "application/json", "grpc-timeout": "1n", "connect-timeout-ms": "60000" },
      body: JSON.stringify({ displayName: `Connect with a stray grpc-timeout ${Date.now()}` }),
    });
    expect(connect.status).toBe(200);
    const status = await grpcCreate(`gRPC with a stray connect-timeout-ms ${Date.now()}`, { "connect-timeout-ms": "0" });
    expect(status).toBe("0");
  });
});

describe("refusals outside the routes, in the JSON error shape", () => {
  it("answers a Connect call to a method the server does not have 404 unimplemented, as gRPC is told (it was not_found)", async () => {
    const res = await fetch(`${server.url}/svc.api.app.v1.Apps/Archive`, { method: "POST", headers: { ...server.headers, "content-type": "application/json" }, body: "{}" });
    expect(res.status).toBe(404);
    expect(await res.json()).toEqual({ code: "unimplemented", message: "unknown method /svc.api.app.v1.Apps/Archive" });
    for (const path of ["/not/an-rpc", "/openapi.json/x"]) {
      expect(((await (await fetch(`${server.url}${path}`)).json()) as { code: string }).code, path).toBe("not_found");
    }
  });

  it("names every content type an RPC takes in a 415, streams and gRPC-Web too", async () => {
    const res = await fetch(`${server.url}/grpc.health.v1.Health/Watch`, { method: "POST", headers: { "content-type": "text/plain" }, body: "x" });
    expect(res.status).toBe(415);
    expect(((await res.json()) as { message: string }).message).toBe(
      "/grpc.health.v1.Health/Watch takes Connect (application/json or application/proto; a stream application/connect+json or +proto), gRPC (application/grpc) or gRPC-Web (application/grpc-web)",
    );
  });

  /** What one connection receives for `writes` (each after the answer to those before it), until it closes. */
  const exchange = async (...writes: string[]): Promise<{ received: string; ms: number }> => {
    const socket = netConnect(Number(new URL(server.url).port), "127.0.0.1");
    await once(socket, "connect");
    let received = "";
    socket.on("data", (chunk: Buffer) => (received += chunk.toString()));
    socket.on("error", () => {});
    const closed = once(socket, "close");
    const started = performance.now();
    for (const [i, bytes] of writes.entries()) {
      if (i > 0) await new Promise((resolve) => setTimeout(resolve, 200)); // the answer to what came before is out
      socket.write(bytes);
    }
    await closed;
    return { received, ms: performance.now() - started };
  };

  it("answers a malformed request pipelined behind a good one after the good one's answer, in order (its 400 took the first one's place, which had run)", async () => {
    const form = new URLSearchParams({ grant_type: "client_credentials", client_id: testBootstrapClient.clientId, client_secret: testBootstrapClient.clientSecret }).toString();
    const { received } = await exchange(
      `POST /auth/v1/token HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: ${form.length}\r\n\r\n${form}` +
        "GET / HTTP/1.1\r\nHost: x\r\nBad Header: 1\r\n\r\n",
    );
    expect(received.match(/HTTP\/1\.1 \d{3}/g)).toEqual(["HTTP/1.1 200", "HTTP/1.1 400"]);
    expect(received).toContain('"access_token"');
    expect(received).toContain('{"code":"invalid_argument","message":"malformed HTTP request"}');
  });

  it("ends the connection after answering a request that asks to upgrade it, so that one pipelined behind is sent again (Node read nothing more: it hung, unanswered, until the keep-alive timeout)", async () => {
    const { received, ms } = await exchange(
      "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\nGET /readyz HTTP/1.1\r\nHost: x\r\n\r\n",
    );
    expect(received).toMatch(/^HTTP\/1\.1 200 /);
    expect(received.toLowerCase()).toContain("\r\nconnection: close\r\n");
    expect(ms).toBeLessThan(2_000);
  });

  it("refuses a body framed by both Transfer-Encoding and Content-Length (400), or by a coding other than chunked (501), as RFC 9112 has it (Node framed the first by its length, read the second raw)", async () => {
    const port = Number(new URL(server.url).port);
    const send = async (head: string, body: string) => {
      const answer = await rawRequest(port, [`POST /api/v1/apps HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n${head}\r\n${body}`]);
      return { status: answer?.status, connection: answer?.headers["connection"], body: JSON.parse(answer?.body.toString() ?? "null") as unknown };
    };
    expect(await send("Transfer-Encoding:\r\nContent-Length: 2\r\n", "{}")).toEqual({
      status: 400,
      connection: "close",
      body: { code: "invalid_argument", message: "a request with both Transfer-Encoding and Content-Length is refused (RFC 9112 6.3)" },
    });
    expect(await send("Transfer-Encoding: gzip, chunked\r\n", "2\r\n{}\r\n0\r\n\r\n")).toEqual({
      status: 501,
      connection: "close",
      body: { code: "unimplemented", message: 'Transfer-Encoding "gzip, chunked" is not supported: send chunked, or a Content-Length' },
    });
    expect((await send("Transfer-Encoding: Chunked\r\n", "2\r\n{}\r\n0\r\n\r\n")).status).toBe(401); // framed as it should be: no token
  });

  it("answers a request whose own body is malformed 400 at once (waiting for its own answer, it got a 408 after the request timeout)", async () => {
    const { received, ms } = await exchange(`POST /api/v1/apps HTTP/1.1\r\nHost: x\r\nAuthorization: ${server.headers.authorization}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\nabc\r\n0\r\n\r\n`);
    expect(received.match(/HTTP\/1\.1 \d{3}/g)).toEqual(["HTTP/1.1 400"]);
    expect(ms).toBeLessThan(2_000);
  });

  it("answers a malformed request pipelined behind one answered at once (/healthz) after it (the connection ended without its 400), and gives a request refused before its malformed body one answer only", async () => {
    const behindHealthz = await exchange("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGARBAGE\r\n\r\n");
    expect(behindHealthz.received.match(/HTTP\/1\.1 \d{3}/g)).toEqual(["HTTP/1.1 200", "HTTP/1.1 400"]);
    const refusedEarly = await exchange("POST /api/v1/webhooks/incoming/nope HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n", "ZZ\r\n");
    expect(refusedEarly.received.match(/HTTP\/1\.1 \d{3}/g)).toEqual(["HTTP/1.1 404"]);
  });

  it("keeps the connection of a request naming Upgrade without Connection: upgrade (RFC 9110: ignored)", async () => {
    const port = Number(new URL(server.url).port);
    const answer = await rawRequest(port, ["GET /healthz HTTP/1.1\r\nHost: x\r\nUpgrade: foo\r\n\r\n"]);
    expect(answer?.status).toBe(200);
    expect(answer?.headers["connection"]).toBe("keep-alive");
  });

  it("serves a Connect call over HTTP/1.0 without Host, which HTTP/1.0 allows (500 internal and an error line for anyone: connect-es found no authority)", async () => {
    const port = Number(new URL(server.url).port);
    const answer = await rawRequest(port, ["POST /grpc.health.v1.Health/Check HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"]);
    expect({ status: answer?.status, body: answer?.body.toString() }).toEqual({ status: 200, body: '{"status":"SERVING"}' });
  });

  it("answers reflection (a bidirectional stream) over HTTP/1.1 505 with a body saying it needs HTTP/2 (it was empty)", async () => {
    const res = await fetch(`${server.url}/grpc.reflection.v1.ServerReflection/ServerReflectionInfo`, {
      method: "POST",
      headers: { "content-type": "application/connect+proto" },
      body: new Uint8Array(5),
    });
    expect(res.status).toBe(505);
    expect(await res.json()).toEqual({
      code: "unimplemented",
      message: "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo is a bidirectional stream, which needs HTTP/2",
    });
  });

  it("answers an Expect other than 100-continue 417 with a JSON body, over HTTP/1.1 and HTTP/2 (Node's was empty)", async () => {
    const refusal = { code: "failed_precondition", message: "Expect: something-else is not supported (only 100-continue)" };
    const answer = await rawRequest(server.address.port, [`GET /healthz HTTP/1.1\r\nHost: x\r\nExpect: something-else\r\nConnection: close\r\n\r\n`]);
    expect(answer?.status).toBe(417);
    expect(JSON.parse(answer?.body.toString() ?? "")).toEqual(refusal);
    const client = http2Connect(server.url);
    client.on("error", () => {});
    try {
      const stream = client.request({ ":method": "GET", ":path": "/healthz", expect: "something-else" });
      const chunks: Buffer[] = [];
      stream.on("data", (c: Buffer) => chunks.push(c));
      const [headers] = (await once(stream, "response")) as [Record<string, string | number>];
      await once(stream, "end");
      expect({ status: headers[":status"], body: JSON.parse(Buffer.concat(chunks).toString()) as unknown }).toEqual({ status: 417, body: refusal });
    } finally {
      client.close();
    }
  });

  it("answers /healthz and /readyz 405 with Allow to any method but GET and HEAD (a POST was 200)", async () => {
    for (const path of ["/healthz", "/readyz"]) {
      for (const method of ["POST", "DELETE"]) {
        const res = await fetch(`${server.url}${path}`, { method });
        expect({ path, method, status: res.status, allow: res.headers.get("allow") }).toEqual({ path, method, status: 405, allow: "GET, HEAD" });
      }
      expect((await fetch(`${server.url}${path}`, { method: "HEAD" })).status).toBe(200);
    }
  });
});
