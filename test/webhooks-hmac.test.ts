import { randomUUID } from "node:crypto";
import { connect as http2Connect } from "node:http2";
import { gzipSync } from "node:zlib";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Role } from "../gen/svc/api/iam/v1/role_pb.js";
import { ManualClock } from "../src/clock.js";
import { startTestServer, type TestServer } from "./support/test-server.js";
import {
  activate,
  createWebhookAutomation,
  startHmacListener,
  hmacHeaders,
  postWebhook,
  type WebhookAutomation,
} from "./support/webhook-fixtures.js";
import { eventRecordsOf } from "./support/store-fixtures.js";

interface Execution {
  id: string;
  state: string;
  trigger?: unknown;
  eventId?: string;
  steps?: { name: string; state: string; output?: unknown }[];
}

async function executionsOf(server: TestServer, automationId: string): Promise<Execution[]> {
  const res = await server.call("GET", `/api/v1/automation_executions?automation_id=${automationId}&page_size=100`);
  expect(res.status).toBe(200);
  return ((await res.json()) as { list: Execution[] }).list;
}

async function finishedExecution(server: TestServer, id: string): Promise<Execution> {
  for (let i = 0; i < 200; i++) {
    const res = await server.call("GET", `/api/v1/automation_executions/${id}`);
    const { execution } = (await res.json()) as { execution: Execution };
    if (execution.state === "SUCCEEDED" || execution.state === "FAILED") return execution;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  throw new Error(`execution ${id} did not finish`);
}

const nowSeconds = () => Math.floor(Date.now() / 1000);

describe("inbound webhooks: HMAC listeners", () => {
  let server: TestServer;
  let hook: WebhookAutomation;

  beforeAll(async () => {
    ({ server, hook } = await startHmacListener());
  });
  afterAll(() => server.close());

  const send = (body: string | Buffer, headers: Record<string, string>, target = hook) =>
    postWebhook(target.postUrl, headers, body);

  it("shows the listener id, the full endpoint URL, and the secret on Create only", async () => {
    expect(hook.listenerId).toMatch(/^[A-Za-z0-9_-]{22,}$/);
    expect(hook.endpointUrl).toBe(`${server.config.baseUrl}/api/v1/webhooks/incoming/${hook.listenerId}`);
    expect(hook.secret).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(Buffer.from(hook.secret, "base64url")).toHaveLength(32);
    const got = await (await server.call("GET", `/api/v1/automations/${hook.id}`)).text();
    const listed = await (await server.call("GET", "/api/v1/automations")).text();
    expect(got).not.toContain(hook.secret);
    expect(listed).not.toContain(hook.secret);
  });

  it("answers 200 {eventId, executionId} to a valid request and runs the automation with the body as ctx.trigger", async () => {
    const body = JSON.stringify({ user: "u-42", nested: { ok: true } });
    const eventId = randomUUID();
    const answer = await send(body, hmacHeaders(hook, body, { eventId }));
    expect(answer.status).toBe(200);
    expect(Object.keys(answer.body).sort()).toEqual(["eventId", "executionId"]);
    expect(answer.body.eventId).toBe(eventId);
    const execution = await finishedExecution(server, String(answer.body.executionId));
    expect(execution.state).toBe("SUCCEEDED");
    expect(execution.trigger).toEqual({ user: "u-42", nested: { ok: true } });
    expect(execution.eventId).toBe(eventId);
    expect(execution.steps?.[0]?.output).toEqual({ user: "u-42", nested: { ok: true } });
  });

  it("answers 401 to an altered body, a wrong secret and a missing Webhook-Signature", async () => {
    const body = '{"amount":1}';
    const altered = await send('{"amount":2}', hmacHeaders(hook, body));
    expect(altered).toEqual({ status: 401, body: { code: "unauthenticated", message: "Webhook-Signature does not match the request" } });
    const wrongSecret = await send(body, hmacHeaders(hook, body, { secret: "A".repeat(43) }));
    expect(wrongSecret.status).toBe(401);
    expect(wrongSecret.body.code).toBe("unauthenticated");
    const { "Webhook-Signature": _, ...unsigned } = hmacHeaders(hook, body);
    const missing = await send(body, unsigned);
    expect(missing).toEqual({ status: 401, body: { code: "unauthenticated", message: "Webhook-Signature is required for this listener" } });
    expect(await executionsOf(server, hook.id)).toHaveLength(1); // only the valid request of the test above
  });

  it('answers 200 to a signature list "bad good"', async () => {
    const body = '{"list":true}';
    const headers = hmacHeaders(hook, body);
    const bad = hmacHeaders(hook, body, { secret: "B".repeat(43), eventId: headers["Webhook-Event-Id"], timestamp: Number(headers["Webhook-Timestamp"]) });
    const answer = await send(body, { ...headers, "Webhook-Signature": `${bad["Webhook-Signature"]} ${headers["Webhook-Signature"]}` });
    expect(answer.status).toBe(200);
  });

  it("answers 400 when Content-Type, Webhook-Timestamp or Webhook-Event-Id is missing", async () => {
    const body = "{}";
    for (const [header, message] of [
      ["Content-Type", "Content-Type is required and must be application/json"],
      ["Webhook-Timestamp", "Webhook-Timestamp is required"],
      ["Webhook-Event-Id", "Webhook-Event-Id is required"],
    ] as const) {
      const headers = hmacHeaders(hook, body);
      delete headers[header];
      // fetch adds text/plain to a string body without Content-Type; a Buffer body gets none.
      const answer = await send(Buffer.from(body), headers);
      expect(answer, header).toEqual({ status: 400, body: { code: "invalid_argument", message } });
    }
    const textPlain = await send(body, { ...hmacHeaders(hook, body), "Content-Type": "text/plain" });
    expect(textPlain.status).toBe(400);
  });

  it("answers 400 to a body declared in a charset other than UTF-8 (read as UTF-8, a Latin-1 body was 'not valid JSON'), and takes utf-8, UTF8 and us-ascii", async () => {
    const body = '{"name":"Ren\u00e9e"}';
    const latin1 = Buffer.from(body, "latin1");
    const refused = await send(latin1, { ...hmacHeaders(hook, latin1), "Content-Type": "application/json; charset=ISO-8859-1" });
    expect(refused).toEqual({
      status: 400,
      body: { code: "invalid_argument", message: 'the body is read as UTF-8 JSON: charset="ISO-8859-1" is not taken' },
    });
    for (const charset of ["utf-8", '"UTF8"', "us-ascii"]) {
      const answer = await send(body, { ...hmacHeaders(hook, body), "Content-Type": `application/json;charset=${charset}` });
      expect(answer.status, charset).toBe(200);
    }
  });

  it("answers 400 to a body escaping half a character (a lone surrogate: stored, it read as U+FFFD over gRPC and escaped over JSON), and 200 to an escaped pair", async () => {
    for (const body of ['{"s":"lone\\ud800"}', '{"k\\uDC00":1}', '["\\ud83d"]']) {
      const answer = await send(body, hmacHeaders(hook, body));
      expect({ body, answer }).toEqual({
        body,
        answer: { status: 400, body: { code: "invalid_argument", message: "the body escapes half a character: a \\uD800-\\uDFFF escape that is not one of a pair" } },
      });
    }
    const pair = '{"s":"\\ud83d\\ude00"}';
    expect((await send(pair, hmacHeaders(hook, pair))).status).toBe(200);
  });

  it("answers 400 to a compressed body (Content-Encoding other than identity), also a plain one labelled gzip, and takes identity", async () => {
    const body = '{"gzip":"no"}';
    const gzipped = await send(gzipSync(body), { ...hmacHeaders(hook, gzipSync(body)), "Content-Encoding": "gzip" });
    expect(gzipped).toEqual({
      status: 400,
      body: { code: "invalid_argument", message: 'Content-Encoding "gzip" is not supported: send the body uncompressed' },
    });
    expect((await send(body, { ...hmacHeaders(hook, body), "Content-Encoding": "gzip" })).status).toBe(400);
    expect((await send(body, { ...hmacHeaders(hook, body), "Content-Encoding": "identity" })).status).toBe(200);
  });

  it("answers 400 to a timestamp 301 s old or 302 s ahead and to a non-numeric one, and 200 to one 299 s old", async () => {
    const body = "{}";
    // The server reads its clock after the client did, in the same second or a later one: a
    // timestamp behind only gets older (301 or 302 s), one ahead gets closer, so it is sent 302 s
    // ahead to stay outside the window (302 or 301 s). The exact 300/301 s boundary is tested on
    // checkTimestamp in webhooks-stages.test.ts.
    for (const [timestamp, direction] of [
      [nowSeconds() - 301, "behind"],
      [nowSeconds() + 302, "ahead of"],
    ] as const) {
      const answer = await send(body, hmacHeaders(hook, body, { timestamp }));
      expect(answer.status, direction).toBe(400);
      expect(answer.body.code, direction).toBe("invalid_argument");
      expect(answer.body.message, direction).toMatch(
        new RegExp(`^Webhook-Timestamp is 30[12] s ${direction} the server time; at most 300 s is accepted$`),
      );
    }
    const words = await send(body, { ...hmacHeaders(hook, body), "Webhook-Timestamp": "yesterday" });
    expect(words).toEqual({ status: 400, body: { code: "invalid_argument", message: "Webhook-Timestamp must be a Unix time in seconds" } });
    expect((await send(body, hmacHeaders(hook, body, { timestamp: nowSeconds() - 299 }))).status).toBe(200);
  });

  it("answers 400 to an event id that is not a UUID v4 (a v1 UUID, garbage)", async () => {
    const body = "{}";
    for (const eventId of ["c232ab00-9414-11ec-b3c8-9f6bdeced846", "garbage"]) {
      const answer = await send(body, hmacHeaders(hook, body, { eventId }));
      expect(answer, eventId).toEqual({ status: 400, body: { code: "invalid_argument", message: "Webhook-Event-Id must be a UUID v4" } });
    }
  });

  it("answers 400 to a body that is not JSON", async () => {
    const body = '{"unterminated": ';
    const answer = await send(body, hmacHeaders(hook, body));
    expect(answer).toEqual({ status: 400, body: { code: "invalid_argument", message: "the body is not valid JSON" } });
  });

  it("accepts a 65,536-byte body and answers 413 to 65,537 bytes", async () => {
    const sized = (n: number) => `{"pad":"${"x".repeat(n - 10)}"}`;
    const max = sized(65_536);
    expect(Buffer.byteLength(max)).toBe(65_536);
    expect((await send(max, hmacHeaders(hook, max))).status).toBe(200);
    const over = sized(65_537);
    const answer = await send(over, hmacHeaders(hook, over));
    expect(answer).toEqual({ status: 413, body: { code: "resource_exhausted", message: "the body is larger than 65536 bytes" } });
  });

  it("answers 409 to the same event id twice and runs once", async () => {
    const target = await createWebhookAutomation(server, { authMethod: "HMAC" });
    const body = '{"n":1}';
    const headers = hmacHeaders(target, body);
    expect((await send(body, headers, target)).status).toBe(200);
    const again = await send(body, headers, target);
    expect(again).toEqual({
      status: 409,
      body: { code: "already_exists", message: "this Webhook-Event-Id was already accepted by this listener" },
    });
    expect(await executionsOf(server, target.id)).toHaveLength(1);
  });

  it("answers 409 to the same event id spelled in capitals (a UUID's case carries no meaning) and runs once", async () => {
    const target = await createWebhookAutomation(server, { authMethod: "HMAC" });
    const eventId = randomUUID();
    const body = '{"n":1}';
    expect((await send(body, hmacHeaders(target, body, { eventId }), target)).status).toBe(200);
    const upper = await send(body, hmacHeaders(target, body, { eventId: eventId.toUpperCase() }), target);
    expect(upper.status).toBe(409);
    expect(await executionsOf(server, target.id)).toHaveLength(1);
  });

  it("answers one 200 and nineteen 409 to 20 identical requests at once", async () => {
    const target = await createWebhookAutomation(server, { authMethod: "HMAC" });
    const body = '{"burst":true}';
    const headers = hmacHeaders(target, body);
    const answers = await Promise.all(Array.from({ length: 20 }, () => send(body, headers, target)));
    const statuses = answers.map((a) => a.status).sort();
    expect(statuses).toEqual([200, ...Array<number>(19).fill(409)]);
    expect(await executionsOf(server, target.id)).toHaveLength(1);
    expect(eventRecordsOf(server.store, target.listenerId)).toBe(1);
  });

  it("accepts the same event id on another listener", async () => {
    const first = await createWebhookAutomation(server, { authMethod: "HMAC" });
    const second = await createWebhookAutomation(server, { authMethod: "HMAC" });
    const body = "{}";
    const eventId = randomUUID();
    expect((await send(body, hmacHeaders(first, body, { eventId }), first)).status).toBe(200);
    expect((await send(body, hmacHeaders(second, body, { eventId }), second)).status).toBe(200);
  });

  it("answers 404 to an unknown listener", async () => {
    const body = "{}";
    const answer = await postWebhook(`${server.url}/api/v1/webhooks/incoming/${"x".repeat(22)}`, hmacHeaders(hook, body), body);
    expect(answer).toEqual({ status: 404, body: { code: "not_found", message: "no webhook listener has this id" } });
  });

  it("answers 404 while unpublished or the trigger is off, records and runs nothing, and accepts the same event id once enabled", async () => {
    const target = await createWebhookAutomation(server, { authMethod: "HMAC" }, { active: false });
    const body = '{"later":true}';
    const headers = hmacHeaders(target, body);
    const refused = await send(body, headers, target);
    expect(refused.status).toBe(404);
    expect(refused.body.code).toBe("not_found");
    // Published but the trigger still off.
    expect((await server.call("POST", `/api/v1/automations/${target.id}/publish`, {})).status).toBe(200);
    expect((await send(body, headers, target)).status).toBe(404);
    expect(eventRecordsOf(server.store, target.listenerId)).toBe(0);
    expect(await executionsOf(server, target.id)).toHaveLength(0);
    await activate(server, target.id);
    expect((await send(body, headers, target)).status).toBe(200);
  });

  it("does not put the webhook route behind bearer auth, and refuses other methods with 405", async () => {
    const res = await fetch(hook.postUrl, { method: "GET" });
    expect(res.status).toBe(405);
    expect(res.headers.get("allow")).toBe("POST");
  });

  it("logs every verdict for ListWebhookDeliveries (Super Admin only), newest first, without the body", async () => {
    const target = await createWebhookAutomation(server, { authMethod: "HMAC" });
    const body = '{"secretish":"do-not-log"}';
    const ok = hmacHeaders(target, body);
    await send(body, ok, target);
    await send(body, ok, target);
    await send('{"x":1}', ok, target);
    await send(body, hmacHeaders(target, body, { timestamp: nowSeconds() - 1000 }), target);
    const res = await server.call("GET", `/api/v1/automations/${target.id}/webhook/deliveries?page_size=10`);
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(text).not.toContain("do-not-log");
    expect(text).not.toContain(target.secret);
    const { list, nextPageToken } = JSON.parse(text) as { list: Record<string, unknown>[]; nextPageToken: string };
    expect(nextPageToken).toBe("");
    expect(list.map((d) => [d.status, d.reason])).toEqual([
      [400, "timestamp_out_of_window"],
      [401, "signature_mismatch"],
      [409, "duplicate_event"],
      [200, "accepted"],
    ]);
    expect(list[3]).toMatchObject({
      eventId: ok["Webhook-Event-Id"],
      sourceIp: "127.0.0.1",
      sizeBytes: String(Buffer.byteLength(body)),
    });
    expect(list[3]?.executionId).toEqual(expect.any(String));
    expect(list[3]?.receivedAt).toEqual(expect.stringMatching(/^\d{4}-\d\d-\d\dT/));

    const readOnly = await server.tokenFor(Role.READ_ONLY);
    const refused = await fetch(`${server.url}/api/v1/automations/${target.id}/webhook/deliveries`, {
      headers: { authorization: `Bearer ${readOnly}` },
    });
    expect(refused.status).toBe(403);
  });
});

describe("inbound webhooks: the timestamp window on the server's clock", () => {
  it("accepts 300 s either way and refuses 301 s either way, to the second", async () => {
    const clock = new ManualClock(Date.parse("2026-03-01T12:00:00.500Z"));
    const server = await startTestServer({}, { clock });
    try {
      const hook = await createWebhookAutomation(server, { authMethod: "HMAC" });
      const body = "{}";
      const at = (offset: number) => postWebhook(hook.postUrl, hmacHeaders(hook, body, { timestamp: Math.floor(clock.now() / 1000) + offset }), body);
      for (const [offset, direction] of [
        [-301, "behind"],
        [301, "ahead of"],
      ] as const) {
        expect(await at(offset), String(offset)).toEqual({
          status: 400,
          body: { code: "invalid_argument", message: `Webhook-Timestamp is 301 s ${direction} the server time; at most 300 s is accepted` },
        });
      }
      expect((await at(-300)).status).toBe(200);
      expect((await at(300)).status).toBe(200);
    } finally {
      await server.close();
    }
  });
});

describe("inbound webhooks: IP restriction", () => {
  it("answers 403 to 127.0.0.1 when only 10.0.0.0/8 is allowed, and 200 when 127.0.0.0/8 is", async () => {
    const server = await startTestServer();
    try {
      const tenOnly = await createWebhookAutomation(server, { authMethod: "HMAC", ipRestrictionEnabled: true, allowedCidrs: ["10.0.0.0/8"] });
      const body = "{}";
      const refused = await postWebhook(tenOnly.postUrl, hmacHeaders(tenOnly, body), body);
      expect(refused).toEqual({
        status: 403,
        body: { code: "permission_denied", message: "source address 127.0.0.1 is not in the listener's allowed CIDRs" },
      });
      // Not believed: the peer is not a trusted proxy.
      const forged = await postWebhook(tenOnly.postUrl, { ...hmacHeaders(tenOnly, body), "X-Forwarded-For": "10.1.2.3" }, body);
      expect(forged.status).toBe(403);
      const loopback = await createWebhookAutomation(server, { authMethod: "HMAC", ipRestrictionEnabled: true, allowedCidrs: ["127.0.0.0/8"] });
      expect((await postWebhook(loopback.postUrl, hmacHeaders(loopback, body), body)).status).toBe(200);
    } finally {
      await server.close();
    }
  });

  it("matches an IPv4 sender against the IPv4 ranges and those of IPv4-mapped addresses only (::/64 let every IPv4 sender in: it was matched as ::ffff:a.b.c.d)", async () => {
    const server = await startTestServer();
    try {
      const body = "{}";
      const statusFor = async (allowedCidrs: string[]) => {
        const hook = await createWebhookAutomation(server, { authMethod: "HMAC", ipRestrictionEnabled: true, allowedCidrs });
        return (await postWebhook(hook.postUrl, hmacHeaders(hook, body), body)).status;
      };
      expect(await statusFor(["::/64"])).toBe(403);
      expect(await statusFor(["::/80", "2001:db8::/32"])).toBe(403);
      expect(await statusFor(["::ffff:127.0.0.0/104"])).toBe(200);
    } finally {
      await server.close();
    }
  });

  it("applies a changed CIDR list from the next request on (narrowed: 403; widened again: 200)", async () => {
    const server = await startTestServer();
    try {
      const hook = await createWebhookAutomation(server, { authMethod: "HMAC", ipRestrictionEnabled: true, allowedCidrs: ["127.0.0.0/8"] });
      const body = "{}";
      const send = () => postWebhook(hook.postUrl, hmacHeaders(hook, body), body);
      const allow = async (allowedCidrs: string[]) => {
        const res = await server.call("POST", `/api/v1/automations/${hook.id}`, {
          automation: { trigger: { webhook: { authMethod: "HMAC", ipRestrictionEnabled: true, allowedCidrs } } },
          updateMask: "trigger",
        });
        expect(res.status).toBe(200);
      };
      expect((await send()).status).toBe(200); // the listener's compiled list is cached now
      await allow(["10.0.0.0/8"]);
      expect(await send()).toEqual({
        status: 403,
        body: { code: "permission_denied", message: "source address 127.0.0.1 is not in the listener's allowed CIDRs" },
      });
      await allow(["10.0.0.0/8", "127.0.0.1/32"]);
      expect((await send()).status).toBe(200);
    } finally {
      await server.close();
    }
  });

  it("knows an HTTP/2 sender's address as well as an HTTP/1.1 sender's (h2c on the same port)", async () => {
    const server = await startTestServer();
    try {
      const tenOnly = await createWebhookAutomation(server, { authMethod: "HMAC", ipRestrictionEnabled: true, allowedCidrs: ["10.0.0.0/8"] });
      const loopback = await createWebhookAutomation(server, { authMethod: "HMAC", ipRestrictionEnabled: true, allowedCidrs: ["127.0.0.0/8"] });
      const body = "{}";
      const session = http2Connect(server.url);
      const post = (hook: WebhookAutomation) =>
        new Promise<{ status: number; body: unknown }>((resolve, reject) => {
          const stream = session.request({ ":method": "POST", ":path": new URL(hook.postUrl).pathname, ...hmacHeaders(hook, body) });
          let status = 0;
          const chunks: Buffer[] = [];
          stream.on("response", (headers) => (status = Number(headers[":status"])));
          stream.on("data", (chunk: Buffer) => chunks.push(chunk));
          stream.on("end", () => resolve({ status, body: JSON.parse(Buffer.concat(chunks).toString()) as unknown }));
          stream.on("error", reject);
          stream.end(body);
        });
      try {
        expect(await post(tenOnly)).toEqual({
          status: 403,
          body: { code: "permission_denied", message: "source address 127.0.0.1 is not in the listener's allowed CIDRs" },
        });
        expect((await post(loopback)).status).toBe(200);
      } finally {
        session.close();
      }
    } finally {
      await server.close();
    }
  });

  it("accepts a matching signature among several header lines, in either order (HTTP folds them with commas)", async () => {
    const server = await startTestServer();
    try {
      const hook = await createWebhookAutomation(server, { authMethod: "HMAC" });
      const body = "{}";
      const junk = "A".repeat(43);
      for (const order of ["good first", "junk first"]) {
        const { "Webhook-Signature": good, ...rest } = hmacHeaders(hook, body);
        expect(good).toMatch(/^[\w-]{43}$/);
        const headers = new Headers(rest);
        for (const signature of order === "good first" ? [good, junk] : [junk, good]) headers.append("webhook-signature", signature ?? "");
        const res = await fetch(hook.postUrl, { method: "POST", headers, body });
        expect({ order, status: res.status }).toEqual({ order, status: 200 });
      }
    } finally {
      await server.close();
    }
  });

  it("believes X-Forwarded-For only from a trusted proxy", async () => {
    const server = await startTestServer({ trustedProxies: ["127.0.0.0/8"] });
    try {
      const hook = await createWebhookAutomation(server, { authMethod: "HMAC", ipRestrictionEnabled: true, allowedCidrs: ["203.0.113.0/24"] });
      const body = "{}";
      const via = (xff: string | undefined) =>
        postWebhook(hook.postUrl, { ...hmacHeaders(hook, body), ...(xff === undefined ? {} : { "X-Forwarded-For": xff }) }, body);
      expect((await via("203.0.113.9")).status).toBe(200);
      // The client wrote the left entry itself; the proxy appended the real one.
      expect((await via("203.0.113.9, 198.51.100.7")).status).toBe(403);
      expect((await via(undefined)).status).toBe(403);
    } finally {
      await server.close();
    }
  });

  it("refuses an invalid CIDR with 400", async () => {
    const server = await startTestServer();
    try {
      const res = await server.call("POST", "/api/v1/automations", {
        displayName: "bad cidr",
        trigger: { webhook: { authMethod: "HMAC", ipRestrictionEnabled: true, allowedCidrs: ["10.0.0.0/33"] } },
        steps: [{ name: "echo", log: { messageCel: "ctx.trigger" } }],
      });
      expect(res.status).toBe(400);
      expect(await res.json()).toMatchObject({ code: "invalid_argument", message: expect.stringContaining('"10.0.0.0/33"') });
    } finally {
      await server.close();
    }
  });
});

describe("inbound webhooks: secret rotation", () => {
  it("accepts both secrets during the grace period and only the new one after it", async () => {
    const clock = new ManualClock(Date.now());
    const server = await startTestServer({}, { clock });
    try {
      const hook = await createWebhookAutomation(server, { authMethod: "HMAC" });
      const res = await server.call("POST", `/api/v1/automations/${hook.id}/webhook/rotate-secret`, {});
      expect(res.status).toBe(200);
      const rotated = (await res.json()) as { webhookSecret: string; previousSecretExpiresAt: string };
      expect(rotated.webhookSecret).toMatch(/^[A-Za-z0-9_-]{43}$/);
      expect(rotated.webhookSecret).not.toBe(hook.secret);
      expect(Date.parse(rotated.previousSecretExpiresAt)).toBe(clock.now() + 24 * 3_600_000);

      const body = "{}";
      const withSecret = (secret: string) =>
        postWebhook(hook.postUrl, hmacHeaders(hook, body, { secret, timestamp: Math.floor(clock.now() / 1000) }), body);
      expect((await withSecret(hook.secret)).status).toBe(200);
      expect((await withSecret(rotated.webhookSecret)).status).toBe(200);
      clock.advance(24 * 3_600_000);
      expect((await withSecret(hook.secret)).status).toBe(401);
      expect((await withSecret(rotated.webhookSecret)).status).toBe(200);
    } finally {
      await server.close();
    }
  });

  it("ends the old secret for good with gracePeriod 0s, also when the clock then steps back (it signed again for the step's length)", async () => {
    const clock = new ManualClock(Date.now());
    const server = await startTestServer({}, { clock });
    try {
      const hook = await createWebhookAutomation(server, { authMethod: "HMAC" });
      const res = await server.call("POST", `/api/v1/automations/${hook.id}/webhook/rotate-secret`, { gracePeriod: "0s" });
      const { previousSecretExpiresAt } = (await res.json()) as { previousSecretExpiresAt: string };
      expect(Date.parse(previousSecretExpiresAt)).toBe(clock.now());
      const body = "{}";
      expect((await postWebhook(hook.postUrl, hmacHeaders(hook, body), body)).status).toBe(401);
      clock.advance(-4 * 60_000); // within the timestamp window of the real clock the sender signs with
      expect((await postWebhook(hook.postUrl, hmacHeaders(hook, body), body)).status).toBe(401);
    } finally {
      await server.close();
    }
  });

  it("ends the old secret at once with gracePeriod 0s and refuses non-HMAC automations", async () => {
    const server = await startTestServer();
    try {
      const hook = await createWebhookAutomation(server, { authMethod: "HMAC" });
      const res = await server.call("POST", `/api/v1/automations/${hook.id}/webhook/rotate-secret`, { gracePeriod: "0s" });
      const { webhookSecret } = (await res.json()) as { webhookSecret: string };
      const body = "{}";
      expect((await postWebhook(hook.postUrl, hmacHeaders(hook, body), body)).status).toBe(401);
      expect((await postWebhook(hook.postUrl, hmacHeaders(hook, body, { secret: webhookSecret }), body)).status).toBe(200);
      const rotate = (gracePeriod: string) => server.call("POST", `/api/v1/automations/${hook.id}/webhook/rotate-secret`, { gracePeriod });
      // 0s to 30 days inclusive, judged on the Duration: a negative or longer one by less than a
      // millisecond is outside too.
      for (const outside of ["-1s", "-0.0006s", "-0.000000001s", "2592000.000000001s", "2592001s"]) {
        const refused = await rotate(outside);
        expect({ outside, status: refused.status, body: await refused.json() }).toEqual({
          outside,
          status: 400,
          body: { code: "invalid_argument", message: "gracePeriod must be between 0s and 30 days" },
        });
      }
      for (const inside of ["2592000s", "0.0004s"]) expect((await rotate(inside)).status).toBe(200);
      const missing = await server.call("POST", `/api/v1/automations/${randomUUID()}/webhook/rotate-secret`, {});
      expect(missing.status).toBe(404);
    } finally {
      await server.close();
    }
  });
});

describe("inbound webhooks: the secrets follow the trigger", () => {
  it("drops an HMAC listener's secrets when its trigger becomes manual, and issues a new one when it is HMAC again", async () => {
    const server = await startTestServer();
    try {
      const hook = await createWebhookAutomation(server, { authMethod: "HMAC" });
      const storedSecrets = () =>
        server.store.db.prepare("SELECT count(*) FROM webhook_secrets WHERE automation_id = ?").pluck().get(hook.id);
      expect(storedSecrets()).toBe(1);
      const toManual = await server.call("POST", `/api/v1/automations/${hook.id}`, { automation: { trigger: { manual: {} } }, updateMask: "trigger" });
      expect(toManual.status).toBe(200);
      expect(storedSecrets()).toBe(0);

      const toHmac = await server.call("POST", `/api/v1/automations/${hook.id}`, {
        automation: { trigger: { webhook: { authMethod: "HMAC" } } },
        updateMask: "trigger",
      });
      expect(toHmac.status).toBe(200);
      const { automation, webhookSecret } = (await toHmac.json()) as {
        automation: { trigger: { webhook: { listenerId: string } } };
        webhookSecret: string;
      };
      expect(webhookSecret).toMatch(/^[A-Za-z0-9_-]{43}$/);
      expect(storedSecrets()).toBe(1);
      const again = { ...hook, postUrl: `${server.url}/api/v1/webhooks/incoming/${automation.trigger.webhook.listenerId}` };
      const body = "{}";
      expect((await postWebhook(again.postUrl, hmacHeaders(again, body), body)).status).toBe(401);
      expect((await postWebhook(again.postUrl, hmacHeaders(again, body, { secret: webhookSecret }), body)).status).toBe(200);
    } finally {
      await server.close();
    }
  });
});

describe("inbound webhooks: event-record retention (ACCESSD_EVENT_RETENTION)", () => {
  it("forgets event records older than the retention when the expiry task runs at start, and keeps newer ones", async () => {
    const dir = mkdtempSync(join(tmpdir(), "accessd-retention-"));
    const clock = new ManualClock(Date.now());
    const config = { database: join(dir, "accessd.db"), eventRetentionMs: 3_600_000 };
    const seconds = () => Math.floor(clock.now() / 1000);
    const body = '{"n":1}';
    let server = await startTestServer(config, { clock });
    try {
      const hook = await createWebhookAutomation(server, { authMethod: "HMAC" });
      const send = (url: string, eventId: string) => postWebhook(url, hmacHeaders(hook, body, { eventId, timestamp: seconds() }), body);
      const old = randomUUID();
      expect((await send(hook.postUrl, old)).status).toBe(200);
      clock.advance(2 * 3_600_000); // the first record is now older than the retention
      const recent = randomUUID();
      expect((await send(hook.postUrl, recent)).status).toBe(200);
      expect((await send(hook.postUrl, old)).status).toBe(409); // not expired until the task runs

      await server.close();
      server = await startTestServer(config, { clock }); // the task runs once at start
      const postUrl = `${server.url}/api/v1/webhooks/incoming/${hook.listenerId}`;
      expect((await send(postUrl, old)).status).toBe(200); // its record was deleted: a new event
      expect((await send(postUrl, recent)).status).toBe(409); // kept
    } finally {
      await server.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
