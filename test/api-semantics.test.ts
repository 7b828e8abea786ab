import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadConfig } from "../src/config.js";
import { startTestServer, type TestServer } from "./support/test-server.js";
import { createWebhookAutomation } from "./support/webhook-fixtures.js";

/**
 * Promises of the API that a mutation review found no test holding: resources are reached only
 * through their own path, an update changes only what it names, refusals of what does not exist.
 */
let server: TestServer;
beforeAll(async () => {
  server = await startTestServer();
});
afterAll(() => server.close());

async function created<T>(res: Response): Promise<T> {
  expect(res.status).toBe(200);
  return (await res.json()) as T;
}

describe("resources are reached through their own path only", () => {
  it("answers 404 to deleting an entitlement through another app's path, and keeps it", async () => {
    const { app: a1 } = await created<{ app: { id: string } }>(await server.call("POST", "/api/v1/apps", { displayName: "one" }));
    const { app: a2 } = await created<{ app: { id: string } }>(await server.call("POST", "/api/v1/apps", { displayName: "two" }));
    const { appEntitlement: e } = await created<{ appEntitlement: { id: string } }>(
      await server.call("POST", `/api/v1/apps/${a1.id}/entitlements`, { displayName: "admins" }),
    );
    const wrong = await server.call("DELETE", `/api/v1/apps/${a2.id}/entitlements/${e.id}`);
    expect(wrong.status).toBe(404);
    expect((await server.call("GET", `/api/v1/apps/${a1.id}/entitlements/${e.id}`)).status).toBe(200);
  });

  it("takes the id from the path, not from a body that names another automation", async () => {
    const a = await createWebhookAutomation(server, { authMethod: "HMAC" });
    const b = await createWebhookAutomation(server, { authMethod: "HMAC" });
    await server.call("POST", `/api/v1/automations/${a.id}/unpublish`, {});
    await server.call("POST", `/api/v1/automations/${b.id}/unpublish`, {});
    expect((await server.call("POST", `/api/v1/automations/${a.id}/publish`, { id: b.id })).status).toBe(200);
    const published = async (id: string) =>
      ((await (await server.call("GET", `/api/v1/automations/${id}`)).json()) as { automation: { published?: boolean } }).automation.published ?? false;
    expect([await published(a.id), await published(b.id)]).toEqual([true, false]);
  });

  it("answers 404 to deleting an unknown app and to the deliveries of an unknown automation, 400 to an unknown execution state", async () => {
    expect((await server.call("DELETE", "/api/v1/apps/no-such-app")).status).toBe(404);
    expect((await server.call("GET", "/api/v1/automations/no-such-automation/webhook/deliveries")).status).toBe(404);
    expect((await server.call("GET", "/api/v1/automation_executions?state=9")).status).toBe(400);
  });
});

describe("an update changes only what it names", () => {
  it("keeps a user's roles when an Update without a mask gives only a display name, and clears them when the mask names roles", async () => {
    const { user } = await created<{ user: { id: string } }>(await server.call("POST", "/api/v1/users", { displayName: "keeps roles", roles: ["ADMIN"] }));
    const renamed = await created<{ user: { displayName: string; roles?: string[] } }>(
      await server.call("POST", `/api/v1/users/${user.id}`, { user: { displayName: "renamed" } }),
    );
    expect(renamed.user).toMatchObject({ displayName: "renamed", roles: ["ADMIN"] });
    const cleared = await created<{ user: { roles?: string[] } }>(
      await server.call("POST", `/api/v1/users/${user.id}`, { user: { roles: [] }, updateMask: "roles" }),
    );
    expect(cleared.user.roles ?? []).toEqual([]);
  });
});

describe("refusals of what does not apply", () => {
  it("answers failed_precondition to rotating the secret of a JWT or manual automation", async () => {
    const jwt = await createWebhookAutomation(server, { authMethod: "JWT", jwksUrl: "https://keys.example.com/jwks.json" });
    const res = await server.call("POST", `/api/v1/automations/${jwt.id}/webhook/rotate-secret`, {});
    expect(res.status).toBe(400);
    expect(((await res.json()) as { code: string }).code).toBe("failed_precondition");
  });
});

describe("ACCESSD_DATA_KEY", () => {
  it("takes the key in base64url (43 characters) as well as in hex, and refuses 42 characters", () => {
    const key = randomBytes(32);
    expect(loadConfig({ ACCESSD_DATA_KEY: key.toString("base64url") }).dataKey).toEqual(key);
    expect(loadConfig({ ACCESSD_DATA_KEY: key.toString("hex") }).dataKey).toEqual(key);
    expect(() => loadConfig({ ACCESSD_DATA_KEY: key.toString("base64url").slice(0, 42) })).toThrow();
  });
});

describe("an entitlement's slug, when none is given", () => {
  it("is its name's letters and digits of any script in lower case, Latin accents dropped, every other run one hyphen (ASCII only before: 'diteur-g-n-ral', and no slug for '管理者')", async () => {
    const app = (await (await server.call("POST", "/api/v1/apps", { displayName: "Slugs" })).json()) as { app: { id: string } };
    const slugOf = async (displayName: string, slug?: string) => {
      const res = await server.call("POST", `/api/v1/apps/${app.app.id}/entitlements`, { displayName, ...(slug === undefined ? {} : { slug }) });
      expect(res.status).toBe(200);
      return ((await res.json()) as { appEntitlement: { slug: string } }).appEntitlement.slug;
    };
    expect(await slugOf("Billing Admin")).toBe("billing-admin");
    expect(await slugOf("Éditeur Général")).toBe("editeur-general");
    expect(await slugOf("Ünïcödé — Über, 2")).toBe("unicode-uber-2");
    expect(await slugOf("管理者 2")).toBe("管理者-2");
    expect(await slugOf("データ管理")).toBe("データ管理"); // kana voicing marks stay with their letters ("テ-ータ")
    expect(await slugOf("हिन्दी एडमिन")).toBe("हिन्दी-एडमिन");
    expect(await slugOf("ไทย ผู้ดูแล")).toBe("ไทย-ผู้ดูแล");
    expect(await slugOf("Billing Admin", "   ")).toBe("billing-admin"); // white space is no slug
    expect(await slugOf("Billing Admin", "custom")).toBe("custom");
  });

  it("is derived again from the name when an Update sets it to empty or white space (white space was stored as the slug)", async () => {
    const app = (await (await server.call("POST", "/api/v1/apps", { displayName: "Slugs again" })).json()) as { app: { id: string } };
    const created = (await (await server.call("POST", `/api/v1/apps/${app.app.id}/entitlements`, { displayName: "Lecture", slug: "read" })).json()) as {
      appEntitlement: { id: string };
    };
    const path = `/api/v1/apps/${app.app.id}/entitlements/${created.appEntitlement.id}`;
    for (const body of [{ appEntitlement: { slug: "   " } }, { appEntitlement: { slug: "" }, updateMask: "slug" }, { appEntitlement: { displayName: "Écriture", slug: " " }, updateMask: "displayName,slug" }]) {
      const res = await server.call("POST", path, body);
      expect(res.status).toBe(200);
      const { appEntitlement } = (await res.json()) as { appEntitlement: { displayName: string; slug: string } };
      expect(appEntitlement.slug).toBe(appEntitlement.displayName === "Écriture" ? "ecriture" : "lecture");
    }
  });
});
