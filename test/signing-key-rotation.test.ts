import { join } from "node:path";
import { decodeProtectedHeader } from "jose";
import { describe, expect, it } from "vitest";
import { rotateSigningKey } from "../src/auth/signing-key-rotation.js";
import { ManualClock } from "../src/clock.js";
import { DatabaseInUseError } from "../src/store/serving-lock.js";
import { Store } from "../src/store/store.js";
import { scratch } from "./support/scratch.js";
import { spawnCli } from "./support/spawn-cli.js";
import { startTestServer, testBootstrapClient } from "./support/test-server.js";

/**
 * `accessd rotate-signing-key` (README "Authentication and roles"): the key that signs access
 * tokens is replaced, with the server stopped. Tokens signed by the old key stay good until they
 * expire, and the old key is deleted a day (the longest token lifetime) after; with
 * `--end-old-tokens` (a key that leaked) every token issued before is refused at once.
 */

const { tempDir } = scratch("accessd-rotate-signing-");
const day = 24 * 60 * 60 * 1000;

function listApps(url: string, authorization: string): Promise<number> {
  return fetch(`${url}/api/v1/apps`, { headers: { authorization } }).then((res) => res.status);
}

function kidOf(authorization: string): string | undefined {
  return decodeProtectedHeader(authorization.replace(/^Bearer /, "")).kid;
}

/** A file database a server has run on once; the token it issued then. */
async function databaseWithToken(clock: ManualClock): Promise<{ database: string; oldToken: string }> {
  const database = join(tempDir(), "accessd.db");
  const server = await startTestServer({ database }, { clock });
  try {
    return { database, oldToken: server.headers.authorization ?? "" };
  } finally {
    await server.close();
  }
}

async function storedKids(database: string): Promise<string[]> {
  const store = Store.open(database);
  try {
    return store.signingKeys.all().map((key) => key.kid);
  } finally {
    await store.close();
  }
}

describe("accessd rotate-signing-key", () => {
  it("signs with the new key from the next start, keeps the old tokens good until they expire, and deletes the old key a day later", async () => {
    const clock = new ManualClock(Date.parse("2026-03-01T12:00:00Z"));
    const { database, oldToken } = await databaseWithToken(clock);
    const oldKid = kidOf(oldToken);
    const rotation = await rotateSigningKey(database, { dataKey: undefined, endOldTokens: false, clock });
    expect(rotation).toEqual({ kid: expect.any(String), previousKids: [oldKid], endedOldTokens: false });

    const server = await startTestServer({ database }, { clock });
    try {
      expect(kidOf(server.headers.authorization ?? "")).toBe(rotation.kid);
      expect(await listApps(server.url, oldToken)).toBe(200);
    } finally {
      await server.close();
    }
    expect(await storedKids(database)).toEqual([oldKid, rotation.kid]);

    // A day after the rotation no token the old key signed can be good: the next start deletes it.
    clock.advance(day + 1);
    const later = await startTestServer({ database }, { clock });
    try {
      expect(await listApps(later.url, later.headers.authorization ?? "")).toBe(200);
    } finally {
      await later.close();
    }
    expect(await storedKids(database)).toEqual([rotation.kid]);
  });

  it("makes the new key the newest even when run with a clock behind the current key's (it would never sign, and be deleted as retired)", async () => {
    const clock = new ManualClock(Date.parse("2026-03-01T12:00:00Z"));
    const { database } = await databaseWithToken(clock);
    const behind = new ManualClock(clock.now() - 10 * 60 * 1000);
    const rotation = await rotateSigningKey(database, { dataKey: undefined, endOldTokens: false, clock: behind });
    clock.advance(day + 1);
    const server = await startTestServer({ database }, { clock });
    try {
      expect(kidOf(server.headers.authorization ?? "")).toBe(rotation.kid);
    } finally {
      await server.close();
    }
    expect(await storedKids(database)).toEqual([rotation.kid]);
  });

  it("with --end-old-tokens deletes the old keys at once: every token issued before is refused", async () => {
    const clock = new ManualClock(Date.parse("2026-03-01T12:00:00Z"));
    const { database, oldToken } = await databaseWithToken(clock);
    const rotation = await rotateSigningKey(database, { dataKey: undefined, endOldTokens: true, clock });
    expect(await storedKids(database)).toEqual([rotation.kid]);
    const server = await startTestServer({ database }, { clock });
    try {
      expect(await listApps(server.url, oldToken)).toBe(401);
      const fresh = await server.fetchToken(testBootstrapClient.clientId, testBootstrapClient.clientSecret);
      expect(await listApps(server.url, `Bearer ${fresh}`)).toBe(200);
    } finally {
      await server.close();
    }
  });

  it("is refused while a server uses the database, and as a command prints what it did (JSON)", async () => {
    const clock = new ManualClock(Date.parse("2026-03-01T12:00:00Z"));
    const { database } = await databaseWithToken(clock);
    const server = await startTestServer({ database }, { clock });
    try {
      await expect(rotateSigningKey(database, { dataKey: undefined, endOldTokens: false, clock })).rejects.toBeInstanceOf(DatabaseInUseError);
    } finally {
      await server.close();
    }
    const [before] = await storedKids(database);
    const cli = spawnCli(["rotate-signing-key", "--end-old-tokens"], { ACCESSD_DATABASE: database });
    expect((await cli.exited).code).toBe(0);
    const printed = JSON.parse(cli.stdout()) as { kid: string; previousKids: string[]; endedOldTokens: boolean };
    expect(printed).toEqual({ kid: expect.any(String), previousKids: [before], endedOldTokens: true });
    expect(cli.stderr()).toContain("every token issued before is refused");
    expect(await storedKids(database)).toEqual([printed.kid]);
  });
});
