import { createPublicKey } from "node:crypto";
import { request } from "node:http";
import { exportJWK } from "jose";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { GroupCommit } from "../src/webhooks/group-commit.js";
import { IpRestrictions } from "../src/webhooks/ip-restriction.js";
import { recheckListener } from "../src/webhooks/listener-lookup.js";
import { signJwtWebhook } from "../src/webhooks/index.js";
import { startTestServer, type TestServer } from "./support/test-server.js";
import {
  createWebhookAutomation,
  hmacHeaders,
  postWebhook,
  startJwksServer,
  startLoopbackServer,
  type JwksServer,
  type WebhookAutomation,
} from "./support/webhook-fixtures.js";
import { eventRecordsOf } from "./support/store-fixtures.js";

/**
 * A webhook's listener is looked up when its headers arrive (stage 1), but the event is recorded
 * only after its body, its authentication and a group commit (stage 9): seconds later for a slow
 * body or a JWKS fetch. What an administrator changed in between decides: stage 9 judges the
 * request again against the automation as it is at the commit.
 */

interface Answer {
  status: number;
  body: { code?: string; message?: string };
}

/**
 * Sends a signed webhook's headers and the first byte of its body, runs `meanwhile` once the server
 * is waiting for the rest, then sends the rest and returns the answer.
 */
async function sendAcross(hook: WebhookAutomation, meanwhile: () => Promise<void>): Promise<Answer> {
  const body = Buffer.from('{"user":"u-1"}');
  const req = request(hook.postUrl, {
    method: "POST",
    headers: { ...hmacHeaders(hook, body), "content-type": "application/json", "content-length": String(body.length) },
  });
  const answer = new Promise<Answer>((resolve, reject) => {
    req.on("response", (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (chunk: string) => (text += chunk));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) as Answer["body"] }));
    });
    req.on("error", reject);
  });
  req.write(body.subarray(0, 1));
  await new Promise((r) => setTimeout(r, 150)); // the server has the headers: stage 1 is done
  await meanwhile();
  req.end(body.subarray(1));
  return answer;
}

async function ok(res: Promise<Response>): Promise<void> {
  const answer = await res;
  expect(answer.status, await answer.clone().text()).toBe(200);
}

describe("inbound webhooks: an automation changed while a request is in flight", () => {
  let server: TestServer;
  let jwks: JwksServer;
  beforeAll(async () => {
    server = await startTestServer({ jwksAllowHttp: true });
    jwks = await startJwksServer();
  });
  afterAll(async () => {
    await server.close();
    await jwks.close();
  });

  async function outcome(hook: WebhookAutomation): Promise<{ executions: number; deliveries: { status: number; reason: string }[] }> {
    const executions = server.store.db
      .prepare<[string], number>("SELECT count(*) FROM automation_executions WHERE automation_id = ?")
      .pluck()
      .get(hook.id);
    const deliveries = server.store.db
      .prepare<[string], { status: number; reason: string }>("SELECT status, reason FROM webhook_deliveries WHERE automation_id = ?")
      .all(hook.id);
    return { executions: executions ?? 0, deliveries };
  }

  it("refuses with 404 trigger_disabled when the trigger was disabled, and records and runs nothing", async () => {
    const hook = await createWebhookAutomation(server, { authMethod: "HMAC" });
    const answer = await sendAcross(hook, () => ok(server.call("POST", `/api/v1/automations/${hook.id}/trigger`, { enabled: false })));
    expect(answer).toEqual({ status: 404, body: { code: "not_found", message: "the webhook trigger of this automation is disabled" } });
    expect(eventRecordsOf(server.store, hook.listenerId)).toBe(0);
    expect(await outcome(hook)).toEqual({ executions: 0, deliveries: [{ status: 404, reason: "trigger_disabled" }] });
  });

  it("refuses with 404 automation_unpublished when the automation was unpublished", async () => {
    const hook = await createWebhookAutomation(server, { authMethod: "HMAC" });
    const answer = await sendAcross(hook, () => ok(server.call("POST", `/api/v1/automations/${hook.id}/unpublish`, {})));
    expect(answer.status).toBe(404);
    expect(await outcome(hook)).toEqual({ executions: 0, deliveries: [{ status: 404, reason: "automation_unpublished" }] });
  });

  it("refuses with 403 when the listener was restricted to addresses the sender is not in", async () => {
    const hook = await createWebhookAutomation(server, { authMethod: "HMAC" });
    const answer = await sendAcross(hook, async () => {
      const current = (await (await server.call("GET", `/api/v1/automations/${hook.id}`)).json()) as { automation: Record<string, unknown> };
      const automation = current.automation as { trigger: { webhook: Record<string, unknown> } };
      automation.trigger.webhook = { ...automation.trigger.webhook, ipRestrictionEnabled: true, allowedCidrs: ["10.0.0.0/8"] };
      await ok(server.call("POST", `/api/v1/automations/${hook.id}`, { automation, updateMask: "trigger" }));
    });
    expect(answer).toEqual({
      status: 403,
      body: { code: "permission_denied", message: "source address 127.0.0.1 is not in the listener's allowed CIDRs" },
    });
    expect(await outcome(hook)).toEqual({ executions: 0, deliveries: [{ status: 403, reason: "source_ip_not_allowed" }] });
  });

  /**
   * A JWKS server that, once armed, holds its next answer until `release()`: a JWT webhook waits
   * for it after its body arrived, between stage 6 starting and stage 9.
   */
  async function gatedJwks() {
    const document = JSON.stringify({ keys: [{ ...(await exportJWK(createPublicKey(jwks.keys.eddsa))), kid: "ed1", alg: "EdDSA" }] });
    let held: { fetched: () => void; released: Promise<void> } | undefined;
    const server = await startLoopbackServer((_req, res) => {
      const answer = () => res.writeHead(200, { "content-type": "application/json" }).end(document);
      if (held === undefined) return answer();
      held.fetched();
      void held.released.then(answer);
      held = undefined;
    });
    return {
      url: `${server.url}/jwks.json`,
      /** Holds the next fetch: resolves `fetching` when it arrives, answers it on `release()`. */
      arm() {
        let fetched!: () => void;
        const fetching = new Promise<void>((resolve) => (fetched = resolve));
        let release!: () => void;
        const released = new Promise<void>((resolve) => (release = resolve));
        held = { fetched, released };
        return { fetching, release };
      },
      close: () => server.close(),
    };
  }

  async function sendJwtAcross(hook: WebhookAutomation, jwksGate: { arm(): { fetching: Promise<void>; release(): void } }, meanwhile: () => Promise<void>) {
    const gate = jwksGate.arm();
    const body = Buffer.from('{"user":"u-1"}');
    const headers = await signJwtWebhook({ url: hook.endpointUrl, body }, { privateKey: jwks.keys.eddsa, kid: "ed1" });
    const answer = postWebhook(hook.postUrl, { ...headers }, body);
    const early = await Promise.race([gate.fetching.then(() => undefined), answer]);
    if (early !== undefined) throw new Error(`answered before fetching the JWKS: ${JSON.stringify(early)}`);
    await meanwhile();
    gate.release();
    return answer;
  }

  it("refuses with 401 listener_auth_changed when the JWKS URL was changed while the old one was being fetched", async () => {
    const gate = await gatedJwks();
    const hook = await createWebhookAutomation(server, { authMethod: "JWT", jwksUrl: gate.url });
    const answer = await sendJwtAcross(hook, gate, async () => {
      const current = (await (await server.call("GET", `/api/v1/automations/${hook.id}`)).json()) as { automation: Record<string, unknown> };
      const automation = current.automation as { trigger: { webhook: Record<string, unknown> } };
      automation.trigger.webhook = { ...automation.trigger.webhook, jwksUrl: jwks.url };
      await ok(server.call("POST", `/api/v1/automations/${hook.id}`, { automation, updateMask: "trigger" }));
    });
    await gate.close();
    expect(answer.status).toBe(401);
    expect(answer.body.code).toBe("unauthenticated");
    expect(await outcome(hook)).toEqual({ executions: 0, deliveries: [{ status: 401, reason: "listener_auth_changed" }] });
  });

  it("answers 404 listener_unknown, not 500, when the automation was deleted while its JWKS was being fetched", async () => {
    const gate = await gatedJwks();
    const hook = await createWebhookAutomation(server, { authMethod: "JWT", jwksUrl: gate.url });
    const answer = await sendJwtAcross(hook, gate, () => ok(server.call("DELETE", `/api/v1/automations/${hook.id}`)));
    await gate.close();
    expect(answer).toEqual({ status: 404, body: { code: "not_found", message: "no webhook listener has this id" } });
    expect((await outcome(hook)).executions).toBe(0);
  });

  it("answers 401, not 500, to an HMAC request whose automation was deleted while its body was arriving (its secret went too)", async () => {
    const hook = await createWebhookAutomation(server, { authMethod: "HMAC" });
    const answer = await sendAcross(hook, () => ok(server.call("DELETE", `/api/v1/automations/${hook.id}`)));
    expect(answer.status).toBe(401);
    expect((await outcome(hook)).executions).toBe(0);
  });

  it("refuses with 401 when the HMAC secret was rotated without grace after the signature was checked", async () => {
    const hook = await createWebhookAutomation(server, { authMethod: "HMAC" });
    const original = GroupCommit.prototype.run;
    // The rotation lands between stage 6 (the signature, checked) and the group's commit.
    const run = vi.spyOn(GroupCommit.prototype, "run").mockImplementationOnce(async function (this: GroupCommit, work) {
      await ok(server.call("POST", `/api/v1/automations/${hook.id}/webhook/rotate-secret`, { gracePeriod: "0s" }));
      return original.call(this, work);
    });
    try {
      const body = '{"user":"u-1"}';
      const answer = await postWebhook(hook.postUrl, hmacHeaders(hook, body), body);
      expect(answer).toEqual({ status: 401, body: { code: "unauthenticated", message: "Webhook-Signature does not match the request" } });
      expect(await outcome(hook)).toEqual({ executions: 0, deliveries: [{ status: 401, reason: "signature_mismatch" }] });
    } finally {
      run.mockRestore();
    }
  });

  it("accepts across a rotation with the default grace (the old secret stays valid)", async () => {
    const hook = await createWebhookAutomation(server, { authMethod: "HMAC" });
    const original = GroupCommit.prototype.run;
    const run = vi.spyOn(GroupCommit.prototype, "run").mockImplementationOnce(async function (this: GroupCommit, work) {
      await ok(server.call("POST", `/api/v1/automations/${hook.id}/webhook/rotate-secret`, {}));
      return original.call(this, work);
    });
    try {
      const body = '{"user":"u-1"}';
      expect((await postWebhook(hook.postUrl, hmacHeaders(hook, body), body)).status).toBe(200);
    } finally {
      run.mockRestore();
    }
  });

  it("accepts when what changed does not concern the request (another automation, this one's name)", async () => {
    const hook = await createWebhookAutomation(server, { authMethod: "HMAC" });
    const other = await createWebhookAutomation(server, { authMethod: "HMAC" });
    const answer = await sendAcross(hook, async () => {
      await ok(server.call("POST", `/api/v1/automations/${other.id}/trigger`, { enabled: false }));
      await ok(server.call("POST", `/api/v1/automations/${hook.id}`, { automation: { displayName: "renamed" }, updateMask: "displayName" }));
    });
    expect(answer.status).toBe(200);
    expect(await outcome(hook)).toEqual({ executions: 1, deliveries: [{ status: 200, reason: "accepted" }] });
  });
});

describe("recheckListener", () => {
  const target = {
    automationId: "a1",
    published: true,
    triggerEnabled: true,
    trigger: { kind: "webhook" as const, listenerId: "l1", authMethod: "HMAC" as const, jwksUrl: "", ipRestrictionEnabled: false, allowedCidrs: [] },
  };

  it("reads nothing when automations were not written since stage 1 (the webhook path's one comparison), and reads again when they were", () => {
    let finds = 0;
    let writes = 7;
    const listeners = {
      find: () => {
        finds++;
        return { ...target, triggerEnabled: false };
      },
      writes: () => writes,
    };
    const snapshot = { listenerId: "l1", target, writes: 7 };
    expect(recheckListener(listeners, new IpRestrictions(), snapshot, "127.0.0.1")).toBeUndefined();
    expect(finds).toBe(0);
    writes = 8;
    expect(recheckListener(listeners, new IpRestrictions(), snapshot, "127.0.0.1")?.reason).toBe("trigger_disabled");
    expect(finds).toBe(1);
  });
});
