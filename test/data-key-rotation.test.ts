import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { copyFileSync, existsSync, lstatSync, mkdirSync, readFileSync, renameSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import BetterSqlite3 from "better-sqlite3";
import { describe, expect, it } from "vitest";
import { rotateDataKey } from "../src/store/data-key-rotation.js";
import { dataKeyFilePath, nextKeyFilePath } from "../src/store/data-key.js";
import { DatabaseInUseError } from "../src/store/serving-lock.js";
import { scratch } from "./support/scratch.js";
import { spawnCli } from "./support/spawn-cli.js";
import { startTestServer, type TestServer } from "./support/test-server.js";
import { createWebhookAutomation, hmacHeaders, postWebhook, type WebhookAutomation } from "./support/webhook-fixtures.js";

/**
 * `accessd rotate-data-key` (README "Operating it"): for a data key that may have leaked, every
 * secret sealed under it (webhook secrets, token signing keys, the key check) is sealed again
 * under a new key, with the server stopped. Afterwards the old key opens nothing, the new one
 * serves everything as before (the same webhook signatures, tokens issued before), and a run
 * stopped half-way never leaves the database without a key that opens it.
 */

const { tempDir } = scratch("accessd-rotate-key-");

interface Seeded {
  database: string;
  automation: WebhookAutomation;
  /** A token issued before the rotation. */
  authorization: string;
}

/** A file database with one HMAC listener, one webhook accepted and a token issued; the server is stopped. */
async function seededDatabase(dataKey?: Buffer): Promise<Seeded> {
  const database = join(tempDir(), "accessd.db");
  const server = await startTestServer({ database, dataKey });
  try {
    const automation = await createWebhookAutomation(server, { authMethod: "HMAC" });
    expect((await send(server, automation)).status).toBe(200);
    return { database, automation, authorization: server.headers.authorization! };
  } finally {
    await server.close();
  }
}

/** A newly signed webhook (a new event id) to the listener, signed with the secret it had before any rotation. */
function send(server: TestServer, automation: WebhookAutomation) {
  const body = JSON.stringify({ user: "u-1", n: randomBytes(4).toString("hex") });
  return postWebhook(`${server.url}/api/v1/webhooks/incoming/${automation.listenerId}`, hmacHeaders(automation, body), body);
}

/** Starts on `database`: the webhook signed with the old secret is accepted and the old token is valid. */
async function expectServesAsBefore(seeded: Seeded, dataKey?: Buffer): Promise<void> {
  const server = await startTestServer({ database: seeded.database, dataKey });
  try {
    expect((await send(server, seeded.automation)).status).toBe(200);
    expect((await fetch(`${server.url}/api/v1/apps`, { headers: { authorization: seeded.authorization } })).status).toBe(200);
  } finally {
    await server.close();
  }
}

function sealedValues(database: string): Buffer[] {
  const db = new BetterSqlite3(database, { readonly: true });
  try {
    return [
      ...db.prepare<[], { v: Buffer }>("SELECT sealed AS v FROM webhook_secrets").all(),
      ...db.prepare<[], { v: Buffer }>("SELECT sealed_private_jwk AS v FROM token_signing_keys").all(),
      ...db.prepare<[], { v: Buffer }>("SELECT value AS v FROM settings WHERE name = 'data_key_check'").all(),
    ].map((row) => row.v);
  } finally {
    db.close();
  }
}

describe("accessd rotate-data-key", () => {
  it("seals every secret under a new key file: the old key opens nothing, old signatures and tokens still work, no old sealed form is left in the file", async () => {
    const seeded = await seededDatabase();
    const keyFile = dataKeyFilePath(seeded.database);
    const oldKey = readFileSync(keyFile, "utf8");
    const oldSealed = sealedValues(seeded.database);

    expect(await rotateDataKey(seeded.database, {})).toEqual({ webhookSecrets: 1, signingKeys: 1, keyFile, finishedEarlierRun: false });

    expect(readFileSync(keyFile, "utf8")).not.toBe(oldKey);
    expect(existsSync(nextKeyFilePath(seeded.database))).toBe(false);
    const file = readFileSync(seeded.database);
    for (const sealed of oldSealed) expect(file.includes(sealed)).toBe(false);
    expect(existsSync(`${seeded.database}-wal`) ? readFileSync(`${seeded.database}-wal`).length : 0).toBe(0);
    await expect(startTestServer({ database: seeded.database, dataKey: Buffer.from(oldKey.trim(), "base64url") })).rejects.toThrow(
      "is not the key the database's secrets were sealed with",
    );
    await expectServesAsBefore(seeded);
  });

  it("is refused while a server uses the database, which changes nothing", async () => {
    const seeded = await seededDatabase();
    const keyFile = dataKeyFilePath(seeded.database);
    const oldKey = readFileSync(keyFile, "utf8");
    const server = await startTestServer({ database: seeded.database });
    try {
      await expect(rotateDataKey(seeded.database, {})).rejects.toThrow(DatabaseInUseError);
    } finally {
      await server.close();
    }
    expect(readFileSync(keyFile, "utf8")).toBe(oldKey);
    await expectServesAsBefore(seeded);
  });

  it("after a run stopped between its commit and the key file's rename, the start says to run it again, which finishes it", async () => {
    const seeded = await seededDatabase();
    const keyFile = dataKeyFilePath(seeded.database);
    copyFileSync(keyFile, `${keyFile}.old`);
    await rotateDataKey(seeded.database, {});
    // As if stopped before the rename: the new key still under its temporary name, the old file in place.
    copyFileSync(keyFile, nextKeyFilePath(seeded.database));
    copyFileSync(`${keyFile}.old`, keyFile);

    await expect(startTestServer({ database: seeded.database })).rejects.toThrow(
      "a data key rotation was stopped before it finished; run `accessd rotate-data-key` to finish it",
    );
    expect(await rotateDataKey(seeded.database, {})).toEqual({ webhookSecrets: 0, signingKeys: 0, keyFile, finishedEarlierRun: true });
    expect(existsSync(nextKeyFilePath(seeded.database))).toBe(false);
    await expectServesAsBefore(seeded);
  });

  it("after a run stopped before its commit, the database opens with the old key and the next run rotates", async () => {
    const seeded = await seededDatabase();
    writeFileSync(nextKeyFilePath(seeded.database), `${randomBytes(32).toString("base64url")}\n`, { mode: 0o600 });
    await expectServesAsBefore(seeded);
    expect((await rotateDataKey(seeded.database, {})).webhookSecrets).toBe(1);
    expect(existsSync(nextKeyFilePath(seeded.database))).toBe(false);
    await expectServesAsBefore(seeded);
  });

  it("with ACCESSD_DATA_KEY, takes the new key from ACCESSD_NEW_DATA_KEY, and a second run reports it done", async () => {
    const oldKey = randomBytes(32);
    const newKey = randomBytes(32);
    const seeded = await seededDatabase(oldKey);
    await expect(rotateDataKey(seeded.database, { current: oldKey })).rejects.toThrow("ACCESSD_NEW_DATA_KEY: not set");
    // The same key again was "rotated" (everything resealed under it) and reported done.
    await expect(rotateDataKey(seeded.database, { current: oldKey, next: Buffer.from(oldKey) })).rejects.toThrow(
      "ACCESSD_NEW_DATA_KEY: is ACCESSD_DATA_KEY itself: nothing would change",
    );

    expect(await rotateDataKey(seeded.database, { current: oldKey, next: newKey })).toEqual({
      webhookSecrets: 1,
      signingKeys: 1,
      keyFile: undefined,
      finishedEarlierRun: false,
    });
    expect(await rotateDataKey(seeded.database, { current: oldKey, next: newKey })).toMatchObject({ finishedEarlierRun: true });
    await expect(startTestServer({ database: seeded.database, dataKey: oldKey })).rejects.toThrow("is not the key");
    await expectServesAsBefore(seeded, newKey);
    expect(existsSync(dataKeyFilePath(seeded.database))).toBe(false);
  });

  it("changes nothing when a sealed row does not open (altered), and says which", async () => {
    const seeded = await seededDatabase();
    const keyFile = dataKeyFilePath(seeded.database);
    const oldKey = readFileSync(keyFile, "utf8");
    const db = new BetterSqlite3(seeded.database);
    const secretId = db.prepare<[], { id: string }>("SELECT id FROM webhook_secrets").get()!.id;
    const kept = db.prepare<[], { sealed: Buffer }>("SELECT sealed FROM webhook_secrets").get()!.sealed;
    const altered = Buffer.from(kept);
    altered[altered.length - 1]! ^= 1;
    db.prepare("UPDATE webhook_secrets SET sealed = ?").run(altered);
    db.close();

    await expect(rotateDataKey(seeded.database, {})).rejects.toThrow(`webhook secret ${secretId} does not open with the current data key`);
    expect(readFileSync(keyFile, "utf8")).toBe(oldKey);
    expect(existsSync(nextKeyFilePath(seeded.database))).toBe(false);
    const after = sealedValues(seeded.database);
    expect(after[0]!.equals(altered)).toBe(true);
    // The key check and the signing key are still sealed under the old key: the server starts.
    await (await startTestServer({ database: seeded.database })).close();
  });

  it("is a command: prints what it did (JSON) and exits 0", async () => {
    const seeded = await seededDatabase();
    const cli = spawnCli(["rotate-data-key"], { ACCESSD_DATABASE: seeded.database });
    expect(await cli.exited).toEqual({ code: 0, signal: null });
    expect(JSON.parse(cli.stdout())).toEqual({
      webhookSecrets: 1,
      signingKeys: 1,
      keyFile: dataKeyFilePath(seeded.database),
      finishedEarlierRun: false,
    });
    expect(cli.stderr()).toContain("holds the new key; backups taken before keep the old one with them");
    await expectServesAsBefore(seeded);
  });

  it("after a run killed before it wrote its new key (an empty or cut-short .key.next), the next run removes that file, says so, and rotates", async () => {
    const seeded = await seededDatabase();
    const keyFile = dataKeyFilePath(seeded.database);
    const nextFile = nextKeyFilePath(seeded.database);
    for (const left of ["", randomBytes(32).toString("base64url").slice(0, 20)]) {
      const oldKey = readFileSync(keyFile, "utf8");
      writeFileSync(nextFile, left, { mode: 0o600 }); // what a run killed between creating the file and writing it leaves
      await expectServesAsBefore(seeded); // the key file still opens the database

      const cli = spawnCli(["rotate-data-key"], { ACCESSD_DATABASE: seeded.database });
      expect(await cli.exited).toEqual({ code: 0, signal: null });
      expect(JSON.parse(cli.stdout())).toEqual({
        webhookSecrets: 1,
        signingKeys: 1,
        keyFile,
        finishedEarlierRun: false,
        discardedNextKeyFile: { path: nextFile, heldAKey: false },
      });
      expect(cli.stderr()).toContain(
        `accessd: ${nextFile} held no key: an earlier run stopped before its commit left it; it was removed and this run rotated the key from the start\n`,
      );
      expect(readFileSync(keyFile, "utf8")).not.toBe(oldKey);
      expect(existsSync(nextFile)).toBe(false);
      await expectServesAsBefore(seeded);
    }
  });

  it("names the file, and changes nothing, when .key.next cannot be read at all", async () => {
    const seeded = await seededDatabase();
    const keyFile = dataKeyFilePath(seeded.database);
    const oldKey = readFileSync(keyFile, "utf8");
    mkdirSync(nextKeyFilePath(seeded.database));
    await expect(rotateDataKey(seeded.database, {})).rejects.toThrow(
      `ACCESSD_DATA_KEY: not set, and the key file ${nextKeyFilePath(seeded.database)} cannot be read: EISDIR: illegal operation on a directory, read`,
    );
    expect(readFileSync(keyFile, "utf8")).toBe(oldKey);
    await expectServesAsBefore(seeded);
  });

  it("refuses a key file that is a symbolic link, which it would replace with the new key (leaving the old key where the link pointed), and changes nothing", async () => {
    const seeded = await seededDatabase();
    const keyFile = dataKeyFilePath(seeded.database);
    const oldKey = readFileSync(keyFile, "utf8");
    const mounted = join(tempDir(), "mounted.key");
    renameSync(keyFile, mounted);
    symlinkSync(mounted, keyFile);
    await expect(rotateDataKey(seeded.database, {})).rejects.toThrow(`the key file ${keyFile} is a symbolic link to ${mounted}: the rotation would replace the link`);
    expect(lstatSync(keyFile).isSymbolicLink()).toBe(true);
    expect(readFileSync(mounted, "utf8")).toBe(oldKey);
    expect(existsSync(nextKeyFilePath(seeded.database))).toBe(false);
    await expectServesAsBefore(seeded);
  });

  it("refuses a key file that is a mount point (a file mounted in), which it could not rename over after the commit, and changes nothing", async (context) => {
    const seeded = await seededDatabase();
    const keyFile = dataKeyFilePath(seeded.database);
    const oldKey = readFileSync(keyFile, "utf8");
    const secret = join(tempDir(), "secret.key");
    copyFileSync(keyFile, secret);
    try {
      execFileSync("mount", ["--bind", secret, keyFile], { stdio: "ignore" });
    } catch {
      context.skip(); // needs root and a mount namespace that allows it
      return;
    }
    try {
      await expect(rotateDataKey(seeded.database, {})).rejects.toThrow(`the key file ${keyFile} is a mount point (a file mounted in)`);
      expect(readFileSync(keyFile, "utf8")).toBe(oldKey);
      expect(existsSync(nextKeyFilePath(seeded.database))).toBe(false);
    } finally {
      execFileSync("umount", [keyFile], { stdio: "ignore" });
    }
    await expectServesAsBefore(seeded);
  });
});
