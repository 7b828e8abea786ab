import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Role } from "../gen/svc/api/iam/v1/role_pb.js";
import { answer } from "./support/api-fixtures.js";
import { startTestServer, type TestServer } from "./support/test-server.js";

/**
 * The roles of the automation RPCs, stated here by hand from README "The API" (writes
 * SUPER_ADMIN, Execute ADMIN, reads READ_ONLY) and checked over REST. Deliberately not derived
 * from the `required_role` options (test/auth-rpcs.test.ts does that): a lowered option in the
 * contract must fail this file.
 */

let server: TestServer;
let admin: Record<string, string>;
let readOnly: Record<string, string>;
let automationId: string;

const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

beforeAll(async () => {
  server = await startTestServer();
  admin = bearer(await server.tokenFor(Role.ADMIN));
  readOnly = bearer(await server.tokenFor(Role.READ_ONLY));
  const res = await server.call("POST", "/api/v1/automations", {
    displayName: "Roles",
    trigger: { webhook: { authMethod: "HMAC" } },
    steps: [{ name: "hi", log: { messageCel: '"hello"' } }],
  });
  expect(res.status).toBe(200);
  automationId = ((await res.json()) as { automation: { id: string } }).automation.id;
});
afterAll(() => server.close());

/** A REST call as the caller with `headers` (not the Super Admin of server.call). */
function callAs(headers: Record<string, string>, method: string, path: string, json?: unknown): Promise<{ status: number; body: unknown }> {
  return fetch(server.url + path, {
    method,
    headers: { ...headers, ...(json === undefined ? {} : { "content-type": "application/json" }) },
    body: json === undefined ? undefined : JSON.stringify(json),
  }).then(answer);
}

const denied = (procedure: string, needed: string, has: string) => ({
  status: 403,
  body: { code: "permission_denied", message: `svc.api.automations.v1.${procedure} requires role ${needed}; the caller has ${has}` },
});

/** Every Super-Admin-only automation RPC, as a REST call that a Super Admin would get 200 for. */
function superAdminCalls(): [procedure: string, method: string, path: string, body?: unknown][] {
  const base = `/api/v1/automations/${automationId}`;
  return [
    [
      "Automations.Create",
      "POST",
      "/api/v1/automations",
      { displayName: "by admin", trigger: { manual: {} }, steps: [{ name: "hi", log: { messageCel: '"x"' } }] },
    ],
    ["Automations.Update", "POST", base, { automation: { id: automationId, displayName: "renamed by admin" } }],
    ["Automations.Delete", "DELETE", base],
    ["Automations.Publish", "POST", `${base}/publish`, {}],
    ["Automations.Unpublish", "POST", `${base}/unpublish`, {}],
    ["Automations.SetTriggerEnabled", "POST", `${base}/trigger`, { enabled: true }],
    ["Automations.RotateWebhookSecret", "POST", `${base}/webhook/rotate-secret`, {}],
    ["Automations.ListWebhookDeliveries", "GET", `${base}/webhook/deliveries`],
  ];
}

describe("automation roles over REST", () => {
  it("lets an ADMIN execute an automation", async () => {
    const executed = await callAs(admin, "POST", `/api/v1/automations/${automationId}/execute`, { context: { by: "admin" } });
    expect(executed).toMatchObject({ status: 200, body: { execution: { automationId, state: "PENDING", trigger: { by: "admin" } } } });
  });

  it("answers 403 permission_denied to an ADMIN on Create, Update, Delete, Publish, Unpublish, SetTriggerEnabled, RotateWebhookSecret and ListWebhookDeliveries, and changes nothing", async () => {
    const before = await answer(await server.call("GET", `/api/v1/automations/${automationId}`));
    expect(before.status).toBe(200);
    for (const [procedure, method, path, body] of superAdminCalls()) {
      expect({ procedure, ...(await callAs(admin, method, path, body)) }).toEqual({ procedure, ...denied(procedure, "SUPER_ADMIN", "ADMIN") });
    }
    // The same calls succeed for the Super Admin (so the 403s above were the role, not the request).
    expect(await answer(await server.call("GET", `/api/v1/automations/${automationId}`))).toEqual(before);
    const listed = (await (await server.call("GET", "/api/v1/automations?page_size=100")).json()) as { list: { displayName: string }[] };
    expect(listed.list.map((a) => a.displayName)).toEqual(["Roles"]);
    expect((await server.call("GET", `/api/v1/automations/${automationId}/webhook/deliveries`)).status).toBe(200);
    expect((await server.call("POST", `/api/v1/automations/${automationId}/publish`, {})).status).toBe(200);
    expect((await server.call("POST", `/api/v1/automations/${automationId}/unpublish`, {})).status).toBe(200);
  });

  it("lets READ_ONLY get and list automations and list and get executions", async () => {
    const executed = await server.call("POST", `/api/v1/automations/${automationId}/execute`, { context: {} });
    expect(executed.status).toBe(200);
    const executionId = ((await executed.json()) as { execution: { id: string } }).execution.id;

    expect(await callAs(readOnly, "GET", `/api/v1/automations/${automationId}`)).toMatchObject({
      status: 200,
      body: { automation: { id: automationId, displayName: "Roles" } },
    });
    const list = await callAs(readOnly, "GET", "/api/v1/automations");
    expect(list).toMatchObject({ status: 200, body: { list: [{ id: automationId }], nextPageToken: "" } });
    const executions = await callAs(readOnly, "GET", `/api/v1/automation_executions?automation_id=${automationId}&page_size=100`);
    expect(executions.status).toBe(200);
    expect((executions.body as { list: { id: string }[] }).list.map((e) => e.id)).toContain(executionId);
    expect(await callAs(readOnly, "GET", `/api/v1/automation_executions/${executionId}`)).toMatchObject({
      status: 200,
      body: { execution: { id: executionId, automationId } },
    });
  });

  it("answers 403 permission_denied to READ_ONLY on Execute and runs nothing", async () => {
    const before = (await (await server.call("GET", `/api/v1/automation_executions?automation_id=${automationId}&page_size=100`)).json()) as {
      list: unknown[];
    };
    const refused = await callAs(readOnly, "POST", `/api/v1/automations/${automationId}/execute`, { context: { by: "reader" } });
    expect(refused).toEqual(denied("Automations.Execute", "ADMIN", "READ_ONLY"));
    const after = (await (await server.call("GET", `/api/v1/automation_executions?automation_id=${automationId}&page_size=100`)).json()) as {
      list: unknown[];
    };
    expect(after.list).toHaveLength(before.list.length);
  });
});
