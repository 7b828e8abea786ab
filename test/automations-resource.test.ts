import { Code, ConnectError, createClient, createRouterTransport } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Automations, WebhookAuthMethod } from "../gen/svc/api/automations/v1/automation_pb.js";
import { automationsService } from "../src/api/automations-service.js";
import { ExecutionWorker, ProgramCache, type TriggerConfig, type WebhookTriggerConfig, type WebhookTriggerHooks } from "../src/automations/index.js";
import { ManualClock } from "../src/clock.js";
import { createLogger } from "../src/logger.js";
import { PageTokenCodec } from "../src/pagination/index.js";
import { Store } from "../src/store/store.js";
import { answer } from "./support/api-fixtures.js";
import { startTestServer, type TestServer } from "./support/test-server.js";

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer({ baseUrl: "https://tenant.example.com" });
});
afterAll(() => server.close());

const logStep = (name: string, messageCel = '"hello"') => ({ name, log: { messageCel } });

interface AutomationJson {
  id: string;
  version: number;
  published?: boolean;
  triggerEnabled?: boolean;
  trigger: { manual?: object; webhook?: { listenerId: string; endpointUrl: string; authMethod: string } };
  createdAt: string;
  updatedAt: string;
}

async function createManual(displayName = "Onboarding"): Promise<AutomationJson> {
  const res = await server.call("POST", "/api/v1/automations", { displayName, trigger: { manual: {} }, steps: [logStep("hi")] });
  expect(res.status).toBe(200);
  return ((await res.json()) as { automation: AutomationJson }).automation;
}

describe("the automation resource", () => {
  it("creates an automation unpublished, trigger off, at version 1, and answers it on Get", async () => {
    const res = await server.call("POST", "/api/v1/automations", {
      displayName: "Onboarding",
      description: "grants on request",
      trigger: { manual: {} },
      steps: [{ name: "hi", skipIfTrueCel: "false", log: { messageCel: '"hello"' } }],
    });
    const { status, body } = await answer(res);
    expect(status).toBe(200);
    const automation = (body as { automation: AutomationJson }).automation;
    expect(body).toEqual({
      automation: {
        id: automation.id,
        displayName: "Onboarding",
        description: "grants on request",
        trigger: { manual: {} },
        steps: [{ name: "hi", skipIfTrueCel: "false", log: { messageCel: '"hello"' } }],
        version: 1,
        createdAt: automation.createdAt,
        updatedAt: automation.createdAt,
      },
    });
    expect(await answer(await server.call("GET", `/api/v1/automations/${automation.id}`))).toEqual({
      status: 200,
      body: { automation: (body as { automation: unknown }).automation },
    });
  });

  it("increments the version on every update; publishing and the trigger toggle keep it", async () => {
    const { id } = await createManual();
    const update = (automation: object) =>
      server.call("POST", `/api/v1/automations/${id}`, { automation: { id, ...automation } }).then(answer);
    expect(await update({ displayName: "Renamed" })).toMatchObject({ status: 200, body: { automation: { displayName: "Renamed", version: 2 } } });
    expect(await update({ steps: [logStep("bye", '"bye"')] })).toMatchObject({
      status: 200,
      body: { automation: { displayName: "Renamed", version: 3, steps: [{ name: "bye" }] } },
    });

    const publish = await answer(await server.call("POST", `/api/v1/automations/${id}/publish`, {}));
    expect(publish).toMatchObject({ status: 200, body: { automation: { published: true, version: 3 } } });
    const enable = await answer(await server.call("POST", `/api/v1/automations/${id}/trigger`, { enabled: true }));
    expect(enable).toMatchObject({ status: 200, body: { automation: { published: true, triggerEnabled: true, version: 3 } } });
    const disable = await answer(await server.call("POST", `/api/v1/automations/${id}/trigger`, { enabled: false }));
    expect((disable.body as { automation: AutomationJson }).automation.triggerEnabled).toBeUndefined();
    const unpublish = await answer(await server.call("POST", `/api/v1/automations/${id}/unpublish`, {}));
    expect((unpublish.body as { automation: AutomationJson }).automation.published).toBeUndefined();
  });

  it("gives a webhook trigger an unguessable listener id and its endpoint URL, kept across updates", async () => {
    const res = await server.call("POST", "/api/v1/automations", {
      displayName: "From HR",
      trigger: { webhook: { authMethod: "HMAC" } },
      steps: [logStep("hi")],
    });
    expect(res.status).toBe(200);
    const automation = ((await res.json()) as { automation: AutomationJson }).automation;
    const webhook = automation.trigger.webhook;
    expect(webhook?.listenerId).toMatch(/^[A-Za-z0-9_-]{24}$/);
    expect(webhook?.endpointUrl).toBe(`https://tenant.example.com/api/v1/webhooks/incoming/${webhook?.listenerId}`);
    expect(server.store.automations.findByListenerId(webhook?.listenerId ?? "")).toEqual({
      automationId: automation.id,
      published: false,
      triggerEnabled: false,
      trigger: { kind: "webhook", listenerId: webhook?.listenerId, authMethod: "HMAC", jwksUrl: "", ipRestrictionEnabled: false, allowedCidrs: [] },
    });

    const updated = await answer(
      await server.call("POST", `/api/v1/automations/${automation.id}`, {
        automation: { id: automation.id, trigger: { webhook: { authMethod: "HMAC", ipRestrictionEnabled: true, allowedCidrs: ["203.0.113.0/24"] } } },
      }),
    );
    expect(updated).toMatchObject({ status: 200, body: { automation: { trigger: { webhook: { listenerId: webhook?.listenerId, ipRestrictionEnabled: true } } } } });

    const manual = await server.call("POST", `/api/v1/automations/${automation.id}`, {
      automation: { id: automation.id, trigger: { manual: {} } },
    });
    expect(manual.status).toBe(200);
    expect(server.store.automations.findByListenerId(webhook?.listenerId ?? "")).toBeUndefined();
  });

  it.each([
    [{ webhook: {} }, "trigger.webhook.authMethod is required: HMAC or JWT"],
    [{ webhook: { authMethod: "JWT" } }, "trigger.webhook.jwksUrl is required for JWT listeners"],
    [{ webhook: { authMethod: "HMAC", jwksUrl: "https://keys.example.com/jwks.json" } }, "trigger.webhook.jwksUrl applies to JWT listeners only"],
    [undefined, "trigger is required: set trigger.webhook or trigger.manual"],
    [
      { webhook: { authMethod: "HMAC", ipRestrictionEnabled: true, allowedCidrs: ["203.0.113.0/24", "10.0.0.1/8"] } },
      'trigger.webhook.allowedCidrs[1] "10.0.0.1/8" has host bits set: write 10.0.0.0/8 for the network, or 10.0.0.1/32 for the one address',
    ],
    [
      { webhook: { authMethod: "HMAC", ipRestrictionEnabled: false, allowedCidrs: ["2001:db8::1/48"] } },
      'trigger.webhook.allowedCidrs[0] "2001:db8::1/48" has host bits set: write 2001:db8::/48 for the network, or 2001:db8::1/128 for the one address',
    ],
  ])("answers 400 to the trigger %j", async (trigger, message) => {
    const res = await server.call("POST", "/api/v1/automations", { displayName: "x", trigger, steps: [] });
    expect(await answer(res)).toEqual({ status: 400, body: { code: "invalid_argument", message } });
  });

  it("takes back a range with host bits set that the automation holds already (saved by an older build), so that it can be read and written back; a new one is refused", async () => {
    const res = await server.call("POST", "/api/v1/automations", { displayName: "legacy ranges", trigger: { webhook: { authMethod: "HMAC" } }, steps: [logStep("hi")] });
    const { automation } = (await res.json()) as { automation: AutomationJson };
    const stored = server.store.automations.get(automation.id);
    if (stored === undefined || stored.trigger.kind !== "webhook") throw new Error("no webhook automation");
    stored.trigger = { ...stored.trigger, ipRestrictionEnabled: true, allowedCidrs: ["10.0.0.1/8"] }; // as an older build saved it
    stored.version++;
    server.store.transaction(() => server.store.automations.update(stored));
    const read = ((await (await server.call("GET", `/api/v1/automations/${automation.id}`)).json()) as { automation: AutomationJson }).automation;
    const writtenBack = await server.call("POST", `/api/v1/automations/${automation.id}`, { automation: read });
    expect(writtenBack.status).toBe(200);
    const widened = await server.call("POST", `/api/v1/automations/${automation.id}`, {
      automation: { id: automation.id, trigger: { webhook: { authMethod: "HMAC", ipRestrictionEnabled: true, allowedCidrs: ["10.0.0.1/8", "192.0.2.1/24"] } } },
      updateMask: "trigger",
    });
    expect(await answer(widened)).toEqual({
      status: 400,
      body: { code: "invalid_argument", message: 'trigger.webhook.allowedCidrs[1] "192.0.2.1/24" has host bits set: write 192.0.2.0/24 for the network, or 192.0.2.1/32 for the one address' },
    });
  });

  it("lists automations in pages and deletes them", async () => {
    const ids = new Set<string>();
    for (let i = 0; i < 11; i++) ids.add((await createManual(`list ${i}`)).id);
    const seen: string[] = [];
    let token = "";
    do {
      const res = await answer(await server.call("GET", `/api/v1/automations?page_size=10&page_token=${token}`));
      expect(res.status).toBe(200);
      const body = res.body as { list: AutomationJson[]; nextPageToken: string };
      expect(body.list.length).toBeLessThanOrEqual(10);
      seen.push(...body.list.map((a) => a.id));
      token = body.nextPageToken;
    } while (token !== "");
    expect(seen.filter((id) => ids.has(id))).toHaveLength(11);

    const [first] = ids;
    expect(await answer(await server.call("DELETE", `/api/v1/automations/${first}`))).toEqual({ status: 200, body: {} });
    expect(await answer(await server.call("GET", `/api/v1/automations/${first}`))).toEqual({
      status: 404,
      body: { code: "not_found", message: `automation "${first}" not found` },
    });
    expect((await server.call("DELETE", `/api/v1/automations/${first}`)).status).toBe(404);
  });
});

describe("the webhook trigger hooks", () => {
  function serviceWith(hooks: WebhookTriggerHooks) {
    const store = Store.open(":memory:");
    const clock = new ManualClock(Date.parse("2025-01-01T00:00:00Z"));
    const programs = new ProgramCache();
    const worker = new ExecutionWorker({ store, clock, log: createLogger("silent"), programs });
    const impl = automationsService({
      store,
      clock,
      pageTokens: new PageTokenCodec(Buffer.alloc(32)),
      automations: { worker, programs, webhookHooks: hooks, baseUrl: "https://t.example" },
    });
    const client = createClient(Automations, createRouterTransport(({ service }) => service(Automations, impl)));
    return { store, client };
  }
  const hmac = { trigger: { case: "webhook" as const, value: { authMethod: WebhookAuthMethod.HMAC } } };

  it("validates before writing, saves in the write's transaction with the previous trigger, and forgets on Delete", async () => {
    const calls: string[] = [];
    const { store, client } = serviceWith({
      validate: (t: WebhookTriggerConfig) => calls.push(`validate ${t.authMethod}`),
      saved: (id: string, t: WebhookTriggerConfig, previous: TriggerConfig | undefined) => {
        // Inside the transaction: the automation row is already visible.
        calls.push(`saved ${store.automations.get(id)?.version} ${t.kind} previous=${previous?.kind ?? "none"}`);
        return "s3cret";
      },
      deleted: (id: string) => calls.push(`deleted ${store.automations.get(id) === undefined}`),
    });
    const created = await client.create({ displayName: "hooked", trigger: hmac });
    expect(created.webhookSecret).toBe("s3cret");
    const id = created.automation?.id ?? "";
    const updated = await client.update({ automation: { id, trigger: hmac } });
    expect(updated.webhookSecret).toBe("s3cret");
    await client.update({ automation: { id, displayName: "no trigger change" } });
    await client.delete({ id });
    expect(calls).toEqual([
      "validate HMAC",
      "saved 1 webhook previous=none",
      "validate HMAC",
      "saved 2 webhook previous=webhook",
      "deleted true",
    ]);
  });

  it("writes nothing when validate refuses the trigger, or when saved throws", async () => {
    const refusing = serviceWith({
      validate: () => {
        throw new ConnectError("allowedCidrs[0] is not a CIDR", Code.InvalidArgument);
      },
      saved: () => undefined,
      deleted: () => {},
    });
    await expect(refusing.client.create({ displayName: "x", trigger: hmac })).rejects.toThrow("allowedCidrs[0] is not a CIDR");
    expect(refusing.store.automations.listAfter(undefined, 10)).toEqual([]);

    const failing = serviceWith({
      validate: () => {},
      saved: () => {
        throw new ConnectError("secret store unavailable", Code.Unavailable);
      },
      deleted: () => {},
    });
    await expect(failing.client.create({ displayName: "x", trigger: hmac })).rejects.toThrow("secret store unavailable");
    expect(failing.store.automations.listAfter(undefined, 10)).toEqual([]);
  });
});
