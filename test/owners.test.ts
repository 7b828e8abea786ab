import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { answer, createApp, createEntitlement, createUser, listOwnerIds, ownersPath } from "./support/api-fixtures.js";
import { startTestServer, type TestServer } from "./support/test-server.js";

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer();
});
afterAll(() => server.close());

let appId: string;
let entitlementId: string;
let userId: string;
beforeEach(async () => {
  appId = await createApp(server);
  entitlementId = await createEntitlement(server, appId);
  userId = await createUser(server);
});

describe("Add owner (POST /api/v1/apps/{app_id}/entitlements/{entitlement_id}/owners)", () => {
  it("answers 200 with exactly {} and lists the owner", async () => {
    const res = await server.call("POST", ownersPath(appId, entitlementId), { userId });
    expect(res.status).toBe(200);
    expect(await res.text()).toBe("{}");
    expect(await listOwnerIds(server, appId, entitlementId)).toEqual([userId]);
  });

  it.each([
    ["a missing userId", {}],
    ["a null userId", { userId: null }],
    ["an empty userId", { userId: "" }],
    ["a blank userId", { userId: "   " }],
  ])("answers 400 invalid_argument to %s", async (_, body) => {
    const res = await server.call("POST", ownersPath(appId, entitlementId), body);
    expect(await answer(res)).toEqual({
      status: 400,
      body: { code: "invalid_argument", message: "userId is required" },
    });
    expect(await listOwnerIds(server, appId, entitlementId)).toEqual([]);
  });

  it("answers 400 to an empty body", async () => {
    const res = await server.call("POST", ownersPath(appId, entitlementId), undefined, {
      "content-type": "application/json",
    });
    expect(await answer(res)).toEqual({
      status: 400,
      body: { code: "invalid_argument", message: "userId is required" },
    });
  });

  it("answers 400 to a userId that is not a string", async () => {
    const res = await server.call("POST", ownersPath(appId, entitlementId), { userId: 42 });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { code: string }).code).toBe("invalid_argument");
  });

  it("answers 404 for an unknown app", async () => {
    const res = await server.call("POST", ownersPath("no-such-app", entitlementId), { userId });
    expect(await answer(res)).toEqual({
      status: 404,
      body: { code: "not_found", message: 'app "no-such-app" not found' },
    });
  });

  it("answers 404 for an unknown entitlement", async () => {
    const res = await server.call("POST", ownersPath(appId, "no-such-entitlement"), { userId });
    expect(await answer(res)).toEqual({
      status: 404,
      body: { code: "not_found", message: 'app entitlement "no-such-entitlement" not found' },
    });
  });

  it("answers 404 for an entitlement that belongs to another app, and adds nothing", async () => {
    const otherAppId = await createApp(server, "Other");
    const res = await server.call("POST", ownersPath(otherAppId, entitlementId), { userId });
    expect(await answer(res)).toEqual({
      status: 404,
      body: { code: "not_found", message: `app entitlement "${entitlementId}" not found` },
    });
    expect(await listOwnerIds(server, appId, entitlementId)).toEqual([]);
  });

  it("answers 404 for an unknown user", async () => {
    const res = await server.call("POST", ownersPath(appId, entitlementId), { userId: "no-such-user" });
    expect(await answer(res)).toEqual({
      status: 404,
      body: { code: "not_found", message: 'user "no-such-user" not found' },
    });
    expect(await listOwnerIds(server, appId, entitlementId)).toEqual([]);
  });

  it("answers 200 {} to adding an existing owner and lists the owner once", async () => {
    for (let i = 0; i < 3; i++) {
      const res = await server.call("POST", ownersPath(appId, entitlementId), { userId });
      expect(res.status).toBe(200);
      expect(await res.text()).toBe("{}");
    }
    expect(await listOwnerIds(server, appId, entitlementId)).toEqual([userId]);
  });

  it("answers the same errors over Connect JSON as over REST", async () => {
    const call = (body: unknown) => server.call("POST", "/svc.api.app.v1.AppEntitlementOwners/Add", body);
    expect(await answer(await call({ appId, entitlementId }))).toEqual({
      status: 400,
      body: { code: "invalid_argument", message: "userId is required" },
    });
    expect(await answer(await call({ appId, entitlementId, userId: "ghost" }))).toEqual({
      status: 404,
      body: { code: "not_found", message: 'user "ghost" not found' },
    });
  });
});

describe("List owners", () => {
  it("lists the owning users as user resources", async () => {
    await server.call("POST", ownersPath(appId, entitlementId), { userId });
    const res = await server.call("GET", ownersPath(appId, entitlementId));
    expect(res.status).toBe(200);
    const body = (await res.json()) as { list: { id: string; displayName: string }[]; nextPageToken: string };
    expect(body.list).toHaveLength(1);
    expect(body.list[0]).toMatchObject({ id: userId, displayName: "Ada Lovelace" });
    expect(body.nextPageToken).toBe("");
  });

  it("answers 404 when the entitlement belongs to another app", async () => {
    const otherAppId = await createApp(server, "Other");
    const res = await server.call("GET", ownersPath(otherAppId, entitlementId));
    expect(res.status).toBe(404);
  });
});

describe("Set owners (PUT .../owners)", () => {
  it("replaces the owners with userIds and answers {}", async () => {
    const [a, b] = [await createUser(server, "A"), await createUser(server, "B")];
    await server.call("POST", ownersPath(appId, entitlementId), { userId });
    const res = await server.call("PUT", ownersPath(appId, entitlementId), { userIds: [a, b, a] });
    expect(res.status).toBe(200);
    expect(await res.text()).toBe("{}");
    expect((await listOwnerIds(server, appId, entitlementId)).sort()).toEqual([a, b].sort());
  });

  it("clears the owners with an empty userIds", async () => {
    await server.call("POST", ownersPath(appId, entitlementId), { userId });
    const res = await server.call("PUT", ownersPath(appId, entitlementId), { userIds: [] });
    expect(res.status).toBe(200);
    expect(await listOwnerIds(server, appId, entitlementId)).toEqual([]);
  });

  it("answers 404 naming an unknown user and changes nothing", async () => {
    const a = await createUser(server, "A");
    await server.call("POST", ownersPath(appId, entitlementId), { userId });
    const res = await server.call("PUT", ownersPath(appId, entitlementId), { userIds: [a, "ghost"] });
    expect(await answer(res)).toEqual({
      status: 404,
      body: { code: "not_found", message: 'user "ghost" not found' },
    });
    expect(await listOwnerIds(server, appId, entitlementId)).toEqual([userId]);
  });

  it("answers 400 to an empty user id in userIds and changes nothing", async () => {
    await server.call("POST", ownersPath(appId, entitlementId), { userId });
    const res = await server.call("PUT", ownersPath(appId, entitlementId), { userIds: [""] });
    expect(res.status).toBe(400);
    expect(await listOwnerIds(server, appId, entitlementId)).toEqual([userId]);
  });

  it("answers 404 for an entitlement of another app", async () => {
    const otherAppId = await createApp(server, "Other");
    const res = await server.call("PUT", ownersPath(otherAppId, entitlementId), { userIds: [userId] });
    expect(res.status).toBe(404);
    expect(await listOwnerIds(server, appId, entitlementId)).toEqual([]);
  });
});

describe("Remove owner (DELETE .../owners/{user_id})", () => {
  it("removes an owner and answers {}", async () => {
    await server.call("POST", ownersPath(appId, entitlementId), { userId });
    const res = await server.call("DELETE", `${ownersPath(appId, entitlementId)}/${userId}`);
    expect(res.status).toBe(200);
    expect(await res.text()).toBe("{}");
    expect(await listOwnerIds(server, appId, entitlementId)).toEqual([]);
  });

  it("answers 404 when the user is not an owner", async () => {
    const res = await server.call("DELETE", `${ownersPath(appId, entitlementId)}/${userId}`);
    expect(await answer(res)).toEqual({
      status: 404,
      body: { code: "not_found", message: `owner "${userId}" not found` },
    });
  });

  it("answers 404 when the user was an owner but has been removed already", async () => {
    await server.call("POST", ownersPath(appId, entitlementId), { userId });
    expect((await server.call("DELETE", `${ownersPath(appId, entitlementId)}/${userId}`)).status).toBe(200);
    expect((await server.call("DELETE", `${ownersPath(appId, entitlementId)}/${userId}`)).status).toBe(404);
  });
});
