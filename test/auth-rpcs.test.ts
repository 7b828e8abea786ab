import { randomBytes } from "node:crypto";
import * as grpc from "@grpc/grpc-js";
import { readdirSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { getOption, hasOption, type DescFile, type DescMethod } from "@bufbuild/protobuf";
import { Code, createClient, createRouterTransport } from "@connectrpc/connect";
import { SignJWT, decodeJwt, decodeProtectedHeader, generateKeyPair } from "jose";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Apps } from "../gen/svc/api/app/v1/app_pb.js";
import { Role, required_role } from "../gen/svc/api/iam/v1/role_pb.js";
import { AccessTokens } from "../src/auth/access-tokens.js";
import { authorizationInterceptor } from "../src/auth/authorization-interceptor.js";
import { RequiredRoles } from "../src/auth/required-roles.js";
import { ManualClock } from "../src/clock.js";
import { SecretCipher } from "../src/store/secret-cipher.js";
import { Store } from "../src/store/store.js";
import { connectCall } from "./support/auth-helpers.js";
import { rawRequest } from "./support/raw-http.js";
import { repoRoot } from "./support/spawn-cli.js";
import { startTestServer, type TestServer } from "./support/test-server.js";

const clock = new ManualClock(Date.parse("2026-03-01T12:00:00Z"));
let server: TestServer;

beforeAll(async () => {
  server = await startTestServer({}, { clock });
});
afterAll(() => server.close());

const procedureOf = (m: DescMethod) => `${m.parent.typeName}/${m.name}`;
/** Reads by name: everything else writes (or, like webhook deliveries, is declared above READ_ONLY anyway). */
const isRead = (m: DescMethod) => /^(Get|List|Search)/.test(m.name);
const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

/** Every RPC of the registered Connect handlers, so a future RPC cannot slip through. */
function rpcs(): readonly DescMethod[] {
  return server.rpcs;
}

describe("the contract walk", () => {
  it("covers every service of the API router", () => {
    const services = new Set(rpcs().map((m) => m.parent.typeName));
    for (const name of ["svc.api.app.v1.Apps", "svc.api.user.v1.Users", "svc.api.iam.v1.Clients"]) {
      expect(services).toContain(name);
    }
    expect(rpcs().length).toBeGreaterThanOrEqual(20);
  });

  it("finds a required_role on every RPC of every generated service file", async () => {
    const files: string[] = [];
    const walk = (dir: string) => {
      for (const entry of readdirSync(dir, { withFileTypes: true })) {
        if (entry.isDirectory()) walk(join(dir, entry.name));
        else if (entry.name.endsWith("_pb.ts")) files.push(join(dir, entry.name));
      }
    };
    walk(join(repoRoot, "gen", "svc"));
    const undeclared: string[] = [];
    let methods = 0;
    for (const file of files) {
      const module = (await import(pathToFileURL(file).href)) as Record<string, unknown>;
      for (const value of Object.values(module)) {
        if (typeof value !== "object" || value === null || (value as { kind?: unknown }).kind !== "file") continue;
        for (const service of (value as DescFile).services) {
          for (const method of service.methods) {
            methods++;
            if (!hasOption(method, required_role) || getOption(method, required_role) === Role.ROLE_UNSPECIFIED) {
              undeclared.push(procedureOf(method));
            }
          }
        }
      }
    }
    expect(methods).toBeGreaterThanOrEqual(rpcs().length);
    expect(undeclared).toEqual([]);
  });
});

describe("every RPC requires a valid bearer token", () => {
  it("answers 401 unauthenticated to a call without a token", async () => {
    const answers = await Promise.all(rpcs().map(async (m) => [procedureOf(m), await connectCall(server, procedureOf(m), {})] as const));
    for (const [procedure, answer] of answers) {
      expect({ procedure, status: answer.status, code: answer.body.code }).toEqual({ procedure, status: 401, code: "unauthenticated" });
      expect(answer.headers.get("www-authenticate")).toBe("Bearer");
    }
  });

  it("answers 401 to a malformed token and to a token signed by another key", async () => {
    const real = server.headers.authorization?.slice("Bearer ".length) ?? "";
    const claims = decodeJwt(real);
    const header = decodeProtectedHeader(real);
    const { privateKey } = await generateKeyPair("EdDSA");
    // Same claims and even the same kid as a genuine token; only the signing key differs.
    const foreign = await new SignJWT(claims).setProtectedHeader({ alg: "EdDSA", typ: "at+jwt", kid: header.kid ?? "" }).sign(privateKey);
    const foreignKid = await new SignJWT(claims).setProtectedHeader({ alg: "EdDSA", typ: "at+jwt", kid: "other" }).sign(privateKey);
    const [, payload = "", signature = ""] = real.split(".");
    const noneAlg = `${Buffer.from(JSON.stringify({ alg: "none", typ: "at+jwt" })).toString("base64url")}.${payload}.`;
    const tampered = `${real.split(".")[0] ?? ""}.${Buffer.from(JSON.stringify({ ...claims, sub: "someone" })).toString("base64url")}.${signature}`;
    for (const authorization of [
      "Bearer not-a-jwt",
      `Basic ${Buffer.from("a:b").toString("base64")}`,
      `Bearer ${foreign}`,
      `Bearer ${foreignKid}`,
      `Bearer ${noneAlg}`,
      `Bearer ${tampered}`,
    ]) {
      for (const m of rpcs()) {
        const answer = await connectCall(server, procedureOf(m), { authorization });
        expect({ procedure: procedureOf(m), status: answer.status }).toEqual({ procedure: procedureOf(m), status: 401 });
      }
    }
  });

  it("answers 401 to a valid token spelled another way: padded, or its signature's last character with unused bits set (both were accepted)", async () => {
    const token = await server.tokenFor(Role.READ_ONLY);
    expect((await connectCall(server, "svc.api.app.v1.Apps/List", bearer(token))).status).toBe(200);
    // An EdDSA signature is 64 bytes: its 86th character carries 4 bits and 2 unused ones.
    const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    const otherBits = `${token.slice(0, -1)}${alphabet[alphabet.indexOf(token.slice(-1)) ^ 1] ?? ""}`;
    for (const spelling of [`${token}==`, otherBits]) {
      const answer = await connectCall(server, "svc.api.app.v1.Apps/List", bearer(spelling));
      expect({ status: answer.status, message: answer.body.message }).toEqual({
        status: 401,
        message: "token is malformed: a JWT of three base64url parts without padding, as issued",
      });
    }
  });

  it("answers REST calls without a token with 401 and WWW-Authenticate: Bearer", async () => {
    const res = await fetch(`${server.url}/api/v1/apps`);
    expect(res.status).toBe(401);
    expect(res.headers.get("www-authenticate")).toBe("Bearer");
    expect(await res.json()).toEqual({
      code: "unauthenticated",
      message: "missing bearer token: send Authorization: Bearer <access token> (POST /auth/v1/token)",
    });
    const bad = await fetch(`${server.url}/api/v1/users`, {
      method: "POST",
      headers: { authorization: "Bearer x.y.z", "content-type": "application/json" },
      body: '{"displayName":"x"}',
    });
    expect(bad.status).toBe(401);
    expect(bad.headers.get("www-authenticate")).toBe('Bearer error="invalid_token"');
  });

  it("refuses a call without a valid token before it decodes the body (a 1 MiB body of small values cost the thread 85-270 ms): a body that is a 400 with a token is a 401 without, on REST, Connect (JSON, gzip, proto) and gRPC (grpc-js)", async () => {
    const post = (path: string, headers: Record<string, string>, body: string | Buffer) =>
      fetch(`${server.url}${path}`, { method: "POST", headers, body });
    const missing = { code: "unauthenticated", message: "missing bearer token: send Authorization: Bearer <access token> (POST /auth/v1/token)" };
    const json = { "content-type": "application/json" };
    for (const [what, path, headers, body] of [
      ["REST, an unknown field", "/api/v1/users", json, '{"bogus":1}'],
      ["REST, not JSON", "/api/v1/automations/x/execute", json, "{"],
      ["Connect JSON, not JSON", "/svc.api.user.v1.Users/Create", json, '{"bogus":'],
      ["Connect, gzip that is not", "/svc.api.user.v1.Users/Create", { ...json, "content-encoding": "gzip" }, "not gzip"],
      ["Connect proto, not protobuf", "/svc.api.user.v1.Users/Create", { "content-type": "application/proto" }, Buffer.from([0xff, 0xff, 0xff])],
    ] as const) {
      const anonymous = await post(path, headers, body);
      expect({ what, status: anonymous.status, body: await anonymous.json() }).toEqual({ what, status: 401, body: missing });
      const withToken = await post(path, { ...headers, ...server.headers }, body);
      expect({ what, status: withToken.status }).toEqual({ what, status: 400 });
    }
    const client = new grpc.Client(`${server.address.address}:${server.address.port}`, grpc.credentials.createInsecure());
    try {
      const call = (metadata: grpc.Metadata) =>
        new Promise<grpc.ServiceError | null>((resolve) => {
          client.makeUnaryRequest("/svc.api.user.v1.Users/Create", (b: Buffer) => b, (b: Buffer) => b, Buffer.from([0xff, 0xff, 0xff]), metadata, {}, (err) => resolve(err));
        });
      expect((await call(new grpc.Metadata()))?.code).toBe(grpc.status.UNAUTHENTICATED);
      const authorized = new grpc.Metadata();
      authorized.set("authorization", server.headers.authorization ?? "");
      expect((await call(authorized))?.code).toBe(grpc.status.INTERNAL); // connect-es's code for a message that does not parse
    } finally {
      client.close();
    }
  });

  it("answers 401 to two Authorization headers, a valid one first or last, over REST and Connect (Node kept the first: a valid token then any other was served)", async () => {
    const valid = server.headers.authorization ?? "";
    const port = new URL(server.url).port;
    for (const [first, second] of [[valid, "Bearer garbage"], ["Bearer garbage", valid], [valid, valid]]) {
      for (const request of [
        `GET /api/v1/apps HTTP/1.1\r\nHost: x\r\nAuthorization: ${first}\r\nAuthorization: ${second}\r\nConnection: close\r\n\r\n`,
        `POST /svc.api.app.v1.Apps/List HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\nAuthorization: ${first}\r\nauthorization: ${second}\r\nConnection: close\r\n\r\n{}`,
      ]) {
        const answer = await rawRequest(Number(port), [request]);
        expect({ status: answer?.status, body: JSON.parse(answer?.body.toString() ?? "") }).toEqual({
          status: 401,
          body: { code: "unauthenticated", message: "Authorization must be given once, as Bearer <access token>" },
        });
      }
    }
    const once = await rawRequest(Number(port), [`GET /api/v1/apps HTTP/1.1\r\nHost: x\r\nAuthorization: ${valid}\r\nConnection: close\r\n\r\n`]);
    expect(once?.status).toBe(200);
  });

  it("answers 401 on every RPC once the token has expired", async () => {
    const token = await server.tokenFor(Role.SUPER_ADMIN);
    expect((await connectCall(server, "svc.api.app.v1.Apps/List", bearer(token))).status).toBe(200);
    clock.advance(3600_000 + 1000);
    try {
      for (const m of rpcs()) {
        const answer = await connectCall(server, procedureOf(m), bearer(token));
        expect({ procedure: procedureOf(m), status: answer.status, message: answer.body.message }).toEqual({
          procedure: procedureOf(m),
          status: 401,
          message: "token has expired",
        });
      }
    } finally {
      clock.advance(-(3600_000 + 1000));
    }
  });
});

describe("roles", () => {
  it("answers 403 permission_denied to a READ_ONLY caller on every write RPC", async () => {
    const token = await server.tokenFor(Role.READ_ONLY);
    const writes = rpcs().filter((m) => !isRead(m));
    expect(writes.length).toBeGreaterThanOrEqual(10);
    for (const m of writes) {
      const answer = await connectCall(server, procedureOf(m), bearer(token));
      expect({ procedure: procedureOf(m), status: answer.status, code: answer.body.code }).toEqual({
        procedure: procedureOf(m),
        status: 403,
        code: "permission_denied",
      });
    }
  });

  it("lets a READ_ONLY caller past authorization on every RPC declared READ_ONLY", async () => {
    const token = await server.tokenFor(Role.READ_ONLY);
    const reads = rpcs().filter((m) => getOption(m, required_role) === Role.READ_ONLY);
    expect(reads.length).toBeGreaterThanOrEqual(8);
    for (const m of reads) {
      expect(isRead(m)).toBe(true);
      const answer = await connectCall(server, procedureOf(m), bearer(token));
      expect([401, 403]).not.toContain(answer.status);
    }
  });

  it("answers 403 to an ADMIN caller on every SUPER_ADMIN RPC, Clients included", async () => {
    const token = await server.tokenFor(Role.ADMIN);
    const superOnly = rpcs().filter((m) => getOption(m, required_role) === Role.SUPER_ADMIN);
    expect(superOnly.map(procedureOf)).toEqual(expect.arrayContaining(["svc.api.iam.v1.Clients/Create", "svc.api.iam.v1.Clients/List"]));
    for (const m of superOnly) {
      const answer = await connectCall(server, procedureOf(m), bearer(token));
      expect({ procedure: procedureOf(m), status: answer.status }).toEqual({ procedure: procedureOf(m), status: 403 });
    }
  });

  it("answers 403 to a caller whose user holds no role", async () => {
    const token = await server.tokenFor();
    const answer = await connectCall(server, "svc.api.app.v1.Apps/List", bearer(token));
    expect(answer.status).toBe(403);
    expect(answer.body.message).toBe("svc.api.app.v1.Apps.List requires role READ_ONLY; the caller has no role");
  });

  it("stops accepting a deleted client's token at once", async () => {
    const token = await server.tokenFor(Role.ADMIN);
    const clientId = decodeJwt(token).sub ?? "";
    expect((await server.call("GET", "/api/v1/apps", undefined, bearer(token))).status).toBe(200);
    const deleted = await server.call("DELETE", `/api/v1/iam/clients/${clientId}`);
    expect(deleted.status).toBe(200);
    expect(await deleted.json()).toEqual({});
    const after = await server.call("GET", "/api/v1/apps", undefined, bearer(token));
    expect(after.status).toBe(401);
    expect(await after.json()).toEqual({ code: "unauthenticated", message: "the client of this token no longer exists" });
  });

  it("applies a change of the user's roles to tokens already issued", async () => {
    const token = await server.tokenFor(Role.READ_ONLY);
    const userId = (await (await server.call("GET", `/api/v1/iam/clients?page_size=100`)).json()) as {
      list: { id: string; userId: string }[];
    };
    const mine = userId.list.find((c) => c.id === decodeJwt(token).sub);
    expect((await server.call("POST", "/api/v1/apps", { displayName: "x" }, bearer(token))).status).toBe(403);
    const updated = await server.call("POST", `/api/v1/users/${mine?.userId ?? ""}`, { user: { roles: ["ADMIN"] } });
    expect(updated.status).toBe(200);
    expect((await server.call("POST", "/api/v1/apps", { displayName: "x" }, bearer(token))).status).toBe(200);
  });
});

describe("an RPC that declares no required role", () => {
  it("is refused with permission_denied, even to a Super Admin (fail closed)", async () => {
    const store = Store.open(":memory:");
    try {
      const tokens = await AccessTokens.load(store, { baseUrl: "http://accessd.test", ttlMs: 3_600_000, clock, cipher: new SecretCipher(randomBytes(32)) });
      const client = { id: "c1", createdAt: clock.now() };
      const { accessToken } = await tokens.issue(client);
      const interceptor = authorizationInterceptor({
        tokens,
        principalOf: () => ({ userId: "u1", roles: [Role.SUPER_ADMIN], clientCreatedAt: client.createdAt }),
        requiredRoles: new RequiredRoles(), // no method registered: none declares a role
      });
      let reached = false;
      const transport = createRouterTransport(
        ({ service }) =>
          service(Apps, {
            list: () => {
              reached = true;
              return { list: [], nextPageToken: "" };
            },
          }),
        { router: { interceptors: [interceptor] } },
      );
      const call = createClient(Apps, transport).list({}, { headers: bearer(accessToken) });
      await expect(call).rejects.toMatchObject({ code: Code.PermissionDenied, rawMessage: "svc.api.app.v1.Apps.List declares no required role and is refused" });
      expect(reached).toBe(false);
    } finally {
      store.close();
    }
  });
});
