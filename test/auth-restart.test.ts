import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { ensureBootstrapClient } from "../src/auth/bootstrap.js";
import { verifySecret } from "../src/auth/client-secret.js";
import { systemClock } from "../src/clock.js";
import { Store } from "../src/store/store.js";
import { spawnCli } from "./support/spawn-cli.js";
import { requestToken } from "./support/auth-helpers.js";
import { startTestServer, testBootstrapClient } from "./support/test-server.js";

const dir = mkdtempSync(join(tmpdir(), "accessd-auth-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("tokens across a restart", () => {
  it("keeps issued tokens valid after a restart on the same database file", async () => {
    const database = join(dir, "restart.db");
    const first = await startTestServer({ database });
    const headers = { ...first.headers };
    expect((await first.call("POST", "/api/v1/apps", { displayName: "before restart" })).status).toBe(200);
    await first.close();

    const second = await startTestServer({ database });
    try {
      const res = await fetch(`${second.url}/api/v1/apps`, { headers });
      expect(res.status).toBe(200);
      const body = (await res.json()) as { list: { displayName: string }[] };
      expect(body.list.map((a) => a.displayName)).toEqual(["before restart"]);
      // The bootstrap client was kept, not re-created: exactly one client.
      const clients = (await (await second.call("GET", "/api/v1/iam/clients")).json()) as { list: { id: string }[] };
      expect(clients.list.map((c) => c.id)).toEqual([testBootstrapClient.clientId]);
    } finally {
      await second.close();
    }
  });

  it("refuses the tokens of another installation (another signing key)", async () => {
    const a = await startTestServer({ database: join(dir, "a.db") });
    const b = await startTestServer({ database: join(dir, "b.db") });
    try {
      const res = await fetch(`${b.url}/api/v1/apps`, { headers: a.headers });
      expect(res.status).toBe(401);
      expect(((await res.json()) as { message: string }).message).toBe("token was not signed by this service");
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });
});

describe("accessd bootstrap", () => {
  it("prints a new Super Admin client's credentials once, and they get a token with that role", async () => {
    const database = join(dir, "cli.db");
    const cli = spawnCli(["bootstrap"], { ACCESSD_DATABASE: database, ACCESSD_LOG_LEVEL: "silent" });
    const { code } = await cli.exited;
    expect(code).toBe(0);
    const printed = JSON.parse(cli.stdout().trim()) as { client_id: string; client_secret: string; user_id: string };
    expect(printed.client_secret).toMatch(/^[\w-]{43}$/);
    expect(cli.stderr()).toContain("not shown again");

    const server = await startTestServer({ database, bootstrapClient: undefined });
    try {
      const answer = await requestToken(server, {
        grant_type: "client_credentials",
        client_id: printed.client_id,
        client_secret: printed.client_secret,
      });
      expect(answer.status).toBe(200);
      const headers = { authorization: `Bearer ${String(answer.body.access_token)}` };
      const clients = await fetch(`${server.url}/api/v1/iam/clients`, { headers });
      expect(clients.status).toBe(200);
      const text = await clients.text();
      expect(text).toContain(printed.client_id);
      expect(text).not.toContain(printed.client_secret);
      const user = (await (await fetch(`${server.url}/api/v1/users/${printed.user_id}`, { headers })).json()) as {
        user: { roles: string[] };
      };
      expect(user.user.roles).toEqual(["SUPER_ADMIN"]);
    } finally {
      await server.close();
    }
  });
});

describe("ACCESSD_BOOTSTRAP_CLIENT_SECRET changed for an existing client", () => {
  it("keeps the client's secret and says the variable's was not used (a rotation through the environment does not happen)", async () => {
    const store = Store.open(":memory:");
    try {
      const given = { clientId: "ops-admin", clientSecret: "first-secret-first-secret" };
      expect(await ensureBootstrapClient(store, systemClock, given)).toBe("created");
      expect(await ensureBootstrapClient(store, systemClock, given)).toBe("exists");
      expect(await ensureBootstrapClient(store, systemClock, { ...given, clientSecret: "second-secret-second-secret" })).toBe("secret-differs");
      expect(await verifySecret(given.clientSecret, store.clients.get("ops-admin")?.secretHash ?? "")).toBe(true);
    } finally {
      await store.close();
    }
  });
});

describe("a bootstrap client deleted from its database", () => {
  it("is not created again by a start whose ACCESSD_BOOTSTRAP_CLIENT_SECRET is the secret it had, and is with a new one", async () => {
    const store = Store.open(":memory:");
    try {
      const leaked = { clientId: "ops-admin", clientSecret: "leaked-secret-leaked-secret" };
      expect(await ensureBootstrapClient(store, systemClock, leaked)).toBe("created");
      store.clients.delete("ops-admin"); // revoked through Clients.Delete
      // The next start (a crash, a deploy) with the variables unchanged: it stays revoked.
      expect(await ensureBootstrapClient(store, systemClock, leaked)).toBe("deleted");
      expect(store.clients.get("ops-admin")).toBeUndefined();
      // With a new secret it is created again, under that secret only.
      const rotated = { ...leaked, clientSecret: "rotated-secret-rotated-secret" };
      expect(await ensureBootstrapClient(store, systemClock, rotated)).toBe("created");
      expect(await verifySecret(rotated.clientSecret, store.clients.get("ops-admin")?.secretHash ?? "")).toBe(true);
      expect(await ensureBootstrapClient(store, systemClock, rotated)).toBe("exists");
      // Revoked again, then the configuration rolled back to the first leaked secret: still revoked.
      store.clients.delete("ops-admin");
      expect(await ensureBootstrapClient(store, systemClock, leaked)).toBe("deleted");
      expect(await ensureBootstrapClient(store, systemClock, rotated)).toBe("deleted");
      expect(store.clients.get("ops-admin")).toBeUndefined();
    } finally {
      await store.close();
    }
  });

  it("stops the start with a message naming the settings entry when that entry was altered", async () => {
    const store = Store.open(":memory:");
    try {
      store.settings.put("bootstrap-client-secret-hashes:ops-admin", Buffer.from("$scrypt$not-json"));
      await expect(ensureBootstrapClient(store, systemClock, { clientId: "ops-admin", clientSecret: "some-secret-some-secret" })).rejects.toThrow(
        "the settings entry bootstrap-client-secret-hashes:ops-admin is not a JSON array of secret hashes",
      );
    } finally {
      await store.close();
    }
  });

  it("stays revoked when it was bootstrapped by a build that kept no record of its secret (the record is made at the next start)", async () => {
    const store = Store.open(":memory:");
    try {
      const given = { clientId: "ops-admin", clientSecret: "older-build-secret-older-build" };
      expect(await ensureBootstrapClient(store, systemClock, given)).toBe("created");
      // As an older build left it: the client, no record of its secret.
      store.db.prepare("DELETE FROM settings WHERE name = ?").run("bootstrap-client-secret-hashes:ops-admin");
      expect(await ensureBootstrapClient(store, systemClock, given)).toBe("exists");
      store.clients.delete("ops-admin");
      expect(await ensureBootstrapClient(store, systemClock, given)).toBe("deleted");
    } finally {
      await store.close();
    }
  });
});
