import { describe, expect, it } from "vitest";
import { Role } from "../gen/svc/api/iam/v1/role_pb.js";
import type { Automation } from "../src/store/automations-repository.js";
import { Store } from "../src/store/store.js";

/**
 * The in-memory answers of the hot lookups (a webhook's listener and HMAC secrets, an API caller's
 * principal) never go stale.
 */
describe("store read caches", () => {
  const listenerId = "listener-1";
  const automation = (published: boolean): Automation => ({
    id: "auto-1",
    displayName: "a",
    description: "",
    trigger: { kind: "webhook", listenerId, authMethod: "HMAC", jwksUrl: "", ipRestrictionEnabled: false, allowedCidrs: [] },
    steps: [],
    published,
    triggerEnabled: true,
    version: 1,
    createdAt: 1,
    updatedAt: 1,
  });

  it("a listener lookup sees every committed write, and none that rolled back", () => {
    const store = Store.open(":memory:");
    store.transaction(() => store.automations.insert(automation(false)));
    expect(store.automations.findByListenerId(listenerId)?.published).toBe(false);
    store.transaction(() => store.automations.setFlags(automation(true)));
    expect(store.automations.findByListenerId(listenerId)?.published).toBe(true);
    expect(() =>
      store.transaction(() => {
        store.automations.setFlags(automation(false));
        // read inside the transaction: its own write, not cached
        expect(store.automations.findByListenerId(listenerId)?.published).toBe(false);
        throw new Error("roll back");
      }),
    ).toThrow("roll back");
    expect(store.automations.findByListenerId(listenerId)?.published).toBe(true);
    store.transaction(() => store.automations.delete("auto-1"));
    expect(store.automations.findByListenerId(listenerId)).toBeUndefined();
    store.close();
  });

  it("the valid secrets follow inserts, expiry and deletion", () => {
    const store = Store.open(":memory:");
    const secrets = store.webhooks.secrets;
    secrets.insert({ id: "s1", automationId: "a", sealed: Buffer.from("x"), createdAt: 1 });
    expect(secrets.valid("a", 10).map((s) => s.id)).toEqual(["s1"]);
    secrets.insert({ id: "s2", automationId: "a", sealed: Buffer.from("y"), createdAt: 2 });
    expect(secrets.valid("a", 10).map((s) => s.id)).toEqual(["s2", "s1"]);
    secrets.expireAll("a", 100);
    expect(secrets.valid("a", 99)).toHaveLength(2);
    expect(secrets.valid("a", 100)).toHaveLength(0); // past its grace: filtered by time, cache or not
    secrets.deleteFor("a");
    expect(secrets.valid("a", 0)).toHaveLength(0);
    store.close();
  });

  it("a client's principal follows role changes and deletion, and is read from the store once between writes", () => {
    const store = Store.open(":memory:");
    const user = { id: "u1", displayName: "Ada", email: "", username: "", createdAt: 1, updatedAt: 1, roles: [Role.READ_ONLY] };
    store.users.insert(user);
    store.clients.insert({ id: "c1", userId: "u1", displayName: "c", secretHash: "h", publicJwk: undefined, createdAt: 1 });
    expect(store.clients.principalOf("c1")).toEqual({ userId: "u1", roles: [Role.READ_ONLY], clientCreatedAt: 1 });
    // Cached: a write behind the repositories' back (never done by the service) is not seen.
    store.db.prepare("UPDATE user_roles SET role = ? WHERE user_id = 'u1'").run(Role.SUPER_ADMIN);
    expect(store.clients.principalOf("c1")?.roles).toEqual([Role.READ_ONLY]);
    // The repositories' writes are seen at once.
    store.users.update({ ...user, roles: [Role.ADMIN] });
    expect(store.clients.principalOf("c1")?.roles).toEqual([Role.ADMIN]);
    store.clients.delete("c1");
    expect(store.clients.principalOf("c1")).toBeUndefined();
    store.close();
  });
});
