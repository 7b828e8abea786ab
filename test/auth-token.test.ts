import { scrypt } from "node:crypto";
import { once } from "node:events";
import { connect as http2Connect } from "node:http2";
import { gzipSync } from "node:zlib";
import * as grpc from "@grpc/grpc-js";
import { request as httpRequest, type IncomingHttpHeaders } from "node:http";
import { SignJWT, type JWTPayload } from "jose";
import Database from "better-sqlite3";
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { Role } from "../gen/svc/api/iam/v1/role_pb.js";
import { ManualClock } from "../src/clock.js";
import {
  connectCall,
  createKeyClient,
  grpcListUsers,
  jwtBearer,
  newClientKey,
  requestToken,
  signAssertion,
  type ClientKey,
} from "./support/auth-helpers.js";
import { startLoggedAccessd, startTestServer, testBootstrapClient, type TestServer } from "./support/test-server.js";

const clock = new ManualClock(Date.parse("2026-03-01T12:00:00Z"));
let server: TestServer;
let tokenUrl: string;

beforeAll(async () => {
  server = await startTestServer({}, { clock });
  tokenUrl = `${server.config.baseUrl}/auth/v1/token`;
});
afterAll(() => server.close());
// Failures count per source address; move past the limiter's minute so tests stay independent.
afterEach(() => clock.advance(61_000));

const keyClient = (alg: ClientKey["alg"] = "EdDSA") => createKeyClient(server, alg);

/**
 * POST /auth/v1/token (form-encoded) over a connection from the loopback address `localAddress`:
 * the server listens on 127.0.0.1 and Linux routes all of 127/8 over lo, so each address is a
 * distinct TCP peer to the server.
 */
function requestTokenFrom(
  localAddress: string,
  params: Record<string, string>,
): Promise<{ status: number; headers: IncomingHttpHeaders; body: Record<string, unknown> }> {
  const body = new URLSearchParams(params).toString();
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      `${server.url}/auth/v1/token`,
      {
        method: "POST",
        localAddress,
        agent: false,
        headers: { "content-type": "application/x-www-form-urlencoded", "content-length": Buffer.byteLength(body) },
      },
      (res) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (chunk: string) => (text += chunk));
        res.on("error", reject);
        res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: JSON.parse(text) as Record<string, unknown> }));
      },
    );
    req.on("error", reject);
    req.end(body);
  });
}

async function expectTokenWorksEverywhere(token: string): Promise<void> {
  const rest = await fetch(`${server.url}/api/v1/users`, { headers: { authorization: `Bearer ${token}` } });
  expect(rest.status).toBe(200);
  const connect = await connectCall(server, "svc.api.user.v1.Users/List", { authorization: `Bearer ${token}` });
  expect(connect.status).toBe(200);
  const viaGrpc = await grpcListUsers(server, `Bearer ${token}`);
  expect(viaGrpc.list.length).toBeGreaterThan(0);
}

describe("POST /auth/v1/token with client_secret_post", () => {
  for (const encoding of ["form", "json"] as const) {
    it(`issues a Bearer token for ${encoding} credentials that works over REST, Connect and gRPC`, async () => {
      const answer = await requestToken(
        server,
        { grant_type: "client_credentials", client_id: testBootstrapClient.clientId, client_secret: testBootstrapClient.clientSecret },
        encoding,
      );
      expect(answer.status).toBe(200);
      expect(answer.headers.get("cache-control")).toBe("no-store");
      expect(Object.keys(answer.body).sort()).toEqual(["access_token", "expires_in", "token_type"]);
      expect(answer.body.token_type).toBe("Bearer");
      expect(answer.body.expires_in).toBe(3600);
      await expectTokenWorksEverywhere(String(answer.body.access_token));
    });
  }

  it("answers 503 temporarily_unavailable to a damaged page, and makes the server unready as every other route does (it stayed ready)", async () => {
    const own = await startTestServer();
    try {
      const damaged = new Database.SqliteError("database disk image is malformed", "SQLITE_CORRUPT");
      const read = vi.spyOn(own.store.clients, "get").mockImplementation(() => {
        throw damaged;
      });
      const answer = await requestToken(own, { grant_type: "client_credentials", client_id: testBootstrapClient.clientId, client_secret: testBootstrapClient.clientSecret });
      read.mockRestore();
      expect([answer.status, answer.body.error]).toEqual([503, "temporarily_unavailable"]);
      expect((await fetch(`${own.url}/readyz`)).status).toBe(503);
    } finally {
      await own.close();
    }
  });

  it("answers 401 invalid_client to a wrong secret", async () => {
    const answer = await requestToken(server, {
      grant_type: "client_credentials",
      client_id: testBootstrapClient.clientId,
      client_secret: "not-the-secret",
    });
    expect(answer.status).toBe(401);
    expect(answer.body).toEqual({ error: "invalid_client", error_description: "unknown client or wrong client_secret" });
    expect(answer.headers.get("cache-control")).toBe("no-store");
  });

  it("answers 401 invalid_client to an unknown client", async () => {
    const answer = await requestToken(
      server,
      { grant_type: "client_credentials", client_id: "nobody", client_secret: "whatever" },
      "json",
    );
    expect(answer.status).toBe(401);
    expect(answer.body.error).toBe("invalid_client");
  });

  it("issues no token to a client deleted while its secret was being checked", async () => {
    const users = await server.call("POST", "/api/v1/users", { displayName: "soon gone", roles: ["READ_ONLY"] });
    const userId = ((await users.json()) as { user: { id: string } }).user.id;
    const created = await server.call("POST", "/api/v1/iam/clients", { displayName: "soon gone", userId });
    const client = (await created.json()) as { client: { id: string }; clientSecret: string };
    // libuv's four threads busy with slow scrypts: the request's secret check waits behind them,
    // and the client is deleted meanwhile (through the store: the API's own checks would wait too).
    const busy = Array.from(
      { length: 4 },
      () => new Promise((resolve) => scrypt("x", "y", 32, { N: 2 ** 16, r: 8, maxmem: 2 ** 28 }, resolve)),
    );
    const answer = requestToken(server, { grant_type: "client_credentials", client_id: client.client.id, client_secret: client.clientSecret });
    await new Promise((r) => setTimeout(r, 50));
    expect(server.store.clients.delete(client.client.id)).toBe(true);
    await Promise.all(busy);
    expect(await answer).toMatchObject({
      status: 401,
      body: { error: "invalid_client", error_description: "unknown client or wrong client_secret" },
    });
  });

  it("issues no token to a client deleted and re-created with the same id and secret while its secret was being checked", async () => {
    const users = await server.call("POST", "/api/v1/users", { displayName: "re-created", roles: ["READ_ONLY"] });
    const userId = ((await users.json()) as { user: { id: string } }).user.id;
    const created = await server.call("POST", "/api/v1/iam/clients", { displayName: "re-created", userId });
    const client = (await created.json()) as { client: { id: string }; clientSecret: string };
    const record = server.store.clients.get(client.client.id);
    expect(record).toBeDefined();
    const busy = Array.from(
      { length: 4 },
      () => new Promise((resolve) => scrypt("x", "y", 32, { N: 2 ** 16, r: 8, maxmem: 2 ** 28 }, resolve)),
    );
    const answer = requestToken(server, { grant_type: "client_credentials", client_id: client.client.id, client_secret: client.clientSecret });
    await new Promise((r) => setTimeout(r, 50));
    // Another record with the same id (as a restart re-creates the bootstrap client): the check
    // in flight was against the deleted one.
    server.store.transaction(() => {
      expect(server.store.clients.delete(client.client.id)).toBe(true);
      server.store.clients.insert({ ...record!, createdAt: record!.createdAt + 1 });
    });
    await Promise.all(busy);
    expect(await answer).toMatchObject({
      status: 401,
      body: { error: "invalid_client", error_description: "unknown client or wrong client_secret" },
    });
  });

  it("answers 400 invalid_request to credentials in a Basic Authorization header", async () => {
    const basic = Buffer.from(`${testBootstrapClient.clientId}:${testBootstrapClient.clientSecret}`).toString("base64");
    const answer = await requestToken(server, { grant_type: "client_credentials" }, "form", { authorization: `Basic ${basic}` });
    expect(answer.status).toBe(400);
    expect(answer.body.error).toBe("invalid_request");
    expect(String(answer.body.error_description)).toContain("request body");
  });

  it("answers 400 invalid_request to a missing grant_type, client_id or credential", async () => {
    const { clientId, clientSecret } = testBootstrapClient;
    const incomplete: Record<string, string>[] = [
      { client_id: clientId, client_secret: clientSecret },
      { grant_type: "client_credentials", client_secret: clientSecret },
      { grant_type: "client_credentials", client_id: clientId },
    ];
    for (const params of incomplete) {
      const answer = await requestToken(server, params);
      expect(answer.status).toBe(400);
      expect(answer.body.error).toBe("invalid_request");
    }
  });

  it("answers 400 unsupported_grant_type to another grant", async () => {
    const answer = await requestToken(server, { grant_type: "password", client_id: "x", client_secret: "y" });
    expect(answer.status).toBe(400);
    expect(answer.body.error).toBe("unsupported_grant_type");
  });

  it("answers 400 invalid_request to a parameter given twice and to another content type", async () => {
    const twice = await fetch(`${server.url}/auth/v1/token`, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: "grant_type=client_credentials&client_id=a&client_id=b&client_secret=c",
    });
    expect(twice.status).toBe(400);
    expect(((await twice.json()) as { error: string }).error).toBe("invalid_request");
    const text = await fetch(`${server.url}/auth/v1/token`, { method: "POST", headers: { "content-type": "text/plain" }, body: "x" });
    expect(text.status).toBe(400);
  });

  it("answers 415 invalid_request to a compressed body (it read as a form without parameters)", async () => {
    const form = "grant_type=client_credentials&client_id=a&client_secret=b";
    const res = await fetch(`${server.url}/auth/v1/token`, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded", "content-encoding": "gzip" },
      body: gzipSync(form),
    });
    expect(res.status).toBe(415);
    expect(res.headers.get("accept-encoding")).toBe("identity");
    expect(((await res.json()) as { error: string }).error).toBe("invalid_request");
  });

  it("answers 405 to GET", async () => {
    const res = await fetch(`${server.url}/auth/v1/token`);
    expect(res.status).toBe(405);
    expect(res.headers.get("allow")).toBe("POST");
  });
});

describe("POST /auth/v1/token with private_key_jwt (RFC 7523)", () => {
  for (const [alg, encoding] of [
    ["EdDSA", "form"],
    ["ES256", "json"],
    ["RS256", "form"],
  ] as const) {
    it(`issues a token for a ${alg} assertion sent ${encoding}-encoded that works over REST, Connect and gRPC`, async () => {
      const { clientId, key } = await keyClient(alg);
      const answer = await requestToken(
        server,
        {
          grant_type: "client_credentials",
          client_id: clientId,
          client_assertion_type: jwtBearer,
          client_assertion: await signAssertion(key, clientId, tokenUrl, clock.now()),
        },
        encoding,
      );
      expect(answer.status).toBe(200);
      expect(answer.body.token_type).toBe("Bearer");
      await expectTokenWorksEverywhere(String(answer.body.access_token));
    });
  }

  it("accepts the base URL as the assertion audience", async () => {
    const { clientId, key } = await keyClient();
    const assertion = await signAssertion(key, clientId, server.config.baseUrl, clock.now());
    const answer = await requestToken(server, {
      grant_type: "client_credentials",
      client_id: clientId,
      client_assertion_type: jwtBearer,
      client_assertion: assertion,
    });
    expect(answer.status).toBe(200);
  });

  it("answers 401 invalid_client to a replayed assertion", async () => {
    const { clientId, key } = await keyClient();
    const params = {
      grant_type: "client_credentials",
      client_id: clientId,
      client_assertion_type: jwtBearer,
      client_assertion: await signAssertion(key, clientId, tokenUrl, clock.now()),
    };
    expect((await requestToken(server, params)).status).toBe(200);
    const replay = await requestToken(server, params, "json");
    expect(replay.status).toBe(401);
    expect(replay.body).toEqual({ error: "invalid_client", error_description: "client assertion jti was already used" });
  });

  it("answers 401 invalid_client to an expired assertion", async () => {
    const { clientId, key } = await keyClient();
    const expired = await signAssertion(key, clientId, tokenUrl, clock.now() - 600_000); // exp 9 minutes ago
    const answer = await requestToken(server, {
      grant_type: "client_credentials",
      client_id: clientId,
      client_assertion_type: jwtBearer,
      client_assertion: expired,
    });
    expect(answer.status).toBe(401);
    expect(answer.body).toEqual({ error: "invalid_client", error_description: "client assertion has expired" });
  });

  it("takes an assertion whose nbf is up to 5 minutes ahead (a client's clock ahead of the server's was refused), and holds exp to the clock", async () => {
    const { clientId, key } = await keyClient();
    const nowSeconds = Math.floor(clock.now() / 1000);
    const ask = async (claims: { nbf?: number; exp?: number }) =>
      requestToken(server, { grant_type: "client_credentials", client_id: clientId, client_assertion_type: jwtBearer, client_assertion: await signAssertion(key, clientId, tokenUrl, clock.now(), claims) }, "json");
    expect((await ask({ nbf: nowSeconds + 30, exp: nowSeconds + 90 })).status).toBe(200);
    expect((await ask({ nbf: nowSeconds + 290, exp: nowSeconds + 299 })).status).toBe(200);
    expect((await ask({ nbf: nowSeconds + 310 })).body).toEqual({ error: "invalid_client", error_description: "unknown client or invalid client_assertion" });
    expect((await ask({ exp: nowSeconds - 1 })).body).toEqual({ error: "invalid_client", error_description: "client assertion has expired" });
    // An nbf at or after its exp is valid at no time (the leeway took one; review).
    expect((await ask({ nbf: nowSeconds + 200, exp: nowSeconds + 100 })).body).toEqual({
      error: "invalid_client",
      error_description: "client assertion nbf is not before its exp: it is valid at no time",
    });
  });

  it("answers 401 invalid_client to bad assertions: another key, wrong audience, wrong issuer, exp too far ahead", async () => {
    const { clientId, key } = await keyClient();
    const other = await newClientKey();
    const now = clock.now();
    const bad = [
      await signAssertion(other, clientId, tokenUrl, now),
      await signAssertion(key, clientId, "https://elsewhere.example/auth/v1/token", now),
      await signAssertion(key, clientId, tokenUrl, now, { iss: "someone-else" }),
      await signAssertion(key, clientId, tokenUrl, now, { exp: Math.floor(now / 1000) + 600 }),
      "not.a.jwt",
    ];
    for (const assertion of bad) {
      const answer = await requestToken(server, {
        grant_type: "client_credentials",
        client_id: clientId,
        client_assertion_type: jwtBearer,
        client_assertion: assertion,
      });
      expect(answer.status).toBe(401);
      expect(answer.body.error).toBe("invalid_client");
    }
  });

  it("answers 401 invalid_client to an assertion whose sub is not the client id, though iss is", async () => {
    const { clientId, key } = await keyClient();
    const params = { grant_type: "client_credentials", client_id: clientId, client_assertion_type: jwtBearer };
    const otherSubject = await signAssertion(key, clientId, tokenUrl, clock.now(), { iss: clientId, sub: "someone-else" });
    const answer = await requestToken(server, { ...params, client_assertion: otherSubject });
    expect(answer.status).toBe(401);
    expect(answer.body).toEqual({ error: "invalid_client", error_description: "unknown client or invalid client_assertion" });
    // The same key, issuer and audience with sub = client id is accepted: sub alone was refused.
    const sameSubject = await signAssertion(key, clientId, tokenUrl, clock.now(), { iss: clientId, sub: clientId });
    expect((await requestToken(server, { ...params, client_assertion: sameSubject })).status).toBe(200);
  });

  it("answers 401 invalid_client to an assertion for a secret client and 400 to a wrong assertion type", async () => {
    const key = await newClientKey();
    const forSecretClient = await requestToken(server, {
      grant_type: "client_credentials",
      client_id: testBootstrapClient.clientId,
      client_assertion_type: jwtBearer,
      client_assertion: await signAssertion(key, testBootstrapClient.clientId, tokenUrl, clock.now()),
    });
    expect(forSecretClient.status).toBe(401);
    const wrongType = await requestToken(server, {
      grant_type: "client_credentials",
      client_id: testBootstrapClient.clientId,
      client_assertion_type: "urn:example:other",
      client_assertion: "x.y.z",
    });
    expect(wrongType.status).toBe(400);
    expect(wrongType.body.error).toBe("invalid_request");
  });
});

describe("POST /auth/v1/token: what a failed client_assertion tells", () => {
  it("answers an unknown client, a client_secret client and a wrong key for a key client alike", async () => {
    const { clientId } = await keyClient();
    const stranger = await newClientKey();
    const cases = [
      { name: "unknown client", clientId: "nobody" },
      { name: "client_secret client", clientId: testBootstrapClient.clientId },
      { name: "key client, another key", clientId },
    ];
    for (const { name, clientId: id } of cases) {
      const answer = await requestToken(server, {
        grant_type: "client_credentials",
        client_id: id,
        client_assertion_type: jwtBearer,
        client_assertion: await signAssertion(stranger, id, tokenUrl, clock.now()),
      });
      expect({ name, status: answer.status, body: answer.body }).toEqual({
        name,
        status: 401,
        body: { error: "invalid_client", error_description: "unknown client or invalid client_assertion" },
      });
    }
  });

  it("answers 401 invalid_client, never 500, to a signed assertion whose jti is not a string of 1 to 256 characters", async () => {
    const { clientId, key } = await keyClient();
    const now = Math.floor(clock.now() / 1000);
    const signWithJti = (jti: unknown) =>
      // jose types jti as a string; these assertions deliberately carry other types.
      new SignJWT((jti === undefined ? {} : { jti }) as JWTPayload)
        .setProtectedHeader({ alg: key.alg })
        .setIssuer(clientId)
        .setSubject(clientId)
        .setAudience(tokenUrl)
        .setIssuedAt(now)
        .setExpirationTime(now + 60)
        .sign(key.privateKey);
    const jtiRule = "client assertion jti must be a string of 1 to 256 characters";
    const cases: [string, unknown, string][] = [
      ["object", { a: 1 }, jtiRule],
      ["boolean", true, jtiRule],
      ["array", ["a", "b"], jtiRule],
      ["number", 7, jtiRule],
      ["empty", "", jtiRule],
      ["257 characters", "j".repeat(257), jtiRule],
      ["missing", undefined, "unknown client or invalid client_assertion"],
    ];
    const params = { grant_type: "client_credentials", client_id: clientId, client_assertion_type: jwtBearer };
    for (const [name, jti, description] of cases) {
      const answer = await requestToken(server, { ...params, client_assertion: await signWithJti(jti) });
      expect({ name, status: answer.status, body: answer.body }).toEqual({
        name,
        status: 401,
        body: { error: "invalid_client", error_description: description },
      });
    }
    const longest = await requestToken(server, { ...params, client_assertion: await signWithJti("j".repeat(256)) });
    expect(longest.status).toBe(200);
  });
});

describe("POST /auth/v1/token with a JSON body", () => {
  it("answers 400 invalid_request to a parameter given twice, as in the form encoding", async () => {
    const { clientId, clientSecret } = testBootstrapClient;
    const bodies = [
      `{"grant_type":"client_credentials","client_id":"nobody","client_id":"${clientId}","client_secret":"${clientSecret}"}`,
      `{"grant_type":"client_credentials","client_id":"nobody","\\u0063lient_id":"${clientId}","client_secret":"${clientSecret}"}`,
    ];
    for (const body of bodies) {
      const res = await fetch(`${server.url}/auth/v1/token`, { method: "POST", headers: { "content-type": "application/json" }, body });
      expect(res.status).toBe(400);
      expect(await res.json()).toEqual({ error: "invalid_request", error_description: "a parameter is given more than once" });
    }
    const once = await requestToken(server, { grant_type: "client_credentials", client_id: clientId, client_secret: clientSecret }, "json");
    expect(once.status).toBe(200);
  });

  it("ignores parameters it does not read, whatever their JSON type, as RFC 6749 3.2 says (a number was a 400), and takes null as omitted", async () => {
    const { clientId, clientSecret } = testBootstrapClient;
    const post = (body: string) => fetch(`${server.url}/auth/v1/token`, { method: "POST", headers: { "content-type": "application/json" }, body });
    const credentials = `"grant_type":"client_credentials","client_id":"${clientId}","client_secret":"${clientSecret}"`;
    const extra = await post(`{${credentials},"foo":1,"bar":{"a":[1,true,null]},"baz":null,"huge":1e400,"resource":["x"]}`);
    expect(extra.status).toBe(200);
    expect(((await extra.json()) as { access_token?: string }).access_token).toBeTruthy();
    // A parameter the endpoint reads must still be a string.
    const numeric = await post(`{"grant_type":"client_credentials","client_id":42,"client_secret":"${clientSecret}"}`);
    expect([numeric.status, await numeric.json()]).toEqual([400, { error: "invalid_request", error_description: "parameter client_id must be a string" }]);
    const omitted = await post(`{"grant_type":"client_credentials","client_id":"${clientId}","client_secret":null}`);
    expect([omitted.status, await omitted.json()]).toEqual([400, { error: "invalid_request", error_description: "client_secret or client_assertion is required" }]);
  });
});

describe("brute-force limiter", () => {
  const wrong = { grant_type: "client_credentials", client_id: testBootstrapClient.clientId, client_secret: "guess" };

  it("answers the 11th failure within a minute for one client id with 429 and Retry-After", async () => {
    for (let i = 1; i <= 10; i++) {
      clock.advance(1000);
      expect((await requestToken(server, wrong)).status).toBe(401);
    }
    clock.advance(1000);
    const eleventh = await requestToken(server, wrong);
    expect(eleventh.status).toBe(429);
    expect(eleventh.headers.get("retry-after")).toBe("50"); // the first failure leaves the window in 50 s
    expect(eleventh.body.error).toBe("slow_down");
    // Even the right secret waits until the window has passed.
    const right = { ...wrong, client_secret: testBootstrapClient.clientSecret };
    expect((await requestToken(server, right)).status).toBe(429);
    clock.advance(50_000);
    expect((await requestToken(server, right)).status).toBe(200);
  });

  it("answers the 11th failure for one client id with 429 though each failure came from another source address", async () => {
    // 127.0.0.2 ... 127.0.0.11: one failure per address, ten for the client id.
    for (let i = 2; i <= 11; i++) {
      clock.advance(1000);
      const answer = await requestTokenFrom(`127.0.0.${i}`, wrong);
      expect(answer.status).toBe(401);
      expect(answer.body).toEqual({ error: "invalid_client", error_description: "unknown client or wrong client_secret" });
    }
    clock.advance(1000);
    const eleventh = await requestTokenFrom("127.0.0.12", wrong); // an address with no failure at all
    expect(eleventh.status).toBe(429);
    expect(eleventh.headers["retry-after"]).toBe("50"); // the first failure leaves the window in 50 s
    expect(eleventh.body).toEqual({ error: "slow_down", error_description: "too many failed attempts; retry after 50 seconds" });
    // Even the right secret, from yet another address, waits for the client id's window.
    const right = { ...wrong, client_secret: testBootstrapClient.clientSecret };
    expect((await requestTokenFrom("127.0.0.13", right)).status).toBe(429);
    // The per-address limit is apart: the fresh address may still try another client id.
    const otherClient = await requestTokenFrom("127.0.0.12", { ...wrong, client_id: "another-client" });
    expect(otherClient.status).toBe(401);
    expect(otherClient.body.error).toBe("invalid_client");
  });

  it("counts failures per source address across client ids", async () => {
    for (let i = 1; i <= 10; i++) {
      const answer = await requestToken(server, { ...wrong, client_id: `unknown-${i}` });
      expect(answer.status).toBe(401);
    }
    const answer = await requestToken(server, { ...wrong, client_id: "unknown-11" });
    expect(answer.status).toBe(429);
    expect(Number(answer.headers.get("retry-after"))).toBe(60);
  });
});

describe("secrets and tokens in logs", () => {
  it("never writes a client secret, assertion or access token to the log", async () => {
    const { accessd, text } = await startLoggedAccessd("trace");
    try {
      const post = (body: string) =>
        fetch(`${accessd.url}/auth/v1/token`, {
          method: "POST",
          headers: { "content-type": "application/x-www-form-urlencoded" },
          body,
        });
      const ok = (await (
        await post(`grant_type=client_credentials&client_id=${testBootstrapClient.clientId}&client_secret=${testBootstrapClient.clientSecret}`)
      ).json()) as { access_token: string };
      await post(`grant_type=client_credentials&client_id=${testBootstrapClient.clientId}&client_secret=wrong-secret-value`);
      await fetch(`${accessd.url}/api/v1/users`, { headers: { authorization: `Bearer ${ok.access_token}` } });
      await fetch(`${accessd.url}/api/v1/users`, { headers: { authorization: "Bearer forged.token.value" } });
    } finally {
      await accessd.close();
    }
    const logged = text();
    expect(logged).toContain("token request refused");
    for (const secret of [testBootstrapClient.clientSecret, "wrong-secret-value", "forged.token.value"]) {
      expect(logged).not.toContain(secret);
    }
    expect(logged).not.toMatch(/eyJ[\w-]+\.[\w-]+\.[\w-]+/); // no JWT of any kind
  });
});

describe("token requests in the log and the metrics", () => {
  it("logs every grant and refusal with the client id as given and the source address, and counts them by outcome", async () => {
    const { accessd, lines: logLines } = await startLoggedAccessd("info");
    let metrics = "";
    try {
      const post = (clientId: string, secret: string) =>
        fetch(`${accessd.url}/auth/v1/token`, {
          method: "POST",
          headers: { "content-type": "application/x-www-form-urlencoded" },
          body: new URLSearchParams({ grant_type: "client_credentials", client_id: clientId, client_secret: secret }),
        });
      expect((await post(testBootstrapClient.clientId, testBootstrapClient.clientSecret)).status).toBe(200);
      for (let i = 0; i < 10; i++) expect((await post("guessed-client", `wrong-${i}`)).status).toBe(401);
      expect((await post("guessed-client", "wrong-10")).status).toBe(429);
      // Refused before its client id is read: the source address is logged all the same.
      expect((await fetch(`${accessd.url}/auth/v1/token`, { method: "POST", body: "grant_type=password" , headers: { "content-type": "application/x-www-form-urlencoded" } })).status).toBe(400);
      metrics = await (await fetch(`${accessd.url}/metrics`)).text();
    } finally {
      await accessd.close();
    }
    const lines = logLines();
    expect(lines).toContainEqual(
      expect.objectContaining({ msg: "token issued", clientId: testBootstrapClient.clientId, sourceIp: "127.0.0.1", expiresIn: 3600 }),
    );
    const refused = lines.filter((line) => line.msg === "token request refused");
    expect(refused).toHaveLength(12);
    expect(refused[11]).toMatchObject({ error: "unsupported_grant_type", sourceIp: "127.0.0.1" });
    expect(refused[0]).toMatchObject({ clientId: "guessed-client", sourceIp: "127.0.0.1", error: "invalid_client", reason: "unknown client" });
    expect(refused[10]).toMatchObject({ error: "slow_down", reason: "too many failed attempts", retryAfterSeconds: expect.any(Number) });
    expect(metrics).toContain('accessd_token_requests_total{outcome="issued"} 1');
    expect(metrics).toContain('accessd_token_requests_total{outcome="invalid_client"} 10');
    expect(metrics).toContain('accessd_token_requests_total{outcome="slow_down"} 1');
    expect(metrics).toContain('accessd_token_requests_total{outcome="temporarily_unavailable"} 0');
  });
});

describe("a token request cut by the request deadline", () => {
  it("is answered 408 in RFC 6749's shape (it was the API's), and logged with its source address, at info", async () => {
    const { accessd, lines } = await startLoggedAccessd("info", { requestTimeoutMs: 1_000 });
    const client = http2Connect(accessd.url);
    client.on("error", () => {});
    try {
      const stream = client.request({ ":method": "POST", ":path": "/auth/v1/token", "content-type": "application/x-www-form-urlencoded" });
      stream.on("error", () => {});
      const chunks: Buffer[] = [];
      stream.on("data", (chunk: Buffer) => chunks.push(chunk));
      stream.write("grant_type=client_credentials&client_id=x"); // and no more
      const [headers] = (await once(stream, "response")) as [Record<string, string | number>];
      expect(headers[":status"]).toBe(408);
      expect(headers["cache-control"]).toBe("no-store");
      await once(stream, "close");
      expect(JSON.parse(Buffer.concat(chunks).toString("utf8"))).toEqual({
        error: "invalid_request",
        error_description: "the request body did not arrive within 1000 ms",
      });
    } finally {
      client.close();
      await accessd.close();
    }
    expect(lines()).toContainEqual(
      expect.objectContaining({ level: 30, msg: "token request cut by its deadline before its body arrived", sourceIp: "127.0.0.1" }),
    );
  });
});

describe("roles of a token over gRPC", () => {
  it("answers a gRPC call without a token with UNAUTHENTICATED and one of a roleless user with PERMISSION_DENIED", async () => {
    const missing = await grpcListUsers(server, undefined).then(
      () => undefined,
      (e: unknown) => e as grpc.ServiceError,
    );
    expect(missing?.code).toBe(grpc.status.UNAUTHENTICATED);
    const roleless = await grpcListUsers(server, `Bearer ${await server.tokenFor()}`).then(
      () => undefined,
      (e: unknown) => e as grpc.ServiceError,
    );
    expect(roleless?.code).toBe(grpc.status.PERMISSION_DENIED);
    const reader = await grpcListUsers(server, `Bearer ${await server.tokenFor(Role.READ_ONLY)}`);
    expect(reader.list.length).toBeGreaterThan(0);
  });
});
