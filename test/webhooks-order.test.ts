import { createPublicKey, generateKeyPairSync } from "node:crypto";
import { exportJWK } from "jose";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Role } from "../gen/svc/api/iam/v1/role_pb.js";
import { defaultJwksCacheOptions, JwksCache } from "../src/webhooks/jwks-cache.js";
import { verifyWebhookJwt } from "../src/webhooks/jwt-verification.js";
import { signJwtWebhook } from "../src/webhooks/index.js";
import { rawRequest } from "./support/raw-http.js";
import { startTestServer, type TestServer } from "./support/test-server.js";
import {
  createWebhookAutomation,
  hmacHeaders,
  postWebhook,
  startLoopbackServer,
  type LoopbackServer,
  type WebhookAutomation,
} from "./support/webhook-fixtures.js";
import { eventRecordsOf } from "./support/store-fixtures.js";

const nowSeconds = () => Math.floor(Date.now() / 1000);

/** A JSON body of exactly `n` bytes. */
const sized = (n: number) => `{"pad":"${"x".repeat(n - 10)}"}`;

/** Headers signed with a secret the listener does not have. */
const badlySigned = (hook: WebhookAutomation, body: string | Buffer, options: { timestamp?: number } = {}) =>
  hmacHeaders(hook, body, { ...options, secret: "B".repeat(43) });

async function deliveries(server: TestServer, automationId: string): Promise<{ status: number; reason: string }[]> {
  const res = await server.call("GET", `/api/v1/automations/${automationId}/webhook/deliveries?page_size=100`);
  expect(res.status).toBe(200);
  const { list } = (await res.json()) as { list: { status: number; reason: string }[] };
  return list.map(({ status, reason }) => ({ status, reason }));
}

async function executionCount(server: TestServer, automationId: string): Promise<number> {
  const res = await server.call("GET", `/api/v1/automation_executions?automation_id=${automationId}&page_size=100`);
  expect(res.status).toBe(200);
  return ((await res.json()) as { list: unknown[] }).list.length;
}

describe("inbound webhooks: the order of the checks", () => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServer();
  });
  afterAll(() => server.close());

  it("answers 404 automation_unpublished to a valid request when the trigger is enabled but the automation was unpublished, and records nothing", async () => {
    const hook = await createWebhookAutomation(server, { authMethod: "HMAC" });
    expect((await server.call("POST", `/api/v1/automations/${hook.id}/unpublish`, {})).status).toBe(200);
    const state = (await (await server.call("GET", `/api/v1/automations/${hook.id}`)).json()) as {
      automation: { published?: boolean; triggerEnabled?: boolean };
    };
    expect(state.automation).toMatchObject({ triggerEnabled: true });
    expect(state.automation.published).toBeUndefined();

    const body = '{"user":"u-1"}';
    const answer = await postWebhook(hook.postUrl, hmacHeaders(hook, body), body);
    expect(answer).toEqual({ status: 404, body: { code: "not_found", message: "the automation behind this listener is not published" } });
    expect(eventRecordsOf(server.store, hook.listenerId)).toBe(0);
    expect(await executionCount(server, hook.id)).toBe(0);
    expect(await deliveries(server, hook.id)).toEqual([{ status: 404, reason: "automation_unpublished" }]);
  });

  it("checks the source IP before the headers and the signature (403)", async () => {
    const hook = await createWebhookAutomation(server, { authMethod: "HMAC", ipRestrictionEnabled: true, allowedCidrs: ["10.0.0.0/8"] });
    const body = "{}";
    const refused = await postWebhook(hook.postUrl, badlySigned(hook, body), body);
    expect(refused).toEqual({
      status: 403,
      body: { code: "permission_denied", message: "source address 127.0.0.1 is not in the listener's allowed CIDRs" },
    });
    const { "Webhook-Event-Id": _, ...noEventId } = badlySigned(hook, body);
    expect((await postWebhook(hook.postUrl, noEventId, body)).status).toBe(403);
    expect(await deliveries(server, hook.id)).toEqual([
      { status: 403, reason: "source_ip_not_allowed" },
      { status: 403, reason: "source_ip_not_allowed" },
    ]);
  });

  it("checks the timestamp before the body size (400), and the body size before the signature (413)", async () => {
    const hook = await createWebhookAutomation(server, { authMethod: "HMAC" });
    const over = sized(65_537);
    const stale = await postWebhook(hook.postUrl, badlySigned(hook, over, { timestamp: nowSeconds() - 1000 }), over);
    expect(stale.status).toBe(400);
    expect(stale.body.code).toBe("invalid_argument");
    const tooLarge = await postWebhook(hook.postUrl, badlySigned(hook, over), over);
    expect(tooLarge).toEqual({ status: 413, body: { code: "resource_exhausted", message: "the body is larger than 65536 bytes" } });
    expect(await deliveries(server, hook.id)).toEqual([
      { status: 413, reason: "body_too_large" },
      { status: 400, reason: "timestamp_out_of_window" },
    ]);
  });

  it("checks the signature before parsing JSON (401), and JSON before whether the automation is live (400)", async () => {
    const live = await createWebhookAutomation(server, { authMethod: "HMAC" });
    const notJson = '{"unterminated": ';
    const unsigned = await postWebhook(live.postUrl, badlySigned(live, notJson), notJson);
    expect(unsigned).toEqual({ status: 401, body: { code: "unauthenticated", message: "Webhook-Signature does not match the request" } });

    const dormant = await createWebhookAutomation(server, { authMethod: "HMAC" }, { active: false });
    const signedNotJson = await postWebhook(dormant.postUrl, hmacHeaders(dormant, notJson), notJson);
    expect(signedNotJson).toEqual({ status: 400, body: { code: "invalid_argument", message: "the body is not valid JSON" } });
    expect(await deliveries(server, live.id)).toEqual([{ status: 401, reason: "signature_mismatch" }]);
    expect(await deliveries(server, dormant.id)).toEqual([{ status: 400, reason: "body_not_json" }]);
  });

  it("checks the signature before whether the automation is published (401, not 404)", async () => {
    const hook = await createWebhookAutomation(server, { authMethod: "HMAC" }, { active: false });
    const body = "{}";
    const refused = await postWebhook(hook.postUrl, badlySigned(hook, body), body);
    expect(refused).toEqual({ status: 401, body: { code: "unauthenticated", message: "Webhook-Signature does not match the request" } });
    // Published, the trigger enabled, then unpublished: still the signature first.
    await publishEnableThenUnpublish(hook);
    expect((await postWebhook(hook.postUrl, badlySigned(hook, body), body)).status).toBe(401);
    expect(await deliveries(server, hook.id)).toEqual([
      { status: 401, reason: "signature_mismatch" },
      { status: 401, reason: "signature_mismatch" },
    ]);
  });

  async function publishEnableThenUnpublish(hook: WebhookAutomation): Promise<void> {
    for (const [path, json] of [
      [`/api/v1/automations/${hook.id}/publish`, {}],
      [`/api/v1/automations/${hook.id}/trigger`, { enabled: true }],
      [`/api/v1/automations/${hook.id}/unpublish`, {}],
    ] as const) {
      expect((await server.call("POST", path, json)).status, path).toBe(200);
    }
  }

  it("checks whether the automation is live before the event id is a duplicate (404, not 409)", async () => {
    const hook = await createWebhookAutomation(server, { authMethod: "HMAC" });
    const body = "{}";
    const headers = hmacHeaders(hook, body);
    expect((await postWebhook(hook.postUrl, headers, body)).status).toBe(200);
    expect((await server.call("POST", `/api/v1/automations/${hook.id}/unpublish`, {})).status).toBe(200);
    expect((await postWebhook(hook.postUrl, headers, body)).status).toBe(404);
    expect((await deliveries(server, hook.id)).map((d) => d.reason)).toEqual(["automation_unpublished", "accepted"]);
  });

  it("answers 413 to a chunked body over 65,536 bytes without Content-Length, and keeps serving", async () => {
    const hook = await createWebhookAutomation(server, { authMethod: "HMAC" });
    const chunked = (body: string) => {
      const { "Content-Type": contentType, ...signed } = hmacHeaders(hook, body);
      const head =
        `POST /api/v1/webhooks/incoming/${hook.listenerId} HTTP/1.1\r\nHost: 127.0.0.1\r\n` +
        `Content-Type: ${contentType}\r\nTransfer-Encoding: chunked\r\n` +
        Object.entries(signed)
          .map(([name, value]) => `${name}: ${value}\r\n`)
          .join("") +
        "\r\n";
      const bytes = Buffer.from(body);
      const parts: (string | Buffer)[] = [head];
      for (let at = 0; at < bytes.length; at += 16_384) {
        const piece = bytes.subarray(at, at + 16_384);
        parts.push(Buffer.concat([Buffer.from(`${piece.length.toString(16)}\r\n`), piece, Buffer.from("\r\n")]));
      }
      parts.push("0\r\n\r\n");
      return rawRequest(server.address.port, parts, { gapMs: 5 });
    };

    // Signed correctly: only the size can refuse it.
    const over = await chunked(sized(80_000));
    expect(over?.status).toBe(413);
    expect(over?.headers["content-type"]).toMatch(/^application\/json/);
    expect(JSON.parse(over?.body.toString() ?? "")).toEqual({ code: "resource_exhausted", message: "the body is larger than 65536 bytes" });

    // The same framing at the limit is read and accepted: the 413 above is the size, not chunking.
    const atLimit = await chunked(sized(65_536));
    expect(atLimit?.status).toBe(200);
    const body = '{"after":true}';
    expect((await postWebhook(hook.postUrl, hmacHeaders(hook, body), body)).status).toBe(200);
    expect((await deliveries(server, hook.id)).map((d) => [d.status, d.reason])).toEqual([
      [200, "accepted"],
      [200, "accepted"],
      [413, "body_too_large"],
    ]);
  });

  it("answers 403 to ListWebhookDeliveries for an ADMIN (Super Admin only)", async () => {
    const hook = await createWebhookAutomation(server, { authMethod: "HMAC" });
    const body = '{"n":1}';
    expect((await postWebhook(hook.postUrl, hmacHeaders(hook, body), body)).status).toBe(200);
    const admin = await server.tokenFor(Role.ADMIN);
    const res = await fetch(`${server.url}/api/v1/automations/${hook.id}/webhook/deliveries`, { headers: { authorization: `Bearer ${admin}` } });
    expect(res.status).toBe(403);
    expect(await res.json()).toEqual({
      code: "permission_denied",
      message: "svc.api.automations.v1.Automations.ListWebhookDeliveries requires role SUPER_ADMIN; the caller has ADMIN",
    });
  });
});

describe("inbound webhooks: a JWKS that misbehaves", () => {
  let server: TestServer;
  let keys: LoopbackServer;
  const privateKey = generateKeyPairSync("ed25519").privateKey;

  beforeAll(async () => {
    const jwk = { ...(await exportJWK(createPublicKey(privateKey))), kid: "ed1", alg: "EdDSA", use: "sig" };
    const document = JSON.stringify({ keys: [jwk] });
    // The same valid key set, padded past the cap with a member JWKS readers ignore.
    const padded = JSON.stringify({ keys: [jwk], padding: "x".repeat(defaultJwksCacheOptions.maxBytes) });
    expect(defaultJwksCacheOptions.maxBytes).toBe(64 * 1024);
    keys = await startLoopbackServer((req, res) => {
      switch (req.url) {
        case "/good":
          return res.writeHead(200, { "content-type": "application/json" }).end(document);
        case "/500":
          return res.writeHead(500, { "content-type": "application/json" }).end(document);
        case "/html":
          return res.writeHead(200, { "content-type": "text/html" }).end("<html><body>keys moved</body></html>");
        case "/big":
          return res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(padded) }).end(padded);
        case "/big-chunked": {
          res.writeHead(200, { "content-type": "application/json" }); // no Content-Length: chunked
          for (let at = 0; at < padded.length; at += 8_192) res.write(padded.slice(at, at + 8_192));
          return res.end();
        }
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

  const send = async (path: string) => {
    const hook = await createWebhookAutomation(server, { authMethod: "JWT", jwksUrl: `${keys.url}${path}` });
    const body = '{"user":"u-7"}';
    const headers = await signJwtWebhook({ url: hook.endpointUrl, body: Buffer.from(body) }, { privateKey, kid: "ed1" });
    const started = Date.now();
    const answer = await postWebhook(hook.postUrl, { ...headers }, body);
    return { answer, ms: Date.now() - started, hook };
  };

  it("accepts the JWT when the JWKS is served properly, and the padded document is a valid key set below a larger cap", async () => {
    expect((await send("/good")).answer.status).toBe(200);
    // Control for the size cases below: only the cap refuses /big and /big-chunked.
    const body = Buffer.from("{}");
    const endpointUrl = `${server.config.baseUrl}/api/v1/webhooks/incoming/control`;
    const headers = await signJwtWebhook({ url: endpointUrl, body }, { privateKey, kid: "ed1" });
    for (const path of ["/big", "/big-chunked"]) {
      const verdict = await verifyWebhookJwt(new JwksCache({ maxBytes: 1 << 20, allowHttp: true }), {
        authorization: headers.Authorization,
        jwksUrl: `${keys.url}${path}`,
        baseUrl: server.config.baseUrl,
        endpointUrl,
        eventId: headers["Webhook-Event-Id"],
        body,
        nowMs: Date.now(),
      });
      expect(verdict, path).toBeUndefined();
    }
  });

  it("answers a prompt 401, never a 500, when the JWKS answers 500, is not JSON, or is larger than the cap; the delivery log names which", async () => {
    // The sender hears only that the JWKS could not be used (the detail is the operator's: an
    // internal URL's status is not the sender's to learn).
    const message = "the listener's JWKS could not be used to verify the JWT";
    const cases = [
      { path: "/500", reason: "jwks_http_status", message },
      { path: "/html", reason: "jwks_invalid", message },
      { path: "/big", reason: "jwks_too_large", message },
      { path: "/big-chunked", reason: "jwks_too_large", message },
    ];
    for (const { path, reason, message } of cases) {
      const { answer, ms, hook } = await send(path);
      expect({ path, ...answer }).toEqual({ path, status: 401, body: { code: "unauthenticated", message } });
      expect(ms, path).toBeLessThan(4_000);
      expect(await executionCount(server, hook.id), path).toBe(0);
      expect(await deliveries(server, hook.id), path).toEqual([{ status: 401, reason }]);
    }
  });
});
