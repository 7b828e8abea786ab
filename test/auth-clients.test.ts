import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Role } from "../gen/svc/api/iam/v1/role_pb.js";
import { newClientKey, requestToken } from "./support/auth-helpers.js";
import { startTestServer, type TestServer } from "./support/test-server.js";

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer();
});
afterAll(() => server.close());

const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

async function createUser(roles: string[] = [], headers: Record<string, string> = {}): Promise<Response> {
  return server.call("POST", "/api/v1/users", { displayName: "someone", roles }, headers);
}

async function userIdWith(roles: string[]): Promise<string> {
  const res = await createUser(roles);
  expect(res.status).toBe(200);
  return ((await res.json()) as { user: { id: string } }).user.id;
}

describe("svc.api.iam.v1.Clients", () => {
  it("creates a client_secret_post client, shows its secret once, and the secret gets a token", async () => {
    const userId = await userIdWith(["ADMIN"]);
    const res = await server.call("POST", "/api/v1/iam/clients", { displayName: "ci", userId });
    expect(res.status).toBe(200);
    expect(res.headers.get("cache-control")).toBe("no-store"); // it carries the secret
    const body = (await res.json()) as {
      client: { id: string; displayName: string; userId: string; authMethod: string; createdAt: string };
      clientSecret: string;
    };
    expect(body.client).toMatchObject({ displayName: "ci", userId, authMethod: "CLIENT_SECRET_POST" });
    expect(body.clientSecret).toMatch(/^[\w-]{43}$/);
    const token = await requestToken(server, {
      grant_type: "client_credentials",
      client_id: body.client.id,
      client_secret: body.clientSecret,
    });
    expect(token.status).toBe(200);

    const listed = await server.call("GET", "/api/v1/iam/clients");
    expect(listed.status).toBe(200);
    const text = await listed.text();
    expect(text).not.toContain(body.clientSecret);
    expect(text).not.toContain("clientSecret");
    const list = (JSON.parse(text) as { list: { id: string }[]; nextPageToken: string }).list;
    expect(list.map((c) => c.id)).toContain(body.client.id);
    expect(JSON.parse(text)).toHaveProperty("nextPageToken", "");
  });

  it("marks Connect answers no-store too (a Create's carries the secret)", async () => {
    const userId = await userIdWith(["READ_ONLY"]);
    const res = await fetch(`${server.url}/svc.api.iam.v1.Clients/Create`, {
      method: "POST",
      headers: { "content-type": "application/json", ...bearer(await server.tokenFor(Role.SUPER_ADMIN)) },
      body: JSON.stringify({ displayName: "ci", userId }),
    });
    expect(res.status).toBe(200);
    expect(res.headers.get("cache-control")).toBe("no-store");
    expect(((await res.json()) as { clientSecret: string }).clientSecret).toMatch(/^[\w-]{43}$/);
  });

  it("registers a public JWK and keeps only its public members", async () => {
    const userId = await userIdWith(["READ_ONLY"]);
    const key = await newClientKey("ES256");
    const res = await server.call("POST", "/api/v1/iam/clients", { displayName: "signer", userId, publicJwk: { ...key.publicJwk, use: "sig" } });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { client: { publicJwk: Record<string, string>; authMethod: string }; clientSecret?: string };
    expect(body.client.authMethod).toBe("PRIVATE_KEY_JWT");
    expect(body.client.publicJwk).toEqual({ ...key.publicJwk, use: "sig" });
    expect(body.clientSecret).toBeUndefined();
  });

  it("answers 400 to a private key, an unsupported key type, a small RSA key and missing fields", async () => {
    const userId = await userIdWith([]);
    const { privateKey } = await newClientKey("EdDSA");
    const { exportJWK } = await import("jose");
    const cases: unknown[] = [
      { displayName: "x", userId, publicJwk: await exportJWK(privateKey) },
      { displayName: "x", userId, publicJwk: { kty: "oct", k: "c2VjcmV0" } },
      { displayName: "x", userId, publicJwk: { kty: "EC", crv: "P-384", x: "a", y: "b" } },
      { displayName: "x", userId, publicJwk: { kty: "RSA", n: Buffer.alloc(128, 1).toString("base64url"), e: "AQAB" } },
      { displayName: "x" },
      { userId },
    ];
    for (const body of cases) {
      const res = await server.call("POST", "/api/v1/iam/clients", body);
      expect(res.status).toBe(400);
      expect(((await res.json()) as { code: string }).code).toBe("invalid_argument");
    }
  });

  it("answers 404 to a client for an unknown user and to deleting an unknown client", async () => {
    const create = await server.call("POST", "/api/v1/iam/clients", { displayName: "x", userId: "no-such-user" });
    expect(create.status).toBe(404);
    const del = await server.call("DELETE", "/api/v1/iam/clients/no-such-client");
    expect(del.status).toBe(404);
  });
});

describe("user roles", () => {
  it("creates a user with roles and shows them on Get", async () => {
    const res = await createUser(["ADMIN", "READ_ONLY", "ADMIN"]);
    expect(res.status).toBe(200);
    const { user } = (await res.json()) as { user: { id: string; roles: string[] } };
    expect(user.roles).toEqual(["READ_ONLY", "ADMIN"]);
    const got = (await (await server.call("GET", `/api/v1/users/${user.id}`)).json()) as { user: { roles: string[] } };
    expect(got.user.roles).toEqual(["READ_ONLY", "ADMIN"]);
  });

  it("creates a user without roles when none are given", async () => {
    const { user } = (await (await createUser()).json()) as { user: { roles?: string[] } };
    expect(user.roles ?? []).toEqual([]);
  });

  it("answers 400 to an unknown role", async () => {
    expect((await createUser(["OWNER"])).status).toBe(400);
    expect((await createUser(["ROLE_UNSPECIFIED"])).status).toBe(400);
  });

  it("lets an ADMIN grant ADMIN but not SUPER_ADMIN", async () => {
    const admin = bearer(await server.tokenFor(Role.ADMIN));
    expect((await createUser(["ADMIN"], admin)).status).toBe(200);
    const refused = await createUser(["SUPER_ADMIN"], admin);
    expect(refused.status).toBe(403);
    expect(((await refused.json()) as { code: string }).code).toBe("permission_denied");
    expect((await createUser(["SUPER_ADMIN"])).status).toBe(200); // the Super Admin may
  });

  it("refuses an ADMIN any change to a SUPER_ADMIN user (roles, name, email, username), and lets it change an ADMIN", async () => {
    const admin = bearer(await server.tokenFor(Role.ADMIN));
    const superUser = await userIdWith(["SUPER_ADMIN"]);
    const before = await (await server.call("GET", `/api/v1/users/${superUser}`)).json();
    const demote = await server.call("POST", `/api/v1/users/${superUser}`, { user: { roles: ["READ_ONLY"] } }, admin);
    expect(demote.status).toBe(403);
    // A profile change too: an ADMIN could otherwise give a Super Admin another user's name or
    // email and mislead whoever grants roles next.
    for (const user of [{ displayName: "renamed" }, { email: "attacker@example.com" }, { username: "someone-else" }]) {
      const changed = await server.call("POST", `/api/v1/users/${superUser}`, { user }, admin);
      expect(changed.status).toBe(403);
      expect(await changed.json()).toEqual({ code: "permission_denied", message: "only a caller with role SUPER_ADMIN may change a user who holds it" });
    }
    expect(await (await server.call("GET", `/api/v1/users/${superUser}`)).json()).toEqual(before);
    // A Super Admin may; an ADMIN may change a user whose roles are within its own.
    expect((await server.call("POST", `/api/v1/users/${superUser}`, { user: { displayName: "renamed" } })).status).toBe(200);
    const otherAdmin = await userIdWith(["ADMIN"]);
    expect((await server.call("POST", `/api/v1/users/${otherAdmin}`, { user: { displayName: "renamed" } }, admin)).status).toBe(200);
  });

  it("clears roles only when the update mask names them", async () => {
    const id = await userIdWith(["ADMIN"]);
    const cleared = await server.call("POST", `/api/v1/users/${id}`, { user: { roles: [] }, updateMask: "roles" });
    expect(cleared.status).toBe(200);
    expect(((await cleared.json()) as { user: { roles?: string[] } }).user.roles ?? []).toEqual([]);
  });

  describe("a Create still hashing its secret when its caller is revoked", () => {
    /**
     * A Super Admin client of its own, and 16 Creates from it at once: scrypt runs on libuv's four
     * threads, so they finish over ~0.2 s, long after `revoke` has been answered.
     */
    async function createsAcross(revoke: (clientId: string, userId: string) => Promise<Response>) {
      const callerUser = await userIdWith(["SUPER_ADMIN"]);
      const created = await server.call("POST", "/api/v1/iam/clients", { displayName: "caller", userId: callerUser });
      const caller = (await created.json()) as { client: { id: string }; clientSecret: string };
      const token = await requestToken(server, { grant_type: "client_credentials", client_id: caller.client.id, client_secret: caller.clientSecret });
      const named = await userIdWith([]);
      const creates = Array.from({ length: 16 }, () =>
        server.call("POST", "/api/v1/iam/clients", { displayName: "late", userId: named }, bearer(String(token.body.access_token))),
      );
      await new Promise((r) => setTimeout(r, 10));
      expect((await revoke(caller.client.id, callerUser)).status).toBe(200);
      const clientsOfNamed = () => server.store.db.prepare<[string], number>("SELECT count(*) FROM clients WHERE user_id = ?").pluck().get(named);
      const atRevocation = clientsOfNamed();
      const statuses = await Promise.all(creates.map(async (res) => (await res).status));
      return { atRevocation, after: clientsOfNamed(), statuses };
    }

    it("writes no client once the caller's client was deleted (401)", async () => {
      const { atRevocation, after, statuses } = await createsAcross((clientId) => server.call("DELETE", `/api/v1/iam/clients/${clientId}`));
      expect(after).toBe(atRevocation);
      expect(statuses).toContain(401);
      expect(statuses.filter((s) => s === 200)).toHaveLength(atRevocation ?? 0);
    });

    it("writes no client once the caller's user was demoted (403)", async () => {
      const { atRevocation, after, statuses } = await createsAcross((_clientId, userId) =>
        server.call("POST", `/api/v1/users/${userId}`, { user: { roles: ["ADMIN"] }, updateMask: "roles" }),
      );
      expect(after).toBe(atRevocation);
      expect(statuses).toContain(403);
    });
  });
});
