import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { SignJWT, importJWK, type JWK } from "jose";
import { afterAll, describe, expect, it } from "vitest";
import { AccessTokens, isIssuedToClientRecord } from "../src/auth/access-tokens.js";
import { createSuperAdminClient } from "../src/auth/bootstrap.js";
import { ManualClock } from "../src/clock.js";
import { SecretCipher } from "../src/store/secret-cipher.js";
import { signingKeyAssociatedData } from "../src/store/signing-keys-repository.js";
import { Store } from "../src/store/store.js";
import { startTestServer, testBootstrapClient, type TestServer } from "./support/test-server.js";

const dir = mkdtempSync(join(tmpdir(), "accessd-recreated-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const gone = { code: "unauthenticated", message: "the client of this token no longer exists" };

async function listApps(server: TestServer, authorization: string): Promise<{ status: number; body: unknown }> {
  const res = await fetch(`${server.url}/api/v1/apps`, { headers: { authorization } });
  return { status: res.status, body: await res.json() };
}

describe("a client deleted and re-created with the same id", () => {
  it("refuses the deleted bootstrap client's tokens after a restart re-creates it, in the same second, with a new secret", async () => {
    const clock = new ManualClock(Date.parse("2026-03-01T12:00:00.000Z"));
    const database = join(dir, "bootstrap.db");
    const first = await startTestServer({ database }, { clock });
    const oldToken = first.headers.authorization ?? "";
    try {
      expect((await listApps(first, oldToken)).status).toBe(200);
      const deleted = await first.call("DELETE", `/api/v1/iam/clients/${testBootstrapClient.clientId}`);
      expect(deleted.status).toBe(200);
      expect(await listApps(first, oldToken)).toEqual({ status: 401, body: gone });
    } finally {
      await first.close();
    }

    // One millisecond later: the new client, its new token and the old token share a second (iat).
    clock.advance(1);
    const bootstrapClient = { clientId: testBootstrapClient.clientId, clientSecret: "another-bootstrap-secret-0123456789" };
    const second = await startTestServer({ database, bootstrapClient }, { clock });
    try {
      expect(await listApps(second, oldToken)).toEqual({ status: 401, body: gone });
      expect((await listApps(second, second.headers.authorization ?? "")).status).toBe(200);
    } finally {
      await second.close();
    }
  });

  it("refuses the old tokens when the client is re-created while the server runs (its principal was cached)", async () => {
    const clock = new ManualClock(Date.parse("2026-03-01T12:00:00.000Z"));
    const server = await startTestServer({}, { clock });
    try {
      const oldToken = server.headers.authorization ?? "";
      expect((await listApps(server, oldToken)).status).toBe(200); // the principal is now cached
      server.store.clients.delete(testBootstrapClient.clientId);
      clock.advance(1);
      const recreated = await createSuperAdminClient(server.store, clock, { clientId: testBootstrapClient.clientId });
      expect(await listApps(server, oldToken)).toEqual({ status: 401, body: gone });
      const newToken = await server.fetchToken(recreated.clientId, recreated.clientSecret);
      expect((await listApps(server, `Bearer ${newToken}`)).status).toBe(200);
    } finally {
      await server.close();
    }
  });
});

const baseUrl = "http://localhost:8080";

/**
 * Signs a token for client c1 with the service's own signing key in `store`, as a release that
 * issued other claims did, or as someone holding a copy of the database and its data key would.
 */
async function signWithServiceKey(store: Store, cipher: SecretCipher, claims: { iat: number; exp: number; jti?: string }): Promise<string> {
  const [stored] = store.signingKeys.all();
  if (stored?.sealedPrivateJwk === undefined) throw new Error("no sealed signing key");
  const privateJwk = JSON.parse(cipher.open(stored.sealedPrivateJwk, signingKeyAssociatedData(stored.kid)).toString("utf8")) as JWK;
  const token = new SignJWT({ client_id: "c1" })
    .setProtectedHeader({ alg: "EdDSA", typ: "at+jwt", kid: stored.kid })
    .setIssuer(baseUrl)
    .setAudience(baseUrl)
    .setSubject("c1")
    .setIssuedAt(claims.iat)
    .setExpirationTime(claims.exp);
  if (claims.jti !== undefined) token.setJti(claims.jti);
  return token.sign(await importJWK(privateJwk, "EdDSA"));
}

describe("tokens issued before they named their client record", () => {
  it("are refused when issued in a second before the record's creation, and accepted from that second on", async () => {
    const clock = new ManualClock(Date.parse("2026-03-01T12:00:00.500Z"));
    const store = Store.open(":memory:");
    try {
      const cipher = new SecretCipher(randomBytes(32));
      const tokens = await AccessTokens.load(store, { baseUrl, ttlMs: 3_600_000, clock, cipher });
      // A token as the previous release issued them: no client_created_at claim.
      const now = Math.floor(clock.now() / 1000);
      const legacy = await signWithServiceKey(store, cipher, { iat: now, exp: now + 3600, jti: "legacy" });
      const verified = await tokens.verify(legacy);
      expect(verified).toEqual({ clientId: "c1", clientCreatedAt: undefined, issuedAt: Math.floor(clock.now() / 1000) });
      expect(isIssuedToClientRecord(verified, clock.now() - 500)).toBe(true); // created at the start of the token's second
      expect(isIssuedToClientRecord(verified, clock.now() + 499)).toBe(true); // later in that second: cannot tell
      expect(isIssuedToClientRecord(verified, clock.now() + 500)).toBe(false); // created in the next second
    } finally {
      await store.close();
    }
  });
});

describe("an access token's lifetime", () => {
  it("is at most ACCESSD_TOKEN_TTL from its iat, whatever its exp says, and a token issued in the future is refused", async () => {
    const start = Date.parse("2026-03-01T12:00:00.000Z");
    const clock = new ManualClock(start);
    const store = Store.open(":memory:");
    try {
      const cipher = new SecretCipher(randomBytes(32));
      const tokens = await AccessTokens.load(store, { baseUrl, ttlMs: 3_600_000, clock, cipher });
      // Signed with the service's own key, as by someone holding a copy of the database and its key file.
      const minted = (iat: number, exp: number) => signWithServiceKey(store, cipher, { iat, exp });
      const now = start / 1000;
      const tenYears = await minted(now, now + 10 * 365 * 86_400);
      expect((await tokens.verify(tenYears)).clientId).toBe("c1");
      clock.advance(3_600_000);
      // Cached with the end the TTL gives it, so verified again now, and refused.
      await expect(tokens.verify(tenYears)).rejects.toThrow("token is older than ACCESSD_TOKEN_TTL");
      const later = clock.now() / 1000;
      await expect(tokens.verify(await minted(later + 3_600, later + 7_200))).rejects.toThrow("token was issued in the future");
      expect((await tokens.verify(await minted(later + 30, later + 3_600))).clientId).toBe("c1"); // a clock stepped back a little

      // A TTL lowered since: the tokens issued under the longer one end at the new TTL.
      const issued = await tokens.issue({ id: "c1", createdAt: clock.now() });
      const shorter = await AccessTokens.load(store, { baseUrl, ttlMs: 600_000, clock, cipher });
      expect((await shorter.verify(issued.accessToken)).clientId).toBe("c1");
      clock.advance(600_000);
      await expect(shorter.verify(issued.accessToken)).rejects.toThrow("token is older than ACCESSD_TOKEN_TTL");
      expect((await tokens.verify(issued.accessToken)).clientId).toBe("c1");
    } finally {
      await store.close();
    }
  });
});
