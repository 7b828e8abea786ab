import { once } from "node:events";
import { connect as http2Connect } from "node:http2";
import { PassThrough } from "node:stream";
import { gunzipSync } from "node:zlib";
import { request as httpRequest } from "node:http";
import { connect as netConnect } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AppEntitlementOwners } from "../gen/svc/api/app/v1/app_entitlement_owners_pb.js";
import { configDefaults } from "../src/config.js";
import { createLogger } from "../src/logger.js";
import { startAccessd } from "../src/main.js";
import { ConnectHandlers } from "../src/server/connect-handlers.js";
import { HttpServer } from "../src/server/http-server.js";
import { RestTranscoder } from "../src/server/rest-transcoder.js";
import { answer, createApp, createEntitlement, createUser, ownersPath } from "./support/api-fixtures.js";
import { startTestServer, type TestServer } from "./support/test-server.js";

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer({ apiMaxBodyBytes: 16_384 });
});
afterAll(() => server.close());

interface JsonError {
  code: string;
  message: string;
}

async function jsonError(res: Response): Promise<{ status: number; contentType: string | null; body: JsonError }> {
  return { status: res.status, contentType: res.headers.get("content-type"), body: (await res.json()) as JsonError };
}

describe("routing", () => {
  it.each([["/api/v1/nope"], ["/api/v1/apps/a/b/c/d/e/f"], ["/api/v2/apps"], ["/nope"], ["/svc.api.app.v1.Apps/Nope"]])(
    "answers 404 with a JSON error for the unknown path %s",
    async (path) => {
      const res = await server.call("GET", path);
      const error = await jsonError(res);
      expect(error.status).toBe(404);
      expect(error.contentType).toBe("application/json");
      // A path in an RPC's shape is a method the server does not have: unimplemented, as over gRPC.
      expect(error.body.code).toBe(path.startsWith("/svc.") ? "unimplemented" : "not_found");
      expect(error.body.message).toContain(path);
    },
  );

  it.each([
    ["PATCH", "/api/v1/apps", "POST, GET, HEAD"],
    ["DELETE", "/api/v1/search/users", "POST"],
    ["GET", "/api/v1/apps/x/entitlements/y/owners/z", "DELETE"],
    ["PUT", "/api/v1/users/u1", "GET, HEAD, POST"],
  ])("answers %s %s with 405, an Allow header and a JSON error", async (method, path, allow) => {
    const res = await server.call(method, path);
    expect(res.status).toBe(405);
    // The contract's order, HEAD right after GET.
    expect(res.headers.get("allow")).toBe(allow);
    const body = (await res.json()) as JsonError;
    expect(body).toEqual({ code: "unimplemented", message: `${method} is not allowed on ${path}; use ${allow}` });
  });

  it("answers HEAD wherever GET is, with GET's status and headers and no body, over HTTP/1.1 and HTTP/2", async () => {
    const get = await server.call("GET", "/api/v1/apps");
    const head = await server.call("HEAD", "/api/v1/apps");
    expect([head.status, head.headers.get("content-type"), await head.text()]).toEqual([200, "application/json", ""]);
    expect(get.status).toBe(200);
    const session = http2Connect(server.url);
    try {
      const answer = await new Promise<{ status: number; bytes: number }>((resolve, reject) => {
        const stream = session.request({ ":method": "HEAD", ":path": "/api/v1/apps", ...server.headers });
        let status = 0;
        let bytes = 0;
        stream.on("response", (headers) => (status = Number(headers[":status"])));
        stream.on("data", (chunk: Buffer) => (bytes += chunk.length));
        stream.resume();
        stream.on("close", () => resolve({ status, bytes }));
        stream.on("error", reject);
        stream.end();
      });
      expect(answer).toEqual({ status: 200, bytes: 0 });
    } finally {
      session.close();
    }
  });

  it("routes the literal /api/v1/search/users to Search, not to a {id}-shaped route", async () => {
    const res = await server.call("POST", "/api/v1/search/users", {});
    expect(res.status).toBe(200);
  });

  it("decodes percent-escaped path variables", async () => {
    const res = await server.call("GET", `/api/v1/apps/${encodeURIComponent("a b/c")}`);
    expect(await answer(res)).toEqual({ status: 404, body: { code: "not_found", message: 'app "a b/c" not found' } });
  });

  it("answers 400 to a malformed percent-escape in the path", async () => {
    const res = await server.call("GET", "/api/v1/apps/%zz");
    expect(res.status).toBe(400);
  });
});

describe("request bodies", () => {
  it("answers 400 with a JSON error to a malformed JSON body, on REST and Connect alike", async () => {
    for (const path of ["/api/v1/users", "/svc.api.user.v1.Users/Create"]) {
      const error = await jsonError(await server.call("POST", path, '{"displayName": '));
      expect(error.status).toBe(400);
      expect(error.contentType).toBe("application/json");
      expect(error.body.code).toBe("invalid_argument");
    }
  });

  it("answers 400 naming an unknown JSON field, on REST and Connect alike", async () => {
    for (const path of ["/api/v1/users", "/svc.api.user.v1.Users/Create"]) {
      const error = await jsonError(await server.call("POST", path, { displayName: "Ada", userID: "x" }));
      expect(error.status).toBe(400);
      expect(error.body.code).toBe("invalid_argument");
      expect(error.body.message).toContain("userID");
    }
    const appId = await createApp(server);
    const entitlementId = await createEntitlement(server, appId);
    const error = await jsonError(await server.call("POST", ownersPath(appId, entitlementId), { userID: "x" }));
    expect(error.status).toBe(400);
    expect(error.body.message).toContain("userID");
  });

  it("answers 400 to a body that gives a key twice, on REST and Connect alike", async () => {
    const appId = await createApp(server);
    const entitlementId = await createEntitlement(server, appId);
    const userId = await createUser(server);
    const twice = `{"userId":"nobody","userId":"${userId}"}`;
    for (const path of [ownersPath(appId, entitlementId), "/svc.api.app.v1.AppEntitlementOwners/Add"]) {
      const body = path.startsWith("/api") ? twice : `{"appId":"${appId}","entitlementId":"${entitlementId}",${twice.slice(1)}`;
      const error = await jsonError(await server.call("POST", path, body));
      expect(error.status).toBe(400);
      expect(error.body.code).toBe("invalid_argument");
      expect(error.body.message).toContain('duplicate object key "userId"');
    }
    // A key spelled with an escape is the same key.
    const nested = await server.call("POST", "/api/v1/users", '{"displayName":"Ada","displayN\u0061me":"Bob"}');
    expect(nested.status).toBe(400);
    const owners = await server.call("GET", ownersPath(appId, entitlementId));
    expect(((await owners.json()) as { list: unknown[] }).list).toEqual([]);
  });

  it("finds a key given twice at any depth, and sees none in colons and quotes inside strings or in a __proto__ key (the body is decoded a second time only when the members written outnumber those parsed)", async () => {
    const created = await server.call("POST", "/api/v1/automations", { displayName: "echo", trigger: { manual: {} }, steps: [{ name: "say", log: { messageCel: "ctx.trigger" } }] });
    const { automation } = (await created.json()) as { automation: { id: string } };
    expect((await server.call("POST", `/api/v1/automations/${automation.id}/publish`)).status).toBe(200);
    const execute = (body: string) => server.call("POST", `/api/v1/automations/${automation.id}/execute`, body);
    const deep = await jsonError(await execute('{"context":{"list":[{"a":1},{"b":{"c":1,"c":2}}]}}'));
    expect(deep.status).toBe(400);
    expect(deep.body.message).toContain('duplicate object key "c"');
    const tricky = String.raw`{"context":{"k: v":"a:b","q\\":":\\\"x\\\":","__proto__":{"x":1},"list":[{"x":1},{"x":2}]}}`;
    const answered = await execute(tricky);
    expect(answered.status, await answered.clone().text()).toBe(200);
  });

  it("answers 400 to a body that is not a JSON object", async () => {
    for (const body of ["[]", '"text"', "42", "null"]) {
      const res = await server.call("POST", "/api/v1/users", body);
      expect(res.status).toBe(400);
    }
  });

  it("takes an empty body as the empty request message, as gRPC-gateway does", async () => {
    const res = await server.call("POST", "/api/v1/search/users", "", { "content-type": "application/json" });
    expect(res.status).toBe(200);
    expect(((await res.json()) as { list: unknown[] }).list.length).toBeGreaterThan(0);
  });

  it("answers 400 to a field of the wrong JSON type", async () => {
    const error = await jsonError(await server.call("POST", "/api/v1/users", { displayName: 42 }));
    expect(error.status).toBe(400);
    expect(error.body.message).toContain("display_name");
  });

  it("reads a body that starts with a UTF-8 byte order mark, as Connect does", async () => {
    const res = await fetch(`${server.url}/api/v1/users`, {
      method: "POST",
      headers: { ...server.headers, "content-type": "application/json" },
      body: Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from('{"displayName":"BOM"}')]),
    });
    expect(res.status).toBe(200);
    expect(((await res.json()) as { user: { displayName: string } }).user.displayName).toBe("BOM");
  });

  it("answers 415 with Accept-Encoding: identity to a compressed body", async () => {
    const res = await server.call("POST", "/api/v1/users", { displayName: "Ada" }, { "content-encoding": "gzip" });
    expect(res.status).toBe(415);
    expect(res.headers.get("accept-encoding")).toBe("identity");
    expect(((await res.json()) as JsonError).message).toBe("Content-Encoding gzip is not supported: send the body uncompressed");
    expect((await server.call("POST", "/api/v1/users", { displayName: "Ada" }, { "content-encoding": "Identity" })).status).toBe(200);
  });

  it("answers 415 to a body that is not JSON by Content-Type", async () => {
    const res = await server.call("POST", "/api/v1/users", "displayName=Ada", { "content-type": "text/plain" });
    expect(res.status).toBe(415);
    expect(((await res.json()) as JsonError).code).toBe("invalid_argument");
  });

  it("answers 400 to a body that is not UTF-8, on REST and Connect (a Latin-1 'Café' was stored as 'Caf\\uFFFD')", async () => {
    const cafe = (path: string, encoding: BufferEncoding) =>
      fetch(`${server.url}${path}`, {
        method: "POST",
        headers: { ...server.headers, "content-type": "application/json" },
        body: Buffer.from('{"displayName":"Café"}', encoding),
      });
    const res = await cafe("/api/v1/apps", "latin1");
    expect(res.status).toBe(400);
    expect(await res.json()).toEqual({ code: "invalid_argument", message: "request body is not valid UTF-8" });
    // Connect's own JSON decoding read such bytes as U+FFFD too.
    const connect = await cafe("/svc.api.app.v1.Apps/Create", "latin1");
    expect({ status: connect.status, body: await connect.json() }).toEqual({ status: 400, body: { code: "invalid_argument", message: "request body is not valid UTF-8" } });
    const utf8 = await cafe("/svc.api.app.v1.Apps/Create", "utf8");
    expect(JSON.stringify(await utf8.json())).toContain('"displayName":"Café"');
  });

  it("answers 415 to a JSON body declared in a charset other than UTF-8 (a UTF-16 body was read as UTF-8), as Connect does, and takes utf-8", async () => {
    const res = await fetch(`${server.url}/api/v1/users`, {
      method: "POST",
      headers: { ...server.headers, "content-type": "application/json; charset=utf-16le" },
      body: Buffer.from('{"displayName":"Ada"}', "utf16le"),
    });
    expect(res.status).toBe(415);
    expect(await res.json()).toEqual({ code: "invalid_argument", message: "JSON bodies are read as UTF-8: charset=utf-16le is not taken" });
    const utf8 = await server.call("POST", "/api/v1/users", { displayName: "Ada" }, { "content-type": 'application/json; Charset="UTF-8"' });
    expect(utf8.status).toBe(200);
  });

  it("answers 400 to a name, email or username over 1,000 characters and a description over 10,000 (only the body's size bounded them: a 900 KB name went into every page)", async () => {
    for (const [path, body, message] of [
      ["/api/v1/users", { displayName: "n".repeat(1_001) }, "displayName is longer than 1000 characters"],
      ["/api/v1/users", { displayName: "Ada", username: "u".repeat(1_001) }, "username is longer than 1000 characters"],
      ["/api/v1/users", { displayName: "Ada", email: `${"e".repeat(1_000)}@x.org` }, "email is longer than 1000 characters"],
      ["/api/v1/apps", { displayName: "n".repeat(1_001) }, "displayName is longer than 1000 characters"],
      ["/api/v1/apps", { displayName: "App", description: "d".repeat(10_001) }, "description is longer than 10000 characters"],
      ["/api/v1/automations", { displayName: "n".repeat(1_001), trigger: { manual: {} }, steps: [] }, "displayName is longer than 1000 characters"],
    ] as const) {
      const error = await jsonError(await server.call("POST", path, body));
      expect(error).toMatchObject({ status: 400, body: { code: "invalid_argument", message } });
    }
    expect((await server.call("POST", "/api/v1/apps", { displayName: "n".repeat(1_000), description: "d".repeat(10_000) })).status).toBe(200);
    const appId = await createApp(server);
    const update = await server.call("POST", `/api/v1/apps/${appId}`, { app: { description: "d".repeat(10_001) }, updateMask: "description" });
    expect(await jsonError(update)).toMatchObject({ status: 400, body: { message: "app.description is longer than 10000 characters" } });
  });

  it("counts a name's characters, not its UTF-16 units (501 emoji were refused as over 1,000)", async () => {
    expect((await server.call("POST", "/api/v1/apps", { displayName: "😀".repeat(1_000) })).status).toBe(200);
    const over = await jsonError(await server.call("POST", "/api/v1/apps", { displayName: "😀".repeat(1_001) }));
    expect(over).toMatchObject({ status: 400, body: { message: "displayName is longer than 1000 characters" } });
  });

  it("answers 400 to a query percent-escape that is malformed or no UTF-8, as in the path (it read as U+FFFD and listed nothing)", async () => {
    for (const query of ["automation_id=%C3%28", "automation_id=%ZZ", "page_token=%"]) {
      const error = await jsonError(await server.call("GET", `/api/v1/automation_executions?${query}`));
      expect({ query, ...error }).toMatchObject({
        query,
        status: 400,
        body: { code: "invalid_argument", message: "the query has a malformed percent-escape (each is %XX, and together they spell UTF-8)" },
      });
    }
    expect((await server.call("GET", "/api/v1/apps?page_size=%31%30")).status).toBe(200);
  });

  it("answers 413 to a body larger than the limit", async () => {
    const res = await server.call("POST", "/api/v1/users", { displayName: "x".repeat(20_000) });
    expect(res.status).toBe(413);
    expect(((await res.json()) as JsonError).code).toBe("resource_exhausted");
  });

  it("answers 400 to an Update whose resource is not a JSON object, and writes nothing (it was taken as {} and written)", async () => {
    const appId = await createApp(server, "Unchanged");
    const before = await (await server.call("GET", `/api/v1/apps/${appId}`)).json();
    for (const [value, kind] of [["x", "a string"], [123, "a number"], [[1, 2], "an array"], [true, "a boolean"]] as const) {
      const error = await jsonError(await server.call("POST", `/api/v1/apps/${appId}`, { app: value }));
      expect(error).toEqual({ status: 400, contentType: "application/json", body: { code: "invalid_argument", message: `field app must be a JSON object, not ${kind}` } });
    }
    expect(await (await server.call("GET", `/api/v1/apps/${appId}`)).json()).toEqual(before);
    const entitlementId = await createEntitlement(server, appId);
    const entitlement = await jsonError(await server.call("POST", `/api/v1/apps/${appId}/entitlements/${entitlementId}`, { appEntitlement: "x" }));
    expect(entitlement.body.message).toBe("field appEntitlement must be a JSON object, not a string");
    const userId = await createUser(server);
    expect((await jsonError(await server.call("POST", `/api/v1/users/${userId}`, { user: 7 }))).body.message).toBe("field user must be a JSON object, not a number");
  });

  it("takes proto-named body fields that the path also fills (the path's value beside the body's was a 400 \"set multiple times\")", async () => {
    const appId = await createApp(server);
    const entitlementId = await createEntitlement(server, appId, "Reader");
    const update = await server.call("POST", `/api/v1/apps/${appId}/entitlements/${entitlementId}`, {
      app_entitlement: { display_name: "Writer", app_id: appId },
      update_mask: "displayName", // a FieldMask's JSON form is lowerCamelCase, under either field name
    });
    expect(update.status).toBe(200);
    expect(((await update.json()) as { appEntitlement: { displayName: string } }).appEntitlement.displayName).toBe("Writer");
    const userId = await createUser(server);
    const add = await server.call("POST", ownersPath(appId, entitlementId), { user_id: userId, app_id: appId, entitlement_id: entitlementId });
    expect([add.status, await add.json()]).toEqual([200, {}]);
    // One field under both names is still a 400, as everywhere else.
    const twice = await jsonError(await server.call("POST", ownersPath(appId, entitlementId), { userId, appId, app_id: appId }));
    expect(twice.status).toBe(400);
  });

  it("takes path variables over the same fields in the body", async () => {
    const appId = await createApp(server, "Path wins");
    const res = await server.call("POST", `/api/v1/apps/${appId}`, { app: { id: "other", displayName: "Renamed" } });
    expect(res.status).toBe(200);
    expect(((await res.json()) as { app: { id: string; displayName: string } }).app).toMatchObject({
      id: appId,
      displayName: "Renamed",
    });
  });
});

describe("path templates with nested fields", () => {
  it("binds {app.id} for Apps.Update", async () => {
    const appId = await createApp(server, "Before");
    const res = await server.call("POST", `/api/v1/apps/${appId}`, { app: { displayName: "After" } });
    expect(res.status).toBe(200);
    const got = (await (await server.call("GET", `/api/v1/apps/${appId}`)).json()) as { app: { displayName: string } };
    expect(got.app.displayName).toBe("After");
  });

  it("binds {app_entitlement.app_id} and {app_entitlement.id} for AppEntitlements.Update", async () => {
    const appId = await createApp(server);
    const entitlementId = await createEntitlement(server, appId, "Reader");
    const res = await server.call("POST", `/api/v1/apps/${appId}/entitlements/${entitlementId}`, {
      appEntitlement: { displayName: "Writer" },
      updateMask: "displayName",
    });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { appEntitlement: { id: string; appId: string; displayName: string } };
    expect(body.appEntitlement).toMatchObject({ id: entitlementId, appId, displayName: "Writer" });
  });

  it("binds {user.id} for Users.Update and answers 404 for an unknown user", async () => {
    const res = await server.call("POST", "/api/v1/users/ghost", { user: { displayName: "Nobody" } });
    expect(await answer(res)).toEqual({ status: 404, body: { code: "not_found", message: 'user "ghost" not found' } });
  });
});

describe("query parameters", () => {
  it("answers 400 naming an unknown query parameter", async () => {
    const error = await jsonError(await server.call("GET", "/api/v1/apps?pagesize=10"));
    expect(error.status).toBe(400);
    expect(error.body.message).toContain("pagesize");
  });

  it("answers 400 to a bad query value", async () => {
    const error = await jsonError(await server.call("GET", "/api/v1/users?page_size=ten"));
    expect(error.status).toBe(400);
    expect(error.body).toMatchObject({ code: "invalid_argument" });
  });

  it("answers 400 to a query parameter that repeats a path variable", async () => {
    const appId = await createApp(server);
    const res = await server.call("GET", `/api/v1/apps/${appId}/entitlements?app_id=${appId}`);
    expect(res.status).toBe(400);
  });

  it("answers 400 to query parameters on a body:\"*\" route", async () => {
    const res = await server.call("POST", "/api/v1/users?displayName=Ada", {});
    expect(res.status).toBe(400);
  });

  it("takes an empty enum parameter as unset, like every other empty one (?state= was a 400)", async () => {
    expect((await server.call("GET", "/api/v1/automation_executions?state=&page_size=")).status).toBe(200);
  });

  it("answers 400 to a number that is not decimal (protobuf-es took ?page_size=0x10 as 16)", async () => {
    for (const size of ["0x10", "0b11", "0o7"]) {
      const error = await jsonError(await server.call("GET", `/api/v1/apps?page_size=${size}`));
      expect(error).toMatchObject({ status: 400, body: { code: "invalid_argument", message: `query parameter page_size is not a decimal number: ${size}` } });
    }
    expect((await server.call("GET", "/api/v1/apps?page_size=1e1")).status).toBe(200); // proto3 JSON allows exponents
  });
});

describe("what is not REST's", () => {
  it("ignores Connect's and gRPC's own headers on a REST call (Connect-Timeout-Ms: abc was a 400 protocol error)", async () => {
    const res = await server.call("GET", "/api/v1/apps", undefined, { "connect-timeout-ms": "abc", "connect-protocol-version": "7", "grpc-timeout": "x" });
    expect(res.status).toBe(200);
  });

  it("answers CONNECT with a JSON 501 and closes the connection (it went unanswered: the connection was dropped)", async () => {
    const raw = await new Promise<string>((resolve, reject) => {
      const socket = netConnect(server.address.port, "127.0.0.1", () => socket.write("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n"));
      let text = "";
      socket.on("data", (chunk: Buffer) => (text += chunk.toString()));
      socket.on("end", () => resolve(text));
      socket.on("error", reject);
    });
    expect(raw).toMatch(/^HTTP\/1\.1 501 /);
    expect(JSON.parse(raw.slice(raw.indexOf("\r\n\r\n") + 4))).toEqual({ code: "unimplemented", message: "CONNECT is not implemented (example.com:443): accessd is not a proxy" });
  });

  it("answers CONNECT over HTTP/2 with a JSON 501 too (Node's was a bare 405)", async () => {
    const session = http2Connect(server.url);
    try {
      const stream = session.request({ ":method": "CONNECT", ":authority": "example.com:443" });
      const [headers] = (await once(stream, "response")) as [Record<string, unknown>];
      let body = "";
      stream.on("data", (chunk: Buffer) => (body += chunk.toString()));
      await once(stream, "end");
      expect(headers[":status"]).toBe(501);
      expect(JSON.parse(body)).toEqual({ code: "unimplemented", message: "CONNECT is not implemented (example.com:443): accessd is not a proxy" });
    } finally {
      session.close();
    }
  });

  it("names an update mask's unknown field as a JSON client wrote it", async () => {
    const appId = await createApp(server);
    const error = await jsonError(await server.call("POST", `/api/v1/apps/${appId}`, { app: { displayName: "x" }, updateMask: "createdAt" }));
    expect(error.body.message).toBe('updateMask names "createdAt" ("created_at"), which is not one of displayName, description');
    // Capitals protobuf-es turns into no proto name at all ("_display_name", "_r_o_l_e_s"): only as written.
    for (const path of ["DisplayName", "ROLES"]) {
      const capitals = await jsonError(await server.call("POST", `/api/v1/apps/${appId}`, { app: { displayName: "x" }, updateMask: path }));
      expect(capitals.body.message).toBe(`updateMask names "${path}", which is not one of displayName, description`);
    }
  });
});

describe("responses", () => {
  it("answers proto3 JSON with camelCase names and RFC 3339 timestamps", async () => {
    const userId = await createUser(server, "Grace Hopper", "grace@example.com");
    const res = await server.call("GET", `/api/v1/users/${userId}`);
    const body = (await res.json()) as { user: Record<string, unknown> };
    expect(body.user).toMatchObject({ id: userId, displayName: "Grace Hopper", email: "grace@example.com" });
    expect(body.user.createdAt).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/);
  });

  it("keeps \"list\" in an empty page even when the client accepts gzip", async () => {
    const appId = await createApp(server, "Gzip");
    const raw = await new Promise<{ encoding: string | undefined; text: string }>((resolve, reject) => {
      const req = httpRequest(
        `${server.url}/api/v1/apps/${appId}/entitlements`,
        { headers: { ...server.headers, "accept-encoding": "gzip" } },
        (res) => {
          const chunks: Buffer[] = [];
          res.on("data", (c: Buffer) => chunks.push(c));
          res.on("end", () => {
            const bytes = Buffer.concat(chunks);
            const encoding = res.headers["content-encoding"];
            resolve({ encoding, text: (encoding === "gzip" ? gunzipSync(bytes) : bytes).toString() });
          });
        },
      );
      req.on("error", reject);
      req.end();
    });
    expect(JSON.parse(raw.text)).toEqual({ list: [], nextPageToken: "" });
  });

  it("answers DELETE with 200 {}", async () => {
    const appId = await createApp(server, "Doomed");
    const res = await server.call("DELETE", `/api/v1/apps/${appId}`);
    expect(res.status).toBe(200);
    expect(await res.text()).toBe("{}");
    expect((await server.call("GET", `/api/v1/apps/${appId}`)).status).toBe(404);
  });

  it("echoes a well-formed X-Request-Id and makes one up otherwise", async () => {
    const given = await server.call("GET", "/api/v1/apps", undefined, { "x-request-id": "req-123" });
    expect(given.headers.get("x-request-id")).toBe("req-123");
    const made = await server.call("GET", "/api/v1/apps", undefined, { "x-request-id": "bad id with spaces" });
    expect(made.headers.get("x-request-id")).toMatch(/^[0-9a-f-]{36}$/);
  });
});

describe("one interceptor chain for every protocol", () => {
  it("logs REST and Connect calls of the same RPC through the same interceptor", async () => {
    const lines: Record<string, unknown>[] = [];
    const sink = new PassThrough();
    sink.on("data", (chunk: Buffer) => {
      for (const line of chunk.toString().split("\n")) if (line !== "") lines.push(JSON.parse(line) as Record<string, unknown>);
    });
    const accessd = await startAccessd(
      { ...configDefaults, port: 0, database: ":memory:", logLevel: "info" },
      createLogger("info", sink),
    );
    try {
      const headers = { ...server.headers, "content-type": "application/json" };
      await fetch(`${accessd.url}/api/v1/users`, { method: "POST", headers, body: '{"displayName":"Via REST"}' });
      await fetch(`${accessd.url}/svc.api.user.v1.Users/Create`, {
        method: "POST",
        headers,
        body: '{"displayName":"Via Connect"}',
      });
    } finally {
      await accessd.close();
    }
    const rpcs = lines.filter((l) => l.msg === "rpc" && l.procedure === "svc.api.user.v1.Users.Create");
    // Protocol only: this server has no test token, so once auth lands the outcome may be unauthenticated.
    expect(rpcs.map((l) => l.protocol)).toEqual(["rest", "connect"]);
    expect(JSON.stringify(lines)).not.toContain("Via REST");
  });
});

describe("cancellation", () => {
  it("aborts the call's signal when the client goes away before the answer", async () => {
    let signalled: (aborted: boolean) => void = () => {};
    const outcome = new Promise<boolean>((resolve) => (signalled = resolve));
    const log = createLogger("silent");
    // An Add that waits for its signal (or gives up after 5 s).
    const connect = new ConnectHandlers({
      interceptors: [],
      maxBodyBytes: 4096,
      log,
      routes: (router) =>
        router.service(AppEntitlementOwners, {
          add: async (_request, context) => {
            const aborted = await new Promise<boolean>((resolve) => {
              const timer = setTimeout(() => resolve(false), 5_000);
              context.signal.addEventListener("abort", () => {
                clearTimeout(timer);
                resolve(true);
              });
            });
            signalled(aborted);
            return {};
          },
        }),
    });
    const slow = new HttpServer({
      connect,
      rest: new RestTranscoder(connect.handlers, { maxBodyBytes: 4096 }),
      rawRoutes: [],
      ready: () => true,
      log,
      requestTimeoutMs: 30_000,
    });
    const { port } = await slow.listen(0, "127.0.0.1");
    try {
      const req = httpRequest({ port, method: "POST", path: "/api/v1/apps/a/entitlements/e/owners", headers: { "content-type": "application/json" } });
      req.on("error", () => {});
      req.end('{"userId":"u"}');
      setTimeout(() => req.destroy(), 200);
      const started = Date.now();
      expect(await outcome).toBe(true);
      expect(Date.now() - started).toBeLessThan(2_000);
    } finally {
      await slow.close();
    }
  });
});
