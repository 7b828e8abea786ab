import { randomBytes } from "node:crypto";
import { existsSync, linkSync, readdirSync, readFileSync, readlinkSync, renameSync, rmSync, statSync, utimesSync, writeFileSync } from "node:fs";
import { execFileSync } from "node:child_process";
import { basename, dirname, join } from "node:path";
import BetterSqlite3 from "better-sqlite3";
import { describe, expect, it } from "vitest";
import { ConfigError } from "../src/config.js";
import { dataKeyFilePath, resolveDataKey } from "../src/store/data-key.js";
import { SecretCipher } from "../src/store/secret-cipher.js";
import { scratch } from "./support/scratch.js";
import { spawnCli } from "./support/spawn-cli.js";
import { startTestServer, type TestServer } from "./support/test-server.js";
import { createWebhookAutomation, hmacHeaders, postWebhook, type WebhookAutomation } from "./support/webhook-fixtures.js";

/**
 * The data key seals secrets at rest: every HMAC listener's secret and the service's own token
 * signing key (README "Operating it": back the key file up with the database). A database restored
 * or moved without it, or started with another key, must stop the start with one line that says
 * so: before, such a server started, made itself a new key file, and answered every HMAC webhook
 * 500 until someone noticed; and the signing key sat in the database in clear, so a copy of the
 * database alone could mint access tokens.
 */

const { tempDir } = scratch("accessd-data-key-");
const tempDatabase = () => join(tempDir(), "accessd.db");

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

/** Opens the database file directly (no accessd), runs `use`, closes it. */
function withRawDatabase<T>(database: string, use: (db: BetterSqlite3.Database) => T): T {
  const db = new BetterSqlite3(database);
  try {
    return use(db);
  } finally {
    db.close();
  }
}

/** Starts a server on `database` again and makes an API call with a token issued before. */
async function expectTokenAcceptedAfterRestart(database: string, authorization: string): Promise<void> {
  const server = await startTestServer({ database });
  try {
    expect((await fetch(`${server.url}/api/v1/apps`, { headers: { authorization } })).status).toBe(200);
  } finally {
    await server.close();
  }
}

describe("resolveDataKey", () => {
  it("creates a 0600 key file beside a new database and reads it back", () => {
    const db = tempDatabase();
    const { cipher, source } = resolveDataKey(undefined, db, { holdsSealedSecrets: false });
    expect(source).toBe(`the key file ${dataKeyFilePath(db)}`);
    expect(statSync(dataKeyFilePath(db)).mode & 0o777).toBe(0o600);
    const fromFile = new SecretCipher(Buffer.from(readFileSync(dataKeyFilePath(db), "utf8").trim(), "base64url"));
    const again = resolveDataKey(undefined, db, { holdsSealedSecrets: true }).cipher;
    expect(fromFile.opens(cipher.seal(Buffer.from("x"), "t"), "t")).toBe(true);
    expect(again.opens(cipher.seal(Buffer.from("x"), "t"), "t")).toBe(true);
  });

  it("reads an existing key file without writing anything (a full disk, a folder it cannot write: the start still reads its key)", (context) => {
    const db = tempDatabase();
    const first = resolveDataKey(undefined, db, { holdsSealedSecrets: false }).cipher;
    const folder = dirname(db);
    try {
      execFileSync("chattr", ["+i", folder], { stdio: "ignore" }); // no new file in it, even for root
    } catch {
      context.skip(); // no CAP_LINUX_IMMUTABLE, or a file system without the flag
    }
    try {
      const again = resolveDataKey(undefined, db, { holdsSealedSecrets: true }).cipher;
      expect(again.opens(first.seal(Buffer.from("x"), "t"), "t")).toBe(true);
    } finally {
      execFileSync("chattr", ["-i", folder], { stdio: "ignore" });
    }
  });

  it("removes a second name of the key that a start killed after linking the key file left behind, once it is a minute old (nothing removed it)", () => {
    const db = tempDatabase();
    resolveDataKey(undefined, db, { holdsSealedSecrets: false });
    const keyFile = dataKeyFilePath(db);
    const deadPid = 4_194_000; // above any pid this machine hands out (pid_max is at most 4,194,304)
    const leftover = `${keyFile}.writing-${deadPid}-0123abcd`;
    linkSync(keyFile, leftover);
    resolveDataKey(undefined, db, { holdsSealedSecrets: true });
    expect(existsSync(leftover)).toBe(true); // not quiet for a minute yet: its writer may be alive elsewhere
    const aMinuteAgo = new Date(Date.now() - 61_000);
    utimesSync(leftover, aMinuteAgo, aMinuteAgo);
    resolveDataKey(undefined, db, { holdsSealedSecrets: true });
    expect(readdirSync(dirname(db)).filter((name) => name.startsWith(basename(keyFile)))).toEqual([basename(keyFile)]);
  });

  it("replaces an empty key file while the database holds nothing sealed (a first start killed as it made the file), and refuses it otherwise", () => {
    const db = tempDatabase();
    writeFileSync(dataKeyFilePath(db), "", { mode: 0o600 });
    expect(() => resolveDataKey(undefined, db, { holdsSealedSecrets: true })).toThrow(
      /key file .* is empty while the database holds secrets sealed with a key: restore the key file/,
    );
    expect(statSync(dataKeyFilePath(db)).size).toBe(0);
    const { cipher } = resolveDataKey(undefined, db, { holdsSealedSecrets: false });
    const fromFile = new SecretCipher(Buffer.from(readFileSync(dataKeyFilePath(db), "utf8").trim(), "base64url"));
    expect(fromFile.opens(cipher.seal(Buffer.from("x"), "t"), "t")).toBe(true);
  });

  it("creates no key file for a database that holds sealed secrets", () => {
    const db = tempDatabase();
    expect(() => resolveDataKey(undefined, db, { holdsSealedSecrets: true })).toThrow(ConfigError);
    expect(() => resolveDataKey(undefined, db, { holdsSealedSecrets: true })).toThrow(
      /^ACCESSD_DATA_KEY: not set, and the key file .* is missing/,
    );
    expect(existsSync(dataKeyFilePath(db))).toBe(false);
    expect(resolveDataKey(Buffer.alloc(32, 1), db, { holdsSealedSecrets: true }).source).toBe("ACCESSD_DATA_KEY");
  });
});

describe("the data key that seals secrets at rest", () => {
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
      "ACCESSD_DATA_KEY: ACCESSD_DATA_KEY is not the key the database's secrets were sealed with",
    );

    renameSync(keyFile, `${keyFile}.backup`);
    writeFileSync(keyFile, `${randomBytes(32).toString("base64url")}\n`, { mode: 0o600 });
    await expect(startTestServer({ database })).rejects.toThrow(
      `ACCESSD_DATA_KEY: the key file ${keyFile} is not the key the database's secrets were sealed with`,
    );
    // The failed starts closed the database they opened (and the checkpoint thread's connection).
    expect(openFilesUnder(database)).toEqual([]);
    renameSync(`${keyFile}.backup`, keyFile);
    const server = await startTestServer({ database });
    await server.close();
  });

  it("a database started once needs its key file even without webhook secrets: its token signing key is sealed with it", async () => {
    const database = tempDatabase();
    await (await startTestServer({ database })).close();
    rmSync(dataKeyFilePath(database));
    await expect(startTestServer({ database })).rejects.toThrow(`the key file ${dataKeyFilePath(database)} is missing`);
    expect(existsSync(dataKeyFilePath(database))).toBe(false);
  });

  it("keeps the token signing key sealed: not in the database file in clear, and tokens stay valid across a restart", async () => {
    const database = tempDatabase();
    const first = await startTestServer({ database });
    const token = first.headers.authorization;
    await first.close();

    const rows = withRawDatabase(database, (db) =>
      db.prepare("SELECT private_jwk, sealed_private_jwk FROM token_signing_keys").all(),
    ) as { private_jwk: string; sealed_private_jwk: Buffer }[];
    expect(rows).toHaveLength(1);
    expect(rows[0]!.private_jwk).toBe("");
    expect(rows[0]!.sealed_private_jwk.includes(Buffer.from('"d":'))).toBe(false);
    expect(readFileSync(database).includes(Buffer.from('"kty":"OKP"'))).toBe(false);

    await expectTokenAcceptedAfterRestart(database, token!);
  });

  it("seals a signing key stored in clear by an earlier version, keeps its tokens valid, and leaves no clear copy in the file", async () => {
    const database = tempDatabase();
    const first = await startTestServer({ database });
    const token = first.headers.authorization;
    // What an accessd from before migration 006 left: the key in clear, no key check; the key file is there.
    await first.close();
    const cipher = new SecretCipher(Buffer.from(readFileSync(dataKeyFilePath(database), "utf8").trim(), "base64url"));
    const clearJwk = withRawDatabase(database, (db) => {
      const row = db.prepare("SELECT kid, sealed_private_jwk FROM token_signing_keys").get() as { kid: string; sealed_private_jwk: Buffer };
      const text = cipher.open(row.sealed_private_jwk, `token-signing-key:${row.kid}`).toString("utf8");
      db.prepare("UPDATE token_signing_keys SET private_jwk = ?, sealed_private_jwk = NULL").run(text);
      db.prepare("DELETE FROM settings WHERE name = 'data_key_check'").run();
      return JSON.parse(text) as { d: string };
    });
    expect(readFileSync(database).includes(Buffer.from(clearJwk.d))).toBe(true);

    await expectTokenAcceptedAfterRestart(database, token!);
    const row = withRawDatabase(database, (db) => db.prepare("SELECT private_jwk, sealed_private_jwk FROM token_signing_keys").get()) as {
      private_jwk: string;
      sealed_private_jwk: Buffer | null;
    };
    expect(row.private_jwk).toBe("");
    expect(row.sealed_private_jwk).not.toBeNull();
    for (const file of [database, `${database}-wal`]) {
      if (existsSync(file)) expect(readFileSync(file).includes(Buffer.from(clearJwk.d))).toBe(false);
    }
  });

  it("checks a database from before the key check against its newest webhook secret", async () => {
    const { database } = await databaseWithSecret();
    withRawDatabase(database, (db) => db.prepare("DELETE FROM settings WHERE name = 'data_key_check'").run());
    await expect(startTestServer({ database, dataKey: randomBytes(32) })).rejects.toThrow(
      "ACCESSD_DATA_KEY is not the key the database's secrets were sealed with",
    );
    const server = await startTestServer({ database }); // its own key file: opens, and the check is written again
    await server.close();
    expect(withRawDatabase(database, (db) => db.prepare("SELECT count(*) FROM settings WHERE name = 'data_key_check'").pluck().get())).toBe(1);
  });

  it("`accessd serve` exits 2 with one line naming the missing key file", async () => {
    const { database } = await databaseWithSecret();
    rmSync(dataKeyFilePath(database));
    const cli = spawnCli(["serve"], { ACCESSD_DATABASE: database, ACCESSD_PORT: "0" });
    const { code } = await cli.exited;
    expect(code).toBe(2);
    expect(cli.stderr().trim().split("\n")).toEqual([
      `accessd: invalid configuration: ACCESSD_DATA_KEY: not set, and the key file ${dataKeyFilePath(database)} is missing ` +
        "while the database holds secrets sealed with it: restore the key file backed up with the database, " +
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
