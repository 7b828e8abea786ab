import BetterSqlite3 from "better-sqlite3";
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { join } from "node:path";
import { FailureLimiter } from "../src/auth/failure-limiter.js";
import { FamiliarAddresses } from "../src/auth/familiar-addresses.js";
import { ManualClock } from "../src/clock.js";
import { Store } from "../src/store/store.js";
import { scratch } from "./support/scratch.js";
import { requestToken, type TokenAnswer } from "./support/auth-helpers.js";
import { startTestServer, testBootstrapClient, type TestServer } from "./support/test-server.js";

const clock = new ManualClock(Date.parse("2026-03-01T12:00:00Z"));
const { tempDir } = scratch("accessd-limiter-");
// The limiter's window is a minute: each test starts with none of the others' failures.
afterEach(() => clock.advance(61_000));

const wrong = { grant_type: "client_credentials", client_id: testBootstrapClient.clientId, client_secret: "guess" };
const right = { ...wrong, client_secret: testBootstrapClient.clientSecret };

function countStatuses(answers: readonly TokenAnswer[]): Record<number, number> {
  const counts: Record<number, number> = {};
  for (const { status } of answers) counts[status] = (counts[status] ?? 0) + 1;
  return counts;
}

describe("FailureLimiter", () => {
  it("counts an attempt from its admission, frees its place on release and keeps it on failure", () => {
    const limiter = new FailureLimiter({ maxFailures: 3, windowMs: 60_000, clock });
    const admit = () => limiter.admit(["k"]);
    const attempts = [admit(), admit(), admit()];
    expect(attempts.map((a) => a.admitted)).toEqual([true, true, true]);
    expect(admit()).toEqual({ admitted: false, retryAfterSeconds: 1 }); // three in flight, none settled
    const [first, second, third] = attempts;
    if (!first?.admitted || !second?.admitted || !third?.admitted) throw new Error("not admitted");
    first.attempt.release();
    first.attempt.fail(); // settled already: no effect
    const fourth = admit();
    if (!fourth.admitted) throw new Error("not admitted after a release");
    for (const a of [second, third, fourth]) {
      a.attempt.fail();
      a.attempt.release(); // a failure stays counted
    }
    expect(admit()).toEqual({ admitted: false, retryAfterSeconds: 60 });
    clock.advance(60_000);
    expect(admit().admitted).toBe(true);
  });
});

describe("FailureLimiter when the clock steps back", () => {
  it("forgets failures stamped after the clock's new time, instead of refusing for the step's length (a day back: Retry-After 86460)", () => {
    const stepped = new ManualClock(Date.parse("2026-03-02T12:00:00Z"));
    const limiter = new FailureLimiter({ maxFailures: 3, windowMs: 60_000, clock: stepped });
    for (let i = 0; i < 3; i++) {
      const admission = limiter.admit(["k"]);
      if (!admission.admitted) throw new Error("not admitted");
      admission.attempt.fail();
    }
    expect(limiter.admit(["k"])).toEqual({ admitted: false, retryAfterSeconds: 60 });
    stepped.advance(-86_400_000);
    expect(limiter.admit(["k"]).admitted).toBe(true);
  });
});

describe("POST /auth/v1/token under parallel guessing", () => {
  let server: TestServer;
  beforeAll(async () => {
    // Trusted proxy: requests without X-Forwarded-For come from 127.0.0.1, the others from its address.
    server = await startTestServer({ trustedProxies: ["127.0.0.1/32"] }, { clock });
  });
  afterAll(() => server.close());

  it("lets only ten of 300 parallel wrong secrets for one client id be tried, and the right one waits after them", async () => {
    // Each from an address of its own, none the client ever got a token from: the client id's limit alone.
    const from = (i: number) => ({ "x-forwarded-for": `10.1.${i >> 8}.${i & 255}` });
    const answers = await Promise.all(Array.from({ length: 300 }, (_, i) => requestToken(server, wrong, "form", from(i))));
    expect(countStatuses(answers)).toEqual({ 401: 10, 429: 290 });
    for (const answer of answers.filter((a) => a.status === 429)) {
      expect(answer.body.error).toBe("slow_down");
      expect(Number(answer.headers.get("retry-after"))).toBeGreaterThan(0);
    }
    expect((await requestToken(server, right, "form", from(300))).status).toBe(429);
    clock.advance(61_000);
    expect((await requestToken(server, right, "form", from(300))).status).toBe(200);
  });

  it("lets only ten of 300 parallel guesses from one address be tried, whatever their client ids", async () => {
    const answers = await Promise.all(Array.from({ length: 300 }, (_, i) => requestToken(server, { ...wrong, client_id: `unknown-${i}` })));
    expect(countStatuses(answers)).toEqual({ 401: 10, 429: 290 });
  });

  it("lets parallel requests that succeed through: their places are freed when they do", async () => {
    for (let round = 0; round < 3; round++) {
      const answers = await Promise.all(Array.from({ length: 10 }, () => requestToken(server, right)));
      expect(countStatuses(answers)).toEqual({ 200: 10 });
    }
  });

  it("refuses a client_id longer than any client's as an unknown client, without a limit of its own", async () => {
    const longId = "x".repeat(129);
    const from = (i: number) => ({ "x-forwarded-for": `203.0.113.${i}` });
    // Eleven failures for one id, each from another address: a real client id would be locked
    // at the eleventh; this one gets no key (a key per made-up id would fill the memory).
    for (let i = 0; i < 11; i++) {
      const answer = await requestToken(server, { ...wrong, client_id: longId }, "form", from(i));
      expect(answer.status).toBe(401);
      expect(answer.body).toEqual({ error: "invalid_client", error_description: "unknown client or wrong client_secret" });
    }
    // It counts against the source address, as any failure does.
    for (let i = 0; i < 9; i++) expect((await requestToken(server, { ...wrong, client_id: longId.repeat(100) }, "form", from(0))).status).toBe(401);
    expect((await requestToken(server, { ...wrong, client_id: longId }, "form", from(0))).status).toBe(429);
  });
});

describe("POST /auth/v1/token behind a reverse proxy", () => {
  it("counts failures per X-Forwarded-For address when the peer is a trusted proxy", async () => {
    const server = await startTestServer({ trustedProxies: ["127.0.0.1/32"] }, { clock });
    try {
      const from = (address: string) => ({ "x-forwarded-for": address });
      for (let i = 0; i < 10; i++) {
        expect((await requestToken(server, { ...wrong, client_id: `unknown-${i}` }, "form", from("203.0.113.7"))).status).toBe(401);
      }
      expect((await requestToken(server, { ...wrong, client_id: "unknown-10" }, "form", from("203.0.113.7"))).status).toBe(429);
      // Another client behind the same proxy is not locked out by the first one's failures.
      expect((await requestToken(server, right, "form", from("198.51.100.9"))).status).toBe(200);
    } finally {
      await server.close();
    }
  });

  it("does not lock a client out from an address it got a token from lately, however many failures others cause for its id", async () => {
    const server = await startTestServer({ trustedProxies: ["127.0.0.1/32"] }, { clock });
    try {
      const from = (address: string) => ({ "x-forwarded-for": address });
      expect((await requestToken(server, right, "form", from("198.51.100.20"))).status).toBe(200);
      // Someone who knows the client id (a bootstrap client's is in its user's username) fails
      // for it from ten addresses: the client id's limit is reached.
      for (let i = 0; i < 10; i++) expect((await requestToken(server, wrong, "form", from(`203.0.113.${50 + i}`))).status).toBe(401);
      // From an address the client never got a token from, even the right secret waits.
      expect((await requestToken(server, right, "form", from("203.0.113.99"))).status).toBe(429);
      // From its own address it is not locked out...
      expect((await requestToken(server, right, "form", from("198.51.100.20"))).status).toBe(200);
      // ...while that address's own limit holds: guessing from it is no faster.
      for (let i = 0; i < 10; i++) expect((await requestToken(server, wrong, "form", from("198.51.100.20"))).status).toBe(401);
      expect((await requestToken(server, right, "form", from("198.51.100.20"))).status).toBe(429);
      clock.advance(61_000);
      expect((await requestToken(server, right, "form", from("198.51.100.20"))).status).toBe(200);
      // Familiar for 30 days after its last token, not longer.
      clock.advance(30 * 24 * 60 * 60 * 1000);
      for (let i = 0; i < 10; i++) expect((await requestToken(server, wrong, "form", from(`203.0.113.${70 + i}`))).status).toBe(401);
      expect((await requestToken(server, right, "form", from("198.51.100.20"))).status).toBe(429);
    } finally {
      await server.close();
    }
  });

  it("remembers a client's addresses across a restart, and at most 64 a client (one client's tokens cannot push out another's)", async () => {
    const database = join(tempDir(), "accessd.db");
    const from = (address: string) => ({ "x-forwarded-for": address });
    const first = await startTestServer({ database, trustedProxies: ["127.0.0.1/32"] }, { clock });
    try {
      expect((await requestToken(first, right, "form", from("198.51.100.30"))).status).toBe(200);
    } finally {
      await first.close();
    }
    const second = await startTestServer({ database, trustedProxies: ["127.0.0.1/32"] }, { clock });
    try {
      for (let i = 0; i < 10; i++) expect((await requestToken(second, wrong, "form", from(`203.0.113.${100 + i}`))).status).toBe(401);
      expect((await requestToken(second, right, "form", from("203.0.113.120"))).status).toBe(429);
      expect((await requestToken(second, right, "form", from("198.51.100.30"))).status).toBe(200);
    } finally {
      await second.close();
    }

    const store = Store.open(":memory:");
    try {
      const familiar = new FamiliarAddresses(store, clock);
      familiar.remember("ops-admin", "198.51.100.1");
      for (let i = 0; i < 100; i++) {
        clock.advance(1);
        familiar.remember("another-client", `192.0.2.${i}`);
      }
      expect(familiar.has("ops-admin", "198.51.100.1")).toBe(true);
      expect(familiar.has("another-client", "192.0.2.99")).toBe(true);
      expect(familiar.has("another-client", "192.0.2.35")).toBe(false); // its 65th most recent
      const addressesOf = (client: string) => store.db.prepare("SELECT count(*) FROM client_token_addresses WHERE client_id = ?").pluck().get(client);
      expect(addressesOf("another-client")).toBe(64);
      // One more in the same millisecond as the last, sorting after every other: kept, not trimmed at once.
      familiar.remember("another-client", "ffff::1");
      expect(familiar.has("another-client", "ffff::1")).toBe(true);
      expect(addressesOf("another-client")).toBe(64);
      store.clients.delete("another-client");
      expect(familiar.has("another-client", "192.0.2.99")).toBe(false);
    } finally {
      await store.close();
    }
  });

  it("still issues the token when the store cannot note its address, and housekeeping forgets addresses unused for 30 days", async () => {
    const server = await startTestServer({ trustedProxies: ["127.0.0.1/32"] }, { clock });
    try {
      const from = (address: string) => ({ "x-forwarded-for": address });
      const full = vi.spyOn(server.store.clients, "noteTokenFrom").mockImplementationOnce(() => {
        throw new BetterSqlite3.SqliteError("database or disk is full", "SQLITE_FULL");
      });
      expect((await requestToken(server, right, "form", from("198.51.100.40"))).status).toBe(200);
      expect(full).toHaveBeenCalledTimes(1);
      expect(server.store.clients.lastTokenFrom(testBootstrapClient.clientId, "198.51.100.40")).toBeUndefined();
      full.mockRestore();

      expect((await requestToken(server, right, "form", from("198.51.100.41"))).status).toBe(200);
      clock.advance(30 * 24 * 60 * 60 * 1000 - 1);
      expect((await server.housekeeping.runOnce()).tokenAddresses).toBe(0);
      clock.advance(1);
      // The test's own token (127.0.0.1) and 198.51.100.41, both 30 days old.
      expect((await server.housekeeping.runOnce()).tokenAddresses).toBe(2);
      expect(server.store.clients.lastTokenFrom(testBootstrapClient.clientId, "198.51.100.41")).toBeUndefined();
    } finally {
      await server.close();
    }
  });

  it("ignores X-Forwarded-For from a peer that is not a trusted proxy", async () => {
    const server = await startTestServer({}, { clock });
    try {
      for (let i = 0; i < 10; i++) {
        const forged = { "x-forwarded-for": `203.0.113.${i}` };
        expect((await requestToken(server, { ...wrong, client_id: `unknown-${i}` }, "form", forged)).status).toBe(401);
      }
      const answer = await requestToken(server, { ...wrong, client_id: "unknown-10" }, "form", { "x-forwarded-for": "198.51.100.9" });
      expect(answer.status).toBe(429);
    } finally {
      await server.close();
    }
  });
});
