import { randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, readdirSync, readlinkSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { ConfigError } from "../src/config.js";
import { dataKeyFilePath } from "../src/webhooks/data-key.js";
import { spawnCli } from "./support/spawn-cli.js";
import { startTestServer, type TestServer } from "./support/test-server.js";
import { createWebhookAutomation, hmacHeaders, postWebhook, type WebhookAutomation } from "./support/webhook-fixtures.js";

/**
 * The data key seals every HMAC listener's secret at rest (README "Operating it": back the key file
 * up with the database). A database restored or moved without it, or started with another key, must
 * stop the start with one line that says so: before this check such a server started, made itself
 * a new key file, and answered every HMAC webhook 500 until someone noticed.
 */

const dirs: string[] = [];
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

function tempDatabase(): string {
  const dir = mkdtempSync(join(tmpdir(), "accessd-data-key-"));
  dirs.push(dir);
  return join(dir, "accessd.db");
}

const body = '{"user":"u-1"}';

/** The files under `prefix` (the database, its -wal and -shm) this process holds open. */
function openFilesUnder(prefix: string): string[] {
  const open: string[] = [];
  for (const fd of readdirSync("/proc/self/fd")) {
    try {
      const target = readlinkSync(`/proc/self/fd/${fd}`);
      if (target.startsWith(prefix)) open.push(target);
    } catch {
      // closed while listing
    }
  }
  return open;
}

/** The listener's endpoint on this server's address (the port changes with each start). */
function endpointOn(server: TestServer, automation: WebhookAutomation): string {
  return `${server.url}/api/v1/webhooks/incoming/${automation.listenerId}`;
}

/** A file database with one HMAC listener and one webhook accepted; the server is stopped again. */
async function databaseWithSecret(): Promise<{ database: string; automation: WebhookAutomation }> {
  const database = tempDatabase();
  const server = await startTestServer({ database });
  try {
    const automation = await createWebhookAutomation(server, { authMethod: "HMAC" });
    expect((await postWebhook(endpointOn(server, automation), hmacHeaders(automation, body), body)).status).toBe(200);
    return { database, automation };
  } finally {
    await server.close();
  }
}

describe("the data key that seals webhook secrets", () => {
  it("stops the start, and creates no key file, when the key file of a database holding secrets is missing; the restored file serves again", async () => {
    const { database, automation } = await databaseWithSecret();
    const keyFile = dataKeyFilePath(database);
    renameSync(keyFile, `${keyFile}.backup`);

    const start = startTestServer({ database });
    await expect(start).rejects.toThrow(ConfigError);
    await expect(start).rejects.toThrow(`ACCESSD_DATA_KEY: not set, and the key file ${keyFile} is missing`);
    expect(existsSync(keyFile)).toBe(false);

    renameSync(`${keyFile}.backup`, keyFile);
    const server = await startTestServer({ database });
    try {
      const answer = await postWebhook(endpointOn(server, automation), hmacHeaders(automation, body), body);
      expect(answer.status).toBe(200);
    } finally {
      await server.close();
    }
  });

  it("stops the start when ACCESSD_DATA_KEY or the key file is not the key that sealed the secrets", async () => {
    const { database } = await databaseWithSecret();
    const keyFile = dataKeyFilePath(database);

    await expect(startTestServer({ database, dataKey: randomBytes(32) })).rejects.toThrow(
      "ACCESSD_DATA_KEY: ACCESSD_DATA_KEY is not the key the database's webhook secrets were sealed with",
    );

    renameSync(keyFile, `${keyFile}.backup`);
    writeFileSync(keyFile, `${randomBytes(32).toString("base64url")}\n`, { mode: 0o600 });
    await expect(startTestServer({ database })).rejects.toThrow(
      `ACCESSD_DATA_KEY: the key file ${keyFile} is not the key the database's webhook secrets were sealed with`,
    );
    // The failed starts closed the database they opened (and the checkpoint thread's connection).
    expect(openFilesUnder(database)).toEqual([]);
    renameSync(`${keyFile}.backup`, keyFile);
    const server = await startTestServer({ database });
    await server.close();
  });

  it("makes a new key file for a database that holds no secret", async () => {
    const database = tempDatabase();
    await (await startTestServer({ database })).close();
    rmSync(dataKeyFilePath(database));
    const server = await startTestServer({ database });
    try {
      expect(existsSync(dataKeyFilePath(database))).toBe(true);
    } finally {
      await server.close();
    }
  });

  it("`accessd serve` exits 2 with one line naming the missing key file", async () => {
    const { database } = await databaseWithSecret();
    rmSync(dataKeyFilePath(database));
    const cli = spawnCli(["serve"], { ACCESSD_DATABASE: database, ACCESSD_PORT: "0" });
    const { code } = await cli.exited;
    expect(code).toBe(2);
    expect(cli.stderr().trim().split("\n")).toEqual([
      `accessd: invalid configuration: ACCESSD_DATA_KEY: not set, and the key file ${dataKeyFilePath(database)} is missing ` +
        "while the database holds webhook secrets sealed with it: restore the key file backed up with the database, " +
        "or set ACCESSD_DATA_KEY to its key",
    ]);
    expect(existsSync(dataKeyFilePath(database))).toBe(false);
  });

  it("answers 503 with Retry-After, never 500 or 401, for a webhook whose stored secret does not open", async () => {
    const server = await startTestServer();
    try {
      const automation = await createWebhookAutomation(server, { authMethod: "HMAC" });
      // The sealed secret altered in the database (no webhook has opened and cached it yet).
      server.store.db.prepare("UPDATE webhook_secrets SET sealed = zeroblob(length(sealed)) WHERE automation_id = ?").run(automation.id);

      const res = await fetch(automation.postUrl, { method: "POST", headers: hmacHeaders(automation, body), body });
      expect(res.status).toBe(503);
      expect(res.headers.get("retry-after")).toBe("5");
      expect(((await res.json()) as { code: string }).code).toBe("unavailable");
      const metrics = await (await fetch(`${server.url}/metrics`)).text();
      expect(metrics).toMatch(/accessd_webhook_verdicts_total\{reason="store_unavailable",status="503"\} 1\b/);
    } finally {
      await server.close();
    }
  });
});
