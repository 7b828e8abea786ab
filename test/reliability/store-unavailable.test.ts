import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createKeyClient, jwtBearer, requestToken, signAssertion, type TokenAnswer } from "../support/auth-helpers.js";
import { startTestServer, type TestServer } from "../support/test-server.js";
import { createWebhookAutomation, hmacHeaders, postWebhook, type WebhookAutomation } from "../support/webhook-fixtures.js";

/**
 * A full disk, made real with SQLite's own limit: `max_page_count` set to the database's current
 * size, so the next write that needs a new page fails with SQLITE_FULL, as it would on a full file
 * system. The store failing is not the request's fault: the answer is 503 UNAVAILABLE with a
 * Retry-After, never a 500, and nothing is half-recorded.
 */
describe("store unavailable (disk full)", () => {
  let dir: string;
  let server: TestServer;
  let hook: WebhookAutomation;
  /** 30 KB of trigger: every acceptance needs new (overflow) pages. */
  const bigBody = (n: number) => JSON.stringify({ n, padding: "x".repeat(30_000) });
  /** No free page left inside the file (VACUUM drops them), and the file may not grow. */
  const fillTheDisk = () => {
    server.store.db.exec("VACUUM");
    server.store.db.pragma(`max_page_count = ${server.store.db.pragma("page_count", { simple: true }) as number}`);
  };
  const freeTheDisk = () => server.store.db.pragma("max_page_count = 1073741823");

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "accessd-store-unavailable-"));
    server = await startTestServer({ database: join(dir, "accessd.db") });
    hook = await createWebhookAutomation(server, { authMethod: "HMAC" });
  });
  afterAll(async () => {
    await server.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it("answers webhooks 503 with Retry-After, still refuses bad ones with their 4xx, and accepts the same event once space is back", async () => {
    fillTheDisk();
    try {
      const body = bigBody(1);
      const headers = hmacHeaders(hook, body);
      const res = await fetch(hook.postUrl, { method: "POST", headers, body });
      expect(res.status).toBe(503);
      expect(res.headers.get("retry-after")).toBe("5");
      expect(res.headers.get("content-type")).toMatch(/^application\/json/);
      expect(await res.json()).toEqual({
        code: "unavailable",
        message: "the store is unavailable (disk full, locked or failing); retry later",
      });

      // A refusal is still a refusal when its delivery-log entry cannot be written (60 entries
      // outgrow the log's last page: the later ones fail with SQLITE_FULL).
      const forged: number[] = [];
      for (let i = 0; i < 60; i++) {
        forged.push((await postWebhook(hook.postUrl, { ...hmacHeaders(hook, body), "Webhook-Signature": "v1,AAAA" }, body)).status);
      }
      expect(new Set(forged)).toEqual(new Set([401]));

      const metrics = await (await fetch(`${server.url}/metrics`)).text();
      expect(metrics).toMatch(/accessd_webhook_verdicts_total\{[^}]*reason="store_unavailable"[^}]*\} 1/);

      // Space again: the sender's retry of the same event is accepted (nothing was recorded) and runs once.
      freeTheDisk();
      const retried = await postWebhook(hook.postUrl, headers, body);
      expect(retried.status).toBe(200);
      await server.worker.whenIdle();
      const listed = await server.call("GET", `/api/v1/automation_executions?automation_id=${hook.id}&page_size=100`);
      const { list } = (await listed.json()) as { list: { eventId: string; state: string }[] };
      expect(list.filter((e) => e.eventId === headers["Webhook-Event-Id"]).map((e) => e.state)).toEqual(["SUCCEEDED"]);
    } finally {
      freeTheDisk();
    }
  });

  it("answers API writes 503 UNAVAILABLE over REST and Connect while the disk is full, and serves them again after", async () => {
    fillTheDisk();
    try {
      // Enough writes to use up the free space left in the pages the database already has.
      let refused: Response | undefined;
      for (let i = 0; i < 200 && refused === undefined; i++) {
        const res = await server.call("POST", "/api/v1/apps", { displayName: `app ${i}`, description: "a".repeat(2_000) });
        if (res.status !== 200) refused = res;
      }
      expect(refused?.status).toBe(503);
      expect(refused?.headers.get("retry-after")).toBe("5");
      expect(await refused?.json()).toEqual({ code: "unavailable", message: "the store is unavailable (disk full, locked or failing); retry later" });

      const connect = await fetch(`${server.url}/svc.api.app.v1.Apps/Create`, {
        method: "POST",
        headers: { ...server.headers, "content-type": "application/json" },
        body: JSON.stringify({ displayName: "b", description: "b".repeat(2_000) }),
      });
      expect(connect.status).toBe(503);
      expect(((await connect.json()) as { code: string }).code).toBe("unavailable");

      // Reads need no new page: they go on.
      expect((await server.call("GET", "/api/v1/apps?page_size=1")).status).toBe(200);

      // Readiness stays: reads and refusals go on (README, "Probes").
      expect((await fetch(`${server.url}/readyz`)).status).toBe(200);
    } finally {
      freeTheDisk();
    }
    expect((await server.call("POST", "/api/v1/apps", { displayName: "after" })).status).toBe(200);
  });

  it("answers the token endpoint's private_key_jwt grant (which records the assertion's jti) with an RFC 6749 503", async () => {
    const { clientId, key } = await createKeyClient(server);
    const tokenUrl = `${server.config.baseUrl}/auth/v1/token`;
    const grant = async () => ({
      grant_type: "client_credentials",
      client_id: clientId,
      client_assertion_type: jwtBearer,
      client_assertion: await signAssertion(key, clientId, tokenUrl, Date.now(), { jti: `${"j".repeat(230)}${Math.random()}` }),
    });
    fillTheDisk();
    try {
      // Long jti values (at most 256 characters) fill the free space left in the pages the database already has.
      let refused: TokenAnswer | undefined;
      for (let i = 0; i < 2_000 && refused === undefined; i++) {
        const answer = await requestToken(server, await grant());
        if (answer.status !== 200) refused = answer;
      }
      expect(refused?.status).toBe(503);
      expect(refused?.headers.get("retry-after")).toBe("5");
      expect(refused?.headers.get("cache-control")).toBe("no-store");
      expect(refused?.body).toEqual({
        error: "temporarily_unavailable",
        error_description: "the store is unavailable (disk full, locked or failing); retry later",
      });
    } finally {
      freeTheDisk();
    }
    expect((await requestToken(server, await grant())).status).toBe(200);
  });
});
