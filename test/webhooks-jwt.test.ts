import { createHash, createPublicKey, createSign, generateKeyPairSync, randomUUID, type KeyObject } from "node:crypto";
import { join } from "node:path";
import { PassThrough } from "node:stream";
import { exportJWK, SignJWT, UnsecuredJWT } from "jose";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ManualClock } from "../src/clock.js";
import { createLogger } from "../src/logger.js";
import { JwksCache } from "../src/webhooks/jwks-cache.js";
import { jwksUnusableMessage, verifyWebhookJwt } from "../src/webhooks/jwt-verification.js";
import { signJwtWebhook } from "../src/webhooks/index.js";
import { rawRequest } from "./support/raw-http.js";
import { scratch } from "./support/scratch.js";
import { startTestServer, type TestServer } from "./support/test-server.js";
import {
  createWebhookAutomation,
  postWebhook,
  startJwtListener,
  startLoopbackServer,
  unreachableUrl,
  type JwksServer,
  type JwtListener,
  type LoopbackServer,
  type WebhookAutomation,
} from "./support/webhook-fixtures.js";

const body = '{"user":"u-7"}';
const nowSeconds = () => Math.floor(Date.now() / 1000);


const files = scratch("accessd-jwks-");
describe("inbound webhooks: JWT listeners", () => {
  let server: TestServer;
  let jwks: JwksServer;
  let hook: WebhookAutomation;

  let listener: JwtListener;

  beforeAll(async () => {
    listener = await startJwtListener();
    ({ server, jwks, hook } = listener);
  });
  afterAll(() => listener.close());

  type Claims = Record<string, unknown>;

  /** Headers with a JWT whose claims are the valid ones, changed by `edit` (undefined deletes). */
  async function jwtHeaders(
    edit: Claims = {},
    { key = jwks.keys.eddsa, kid = "ed1", alg = "EdDSA" }: { key?: KeyObject; kid?: string; alg?: string } = {},
  ): Promise<Record<string, string>> {
    const eventId = randomUUID();
    const timestamp = nowSeconds();
    const claims: Claims = {
      sub: server.config.baseUrl,
      aud: hook.endpointUrl,
      exp: timestamp + 300,
      jti: eventId,
      htm: "POST",
      htb_s256: createHash("sha256").update(body).digest("base64url"),
      ...edit,
    };
    for (const [name, value] of Object.entries(claims)) if (value === undefined) delete claims[name];
    const jwt = await new SignJWT(claims).setProtectedHeader({ alg, kid }).sign(key);
    return {
      "Content-Type": "application/json",
      "Webhook-Timestamp": String(timestamp),
      "Webhook-Event-Id": eventId,
      Authorization: `Bearer ${jwt}`,
    };
  }

  const send = (headers: Record<string, string>, target = hook) => postWebhook(target.postUrl, headers, body);

  it("accepts RS256, ES256 and EdDSA tokens", async () => {
    for (const [key, kid, alg] of [
      [jwks.keys.rs256, "rs1", "RS256"],
      [jwks.keys.es256, "es1", "ES256"],
      [jwks.keys.eddsa, "ed1", "EdDSA"],
    ] as const) {
      const answer = await send(await jwtHeaders({}, { key, kid, alg }));
      expect(answer.status, alg).toBe(200);
    }
  });

  it("accepts what `accessd webhook sign --key --kid` produces", async () => {
    const headers = await signJwtWebhook({ url: hook.endpointUrl, body: Buffer.from(body) }, { privateKey: jwks.keys.es256, kid: "es1" });
    expect((await send({ ...headers })).status).toBe(200);
  });

  it("answers 401 to alg none, HS256 and an unknown kid", async () => {
    const claims = { sub: server.config.baseUrl, aud: hook.endpointUrl, jti: randomUUID(), htm: "POST" };
    const none = new UnsecuredJWT(claims).setExpirationTime("5m").encode();
    const valid = await jwtHeaders();
    const hs256 = await new SignJWT(claims)
      .setProtectedHeader({ alg: "HS256", kid: "ed1" })
      .setExpirationTime("5m")
      .sign(new TextEncoder().encode("a shared secret that is long enough!!"));
    for (const token of [none, hs256]) {
      const answer = await send({ ...valid, Authorization: `Bearer ${token}` });
      expect(answer).toEqual({ status: 401, body: { code: "unauthenticated", message: "JWT alg must be one of RS256, ES256, EdDSA" } });
    }
    const unknownKid = await send(await jwtHeaders({}, { kid: "nobody" }));
    expect(unknownKid).toEqual({
      status: 401,
      body: { code: "unauthenticated", message: "no key in the listener's JWKS matches the JWT kid and alg" },
    });
    // A key that is not in the JWKS, claiming the kid of one that is.
    const stranger = generateKeyPairSync("ed25519").privateKey;
    expect((await send(await jwtHeaders({}, { key: stranger, kid: "ed1" }))).body).toEqual({
      code: "unauthenticated",
      message: "the JWT signature does not verify",
    });
  });

  it("answers 401 to an ES256 signature in DER, saying the signature must be r || s (what openssl dgst -sign writes)", async () => {
    const valid = await jwtHeaders({}, { key: jwks.keys.es256, kid: "es1", alg: "ES256" });
    const jwt = valid.Authorization!.slice("Bearer ".length);
    const signingInput = jwt.slice(0, jwt.lastIndexOf("."));
    const der = createSign("sha256").update(signingInput).sign(jwks.keys.es256); // DER by default
    const answer = await send({ ...valid, Authorization: `Bearer ${signingInput}.${der.toString("base64url")}` });
    expect(answer).toEqual({
      status: 401,
      body: {
        code: "unauthenticated",
        message: `the JWT signature does not verify: an ES256 signature is the 64 bytes r || s (RFC 7518 3.4), and this one is ${der.length} bytes of DER`,
      },
    });
  });

  it.each([["Basic dXNlcjpwYXNz"], ["Bearer eyJh%3D%3D"], ["Bearer"]])("answers 401 naming the form of an Authorization that is no Bearer JWT (%s read as missing)", async (authorization) => {
    const valid = await jwtHeaders();
    expect(await send({ ...valid, Authorization: authorization })).toEqual({
      status: 401,
      body: { code: "unauthenticated", message: "Authorization must be Bearer <JWT>, the JWT in compact form (base64url parts joined by dots)" },
    });
  });

  it("takes an nbf up to 5 minutes ahead, as the Webhook-Timestamp window takes the sender's clock (one a second ahead was refused)", async () => {
    expect((await send(await jwtHeaders({ nbf: nowSeconds() + 1 }))).status).toBe(200);
    expect((await send(await jwtHeaders({ nbf: nowSeconds() + 290 }))).status).toBe(200);
    // ... and holds exp to the clock all the same: jose's one leeway would take an exp 5 minutes past.
    expect((await send(await jwtHeaders({ exp: nowSeconds() - 1 }))).body).toEqual({ code: "unauthenticated", message: "the JWT has expired" });
    // An nbf at or after its exp is valid at no time (the leeway took one; review).
    expect((await send(await jwtHeaders({ nbf: nowSeconds() + 200, exp: nowSeconds() + 100 }))).body).toEqual({
      code: "unauthenticated",
      message: "JWT nbf is not before its exp: the JWT is valid at no time",
    });
  });

  it("says why a time claim is refused: nbf ahead is not valid yet, a time that is no number must be one ('has the wrong value' before)", async () => {
    const notYet = await send(await jwtHeaders({ nbf: nowSeconds() + 310 }));
    expect(notYet.body).toEqual({ code: "unauthenticated", message: "JWT claim nbf is in the future: the JWT is not valid yet" });
    const text = await send(await jwtHeaders({ exp: String(nowSeconds() + 100) }));
    expect(text.body).toEqual({ code: "unauthenticated", message: "JWT claim exp must be a number (seconds since the epoch)" });
  });

  it("answers 401 to a JWT part with padding, + or /, or a last character with unused bits set (base64url as the bytes encode only: jose read each as the valid signature)", async () => {
    const valid = await jwtHeaders({}, { key: jwks.keys.rs256, kid: "rs1", alg: "RS256" });
    expect((await send(valid)).status).toBe(200);
    const malformed = { status: 401, body: { code: "unauthenticated", message: "the JWT's parts must be base64url without padding (no +, / or =), each as its bytes encode" } };
    const again = await jwtHeaders({}, { key: jwks.keys.rs256, kid: "rs1", alg: "RS256" });
    expect(await send({ ...again, Authorization: `${again.Authorization}==` })).toEqual(malformed);
    // An RS256 signature is 256 bytes: its 342nd character carries 2 bits and 4 unused ones.
    const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    const third = await jwtHeaders({}, { key: jwks.keys.rs256, kid: "rs1", alg: "RS256" });
    const authorization = third.Authorization ?? "";
    const otherBits = `${authorization.slice(0, -1)}${alphabet[alphabet.indexOf(authorization.slice(-1)) ^ 1] ?? ""}`;
    expect(await send({ ...third, Authorization: otherBits })).toEqual(malformed);
  });

  it("answers 401 to a token with critical header extensions, naming the token and not the JWKS", async () => {
    const valid = await jwtHeaders();
    const claims = { sub: server.config.baseUrl, aud: hook.endpointUrl, jti: valid["Webhook-Event-Id"], htm: "POST" };
    const token = await new SignJWT(claims)
      .setProtectedHeader({ alg: "EdDSA", kid: "ed1", crit: ["urn:example:ext"], "urn:example:ext": true })
      .setExpirationTime("5m")
      .sign(jwks.keys.eddsa, { crit: { "urn:example:ext": true } });
    expect(await send({ ...valid, Authorization: `Bearer ${token}` })).toEqual({
      status: 401,
      body: { code: "unauthenticated", message: "the JWT header names critical extensions (crit); none is supported" },
    });
  });

  it("answers 401 when any of the six claims is missing or wrong", async () => {
    const cases: [string, Claims][] = [
      ["sub missing", { sub: undefined }],
      ["sub wrong", { sub: "https://evil.example" }],
      ["aud missing", { aud: undefined }],
      ["aud wrong", { aud: `${server.config.baseUrl}/api/v1/webhooks/incoming/other` }],
      ["exp missing", { exp: undefined }],
      ["jti missing", { jti: undefined }],
      ["jti wrong", { jti: randomUUID() }],
      ["htm missing", { htm: undefined }],
      ["htm wrong", { htm: "GET" }],
      ["htb_s256 missing", { htb_s256: undefined }],
      ["htb_s256 wrong", { htb_s256: createHash("sha256").update("{}").digest("base64url") }],
    ];
    for (const [name, edit] of cases) {
      const answer = await send(await jwtHeaders(edit));
      expect(answer.status, name).toBe(401);
      expect(answer.body.code, name).toBe("unauthenticated");
      const claim = name.split(" ")[0] ?? "";
      expect(answer.body.message, name).toContain(claim);
    }
  });

  it("answers 401 to an exp in the past or 11 minutes ahead, 200 to 9 minutes ahead", async () => {
    expect((await send(await jwtHeaders({ exp: nowSeconds() - 5 }))).body).toEqual({ code: "unauthenticated", message: "the JWT has expired" });
    expect((await send(await jwtHeaders({ exp: nowSeconds() + 11 * 60 }))).body).toEqual({
      code: "unauthenticated",
      message: "JWT exp must be at most 600 s after the current time",
    });
    expect((await send(await jwtHeaders({ exp: nowSeconds() + 9 * 60 }))).status).toBe(200);
  });

  it("answers 401 without an Authorization header", async () => {
    const { Authorization: _, ...headers } = await jwtHeaders();
    expect(await send(headers)).toEqual({
      status: 401,
      body: { code: "unauthenticated", message: "Authorization: Bearer <JWT> is required for this listener" },
    });
  });

  it("answers 401 to two Authorization headers, a valid token first or last (Node kept the first: valid then junk was accepted)", async () => {
    const url = new URL(hook.postUrl);
    for (const order of ["valid first", "valid last"] as const) {
      const { Authorization: valid, ...headers } = await jwtHeaders();
      const authorizations = order === "valid first" ? [valid, "Bearer junk"] : ["Bearer junk", valid];
      const lines = [...Object.entries(headers).map(([name, value]) => `${name}: ${value}`), ...authorizations.map((a) => `Authorization: ${a}`)];
      const request = `POST ${url.pathname} HTTP/1.1\r\nHost: ${url.host}\r\n${lines.join("\r\n")}\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`;
      const answer = await rawRequest(Number(url.port), [request]);
      expect({ order, status: answer?.status, body: JSON.parse(answer?.body.toString() ?? "") }).toEqual({
        order,
        status: 401,
        body: { code: "unauthenticated", message: "Authorization must be given once, as Bearer <JWT>" },
      });
    }
  });

  it("answers 401 within a bounded time when the JWKS server is down or hangs", async () => {
    for (const url of [await unreachableUrl(), jwks.hangingUrl]) {
      const target = await createWebhookAutomation(server, { authMethod: "JWT", jwksUrl: url });
      const headers = await jwtHeaders({ aud: target.endpointUrl });
      const started = Date.now();
      const answer = await send(headers, target);
      expect(answer.status, url).toBe(401);
      expect(answer.body.code).toBe("unauthenticated");
      expect(Date.now() - started, url).toBeLessThan(4_000);
    }
  });

  it("requires an https JWKS URL unless ACCESSD_JWKS_ALLOW_HTTP and a loopback host", async () => {
    const create = (srv: TestServer, jwksUrl: string) =>
      srv.call("POST", "/api/v1/automations", {
        displayName: "jwks",
        trigger: { webhook: { authMethod: "JWT", jwksUrl } },
        steps: [{ name: "echo", log: { messageCel: "ctx.trigger" } }],
      });
    expect((await create(server, "http://example.com/jwks.json")).status).toBe(400);
    expect((await create(server, "https://keys.example.com/jwks.json")).status).toBe(200);
    const strict = await startTestServer();
    try {
      const res = await create(strict, jwks.url);
      expect(res.status).toBe(400);
      expect(await res.json()).toEqual({ code: "invalid_argument", message: "trigger.webhook.jwksUrl must be an https URL" });
    } finally {
      await strict.close();
    }
  });
});

describe("inbound webhooks: a JWKS that fails", () => {
  const privateKey = generateKeyPairSync("ed25519").privateKey;
  let server: TestServer;
  let keys: LoopbackServer;
  /** Requests the JWKS host received, per path. */
  const fetched = new Map<string, number>();
  /** Whether /recovering serves the key set yet. */
  let recovered = false;
  /** Whether /stepped serves the key set yet. */
  let steppedUp = false;

  /** An RSA key jose will not use (under 2,048 bits), published under the kid the tests sign with. */
  const weakRsa = generateKeyPairSync("rsa", { modulusLength: 1024 });

  beforeAll(async () => {
    const jwk = { ...(await exportJWK(createPublicKey(privateKey))), kid: "ed1", alg: "EdDSA", use: "sig" };
    const document = JSON.stringify({ keys: [jwk] });
    const weakDocument = JSON.stringify({ keys: [{ ...(await exportJWK(weakRsa.publicKey)), kid: "r1k", alg: "RS256", use: "sig" }] });
    keys = await startLoopbackServer((req, res) => {
      const path = req.url ?? "";
      fetched.set(path, (fetched.get(path) ?? 0) + 1);
      switch (path) {
        case "/500":
          return res.writeHead(500, { "content-type": "application/json" }).end("{}");
        case "/html":
          return res.writeHead(200, { "content-type": "text/html" }).end("<html>moved</html>");
        case "/not-a-key-set":
          return res.writeHead(200, { "content-type": "application/json" }).end('{"keys":"none"}');
        case "/rsa1024":
          return res.writeHead(200, { "content-type": "application/json" }).end(weakDocument);
        case "/bad-ed25519": // an Ed25519 key whose x is no key: WebCrypto refuses to import it (DataError)
          return res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ keys: [{ ...jwk, x: "AAAA" }] }));
        case "/recovering":
          if (!recovered) return res.writeHead(503).end();
          return res.writeHead(200, { "content-type": "application/json" }).end(document);
        case "/stepped":
          if (!steppedUp) return res.writeHead(503).end();
          return res.writeHead(200, { "content-type": "application/json" }).end(document);
        default:
          return res.writeHead(404).end();
      }
    });
    server = await startTestServer({ jwksAllowHttp: true });
  });
  afterAll(async () => {
    await server.close();
    await keys.close();
  });

  const signedFor = async (endpointUrl: string) => {
    const body = Buffer.from('{"user":"u-7"}');
    return { body, headers: await signJwtWebhook({ url: endpointUrl, body }, { privateKey, kid: "ed1" }) };
  };

  async function deliveryReasons(automationId: string): Promise<string[]> {
    const res = await server.call("GET", `/api/v1/automations/${automationId}/webhook/deliveries?page_size=100`);
    expect(res.status).toBe(200);
    return ((await res.json()) as { list: { reason: string }[] }).list.map((d) => d.reason);
  }

  it("fetches a failing JWKS once for requests within 5 s, and tells the sender only that the JWKS could not be used", async () => {
    for (const [path, reason] of [
      ["/500", "jwks_http_status"],
      ["/html", "jwks_invalid"],
      ["/not-a-key-set", "jwks_invalid"],
    ] as const) {
      const hook = await createWebhookAutomation(server, { authMethod: "JWT", jwksUrl: `${keys.url}${path}` });
      for (let i = 0; i < 3; i++) {
        const { body, headers } = await signedFor(hook.endpointUrl);
        const answer = await postWebhook(hook.postUrl, { ...headers }, body);
        expect({ path, ...answer }).toEqual({ path, status: 401, body: { code: "unauthenticated", message: jwksUnusableMessage } });
      }
      expect(fetched.get(path), path).toBe(1);
      // The delivery log, for the operator, still names what is wrong.
      expect(await deliveryReasons(hook.id), path).toEqual([reason, reason, reason]);
    }
  });

  it("names a JWKS whose only key is an RSA key under 2,048 bits jwks_invalid, not jwks_unreachable (it was fetched)", async () => {
    const hook = await createWebhookAutomation(server, { authMethod: "JWT", jwksUrl: `${keys.url}/rsa1024` });
    const body = Buffer.from('{"user":"u-7"}');
    // jose will not sign with such a key either: sign with a 2,048-bit one, then sign its header and payload again with node:crypto.
    const strong = generateKeyPairSync("rsa", { modulusLength: 2048 }).privateKey;
    const headers = await signJwtWebhook({ url: hook.endpointUrl, body }, { privateKey: strong, kid: "r1k", alg: "RS256" });
    const [protectedHeader, payload] = (headers.Authorization ?? "").replace(/^Bearer /, "").split(".");
    const signature = createSign("RSA-SHA256").update(`${protectedHeader}.${payload}`).sign(weakRsa.privateKey, "base64url");
    headers.Authorization = `Bearer ${protectedHeader}.${payload}.${signature}`;
    expect(await postWebhook(hook.postUrl, { ...headers }, body)).toEqual({ status: 401, body: { code: "unauthenticated", message: jwksUnusableMessage } });
    expect(await deliveryReasons(hook.id)).toEqual(["jwks_invalid"]);
  });

  it("names a JWKS whose key cannot be imported jwks_invalid, not jwks_unreachable (it answered), and logs why once", async () => {
    const hook = await createWebhookAutomation(server, { authMethod: "JWT", jwksUrl: `${keys.url}/bad-ed25519` });
    for (let i = 0; i < 2; i++) {
      const { body, headers } = await signedFor(hook.endpointUrl);
      expect(await postWebhook(hook.postUrl, { ...headers }, body)).toEqual({ status: 401, body: { code: "unauthenticated", message: jwksUnusableMessage } });
    }
    expect(await deliveryReasons(hook.id)).toEqual(["jwks_invalid", "jwks_invalid"]);
    let logged = "";
    const sink = new PassThrough();
    sink.on("data", (c: Buffer) => (logged += c.toString()));
    const cache = new JwksCache({ allowHttp: true }, { log: createLogger("warn", sink) });
    for (let i = 0; i < 3; i++) {
      const { body, headers } = await signedFor(hook.endpointUrl);
      const input = { authorization: headers.Authorization, jwksUrl: `${keys.url}/bad-ed25519`, baseUrl: server.config.baseUrl, endpointUrl: hook.endpointUrl };
      expect(await verifyWebhookJwt(cache, { ...input, eventId: headers["Webhook-Event-Id"], body, nowMs: Date.now() })).toMatchObject({ reason: "jwks_invalid" });
    }
    const lines = logged.trim().split("\n").map((line) => JSON.parse(line) as { msg: string; jwksUrl: string; err: { message: string } });
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({ msg: "JWKS key cannot be imported: the webhooks it should verify are refused (jwks_invalid)", jwksUrl: `${keys.url}/bad-ed25519` });
  });

  it("stops fetching an http JWKS once ACCESSD_JWKS_ALLOW_HTTP is off: jwks_http_not_allowed (a listener saved while it was on went on being fetched in clear)", async () => {
    const folder = files.tempDir();
    const database = join(folder, "a.db");
    const trial = await startTestServer({ jwksAllowHttp: true, database });
    const hook = await createWebhookAutomation(trial, { authMethod: "JWT", jwksUrl: `${keys.url}/http-then-off` });
    await trial.close();
    const production = await startTestServer({ jwksAllowHttp: false, database });
    try {
      const { body, headers } = await signedFor(hook.endpointUrl);
      const postUrl = hook.postUrl.replace(trial.url, production.url);
      expect(await postWebhook(postUrl, { ...headers }, body)).toEqual({ status: 401, body: { code: "unauthenticated", message: jwksUnusableMessage } });
      const res = await production.call("GET", `/api/v1/automations/${hook.id}/webhook/deliveries`);
      expect(((await res.json()) as { list: { reason: string }[] }).list.map((d) => d.reason)).toEqual(["jwks_http_not_allowed"]);
      expect(fetched.get("/http-then-off")).toBeUndefined();
    } finally {
      await production.close();
    }
  });

  /** A newly signed webhook for listener `name`, verified through `cache` against the JWKS at /<name>. */
  const verifyAgainst = async (cache: JwksCache, name: string) => {
    const endpointUrl = `${server.config.baseUrl}/api/v1/webhooks/incoming/${name}`;
    const { body, headers } = await signedFor(endpointUrl);
    return verifyWebhookJwt(cache, {
      authorization: headers.Authorization,
      jwksUrl: `${keys.url}/${name}`,
      baseUrl: server.config.baseUrl,
      endpointUrl,
      eventId: headers["Webhook-Event-Id"],
      body,
      nowMs: Date.now(),
    });
  };

  it("fetches the JWKS again once the 5 s have passed, logs the failure's detail, and keeps a fetched key set", async () => {
    const clock = new ManualClock(Date.now());
    let logged = "";
    const sink = new PassThrough();
    sink.on("data", (c: Buffer) => (logged += c.toString()));
    const cache = new JwksCache({ allowHttp: true }, { clock, log: createLogger("warn", sink) });
    const verify = () => verifyAgainst(cache, "recovering");
    const refused = { status: 401, reason: "jwks_http_status", message: jwksUnusableMessage };
    expect(await verify()).toMatchObject(refused);
    expect(fetched.get("/recovering")).toBe(1);
    expect(logged).toContain("JWKS fetch failed");
    expect(logged).toContain("the JWKS URL answered HTTP 503");
    recovered = true;
    clock.advance(4_999);
    expect(await verify()).toMatchObject(refused); // still remembered: not fetched
    expect(fetched.get("/recovering")).toBe(1);
    clock.advance(1);
    expect(await verify()).toBeUndefined();
    expect(await verify()).toBeUndefined();
    expect(fetched.get("/recovering")).toBe(2); // the key set fetched is cached as before
  });

  it("does not remember a failure for longer than its 5 s when the clock steps back (it was held for the step's length: 30 min back, never fetched again)", async () => {
    const clock = new ManualClock(Date.now());
    const cache = new JwksCache({ allowHttp: true }, { clock });
    const verify = () => verifyAgainst(cache, "stepped");
    steppedUp = false;
    expect(await verify()).toMatchObject({ status: 401, reason: "jwks_http_status" });
    steppedUp = true;
    clock.advance(-30 * 60_000);
    expect(await verify()).toBeUndefined();
    expect(fetched.get("/stepped")).toBe(2);
  });
});
