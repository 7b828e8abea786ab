import { randomBytes, randomUUID } from "node:crypto";
import { existsSync, readdirSync, renameSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { basename, join } from "node:path";
import BetterSqlite3 from "better-sqlite3";
import { describe, expect, it } from "vitest";
import { dataKeyFilePath } from "../src/store/data-key.js";
import { signHmacWebhook } from "../src/webhooks/index.js";
import { createHmacListener, serveProcess, type HmacListener } from "./support/served-process.js";
import { backdateFiles, scratch } from "./support/scratch.js";
import { spawnCli } from "./support/spawn-cli.js";
import { startTestServer } from "./support/test-server.js";

/**
 * `accessd backup <file>` (README "Operating it"): a copy of the live database taken while the
 * server accepts webhooks holds every webhook answered 200 before the backup started, opens
 * cleanly, and serves again (with its key file) on another machine's start.
 */

const { tempDir, track } = scratch("accessd-backup-");

async function postEvent(url: string, hook: HmacListener, n: number): Promise<{ status: number; eventId: string }> {
  const eventId = randomUUID();
  const body = JSON.stringify({ n });
  const headers = signHmacWebhook({ url: hook.endpointUrl, body: Buffer.from(body), eventId }, hook.secret);
  const res = await fetch(url + hook.path, { method: "POST", headers: { ...headers }, body });
  await res.text();
  return { status: res.status, eventId };
}

describe("accessd backup", () => {
  it("copies the live database under webhook load: every event accepted before it is in the copy, which serves again with its key file", async () => {
    const dir = tempDir();
    const database = join(dir, "live.db");
    const served = await serveProcess({ ACCESSD_DATABASE: database });
    track(served.cli);
    const hook = await createHmacListener(served, "Backed up", [{ name: "note", log: { messageCel: "ctx.trigger.n" } }]);

    // Two senders post back to back while the backup runs.
    const acceptedBefore: string[] = [];
    let backupStarted = false;
    let sending = true;
    const senders = Array.from({ length: 2 }, async (_, s) => {
      for (let n = 0; sending; n++) {
        const { status, eventId } = await postEvent(served.url, hook, s * 1_000_000 + n);
        expect(status).toBe(200);
        if (!backupStarted) acceptedBefore.push(eventId);
      }
    });
    while (acceptedBefore.length < 200) await new Promise((r) => setTimeout(r, 10));

    const copy = join(dir, "copy.db");
    backupStarted = true;
    const backup = spawnCli(["backup", copy], { ACCESSD_DATABASE: database });
    track(backup);
    expect(await backup.exited).toEqual({ code: 0, signal: null });
    sending = false;
    await Promise.all(senders);

    expect(JSON.parse(backup.stdout())).toEqual({ database: copy, keyFile: dataKeyFilePath(copy), bytes: statSync(copy).size });
    expect(existsSync(`${copy}-wal`)).toBe(false);
    expect(statSync(dataKeyFilePath(copy)).mode & 0o777).toBe(0o600);
    const inCopy = new BetterSqlite3(copy, { readonly: true });
    try {
      expect(inCopy.pragma("integrity_check", { simple: true })).toBe("ok");
      const recorded = new Set(inCopy.prepare("SELECT event_id FROM webhook_events").pluck().all() as string[]);
      expect(acceptedBefore.filter((id) => !recorded.has(id))).toEqual([]);
    } finally {
      inCopy.close();
    }

    // A second backup to the same place is refused; nothing is overwritten.
    const again = spawnCli(["backup", copy], { ACCESSD_DATABASE: database });
    track(again);
    expect((await again.exited).code).toBe(1);
    expect(again.stderr()).toContain(`accessd: ${copy} exists; a backup does not overwrite anything`);

    served.cli.child.kill("SIGTERM");
    await served.cli.exited;
    // The copy, started as a database of its own: its key file opens the listener's secret.
    const restored = await serveProcess({ ACCESSD_DATABASE: copy });
    track(restored.cli);
    expect((await postEvent(restored.url, hook, -1)).status).toBe(200);
    restored.cli.child.kill("SIGTERM");
    expect(await restored.cli.exited).toEqual({ code: 0, signal: null });
  });

  it("leaves nothing by the copy's name when it is killed half-way, and the next backup to that name succeeds", async () => {
    const dir = tempDir();
    const database = join(dir, "big.db");
    const filler = new BetterSqlite3(database);
    filler.pragma("journal_mode = WAL");
    filler.exec("CREATE TABLE filler (id INTEGER PRIMARY KEY, pad BLOB)");
    const insert = filler.prepare("INSERT INTO filler (pad) VALUES (randomblob(1000))");
    filler.transaction(() => {
      for (let i = 0; i < 100_000; i++) insert.run(); // 100 MB: the copy takes about half a second
    })();
    filler.close();
    writeFileSync(dataKeyFilePath(database), "key file\n", { mode: 0o600 });

    const copy = join(dir, "copy.db");
    const killed = spawnCli(["backup", copy], { ACCESSD_DATABASE: database });
    track(killed);
    const partial = `copy.db.partial-${killed.child.pid}-`;
    const deadline = Date.now() + 20_000;
    const started = () => readdirSync(dir).some((name) => name.startsWith(partial)) || existsSync(copy);
    while (!started() && killed.child.exitCode === null && Date.now() < deadline) await new Promise((r) => setTimeout(r, 2));
    killed.child.kill("SIGKILL");
    expect(await killed.exited).toEqual({ code: null, signal: "SIGKILL" });
    expect(existsSync(copy)).toBe(false);
    expect(existsSync(dataKeyFilePath(copy))).toBe(false);

    // The next run, two minutes later, removes what the killed one left (its partial copy and
    // journal: a file changed in the last minute could be another namespace's backup at work).
    backdateFiles(dir, partial);
    const again = spawnCli(["backup", copy], { ACCESSD_DATABASE: database });
    track(again);
    expect(await again.exited).toEqual({ code: 0, signal: null });
    const leftovers = readdirSync(dir).filter((name) => name.startsWith("copy.db"));
    expect(leftovers.sort()).toEqual([basename(copy), basename(dataKeyFilePath(copy))]);
    const copied = new BetterSqlite3(copy, { readonly: true });
    try {
      expect(copied.prepare("SELECT count(*) FROM filler").pluck().get()).toBe(100_000);
    } finally {
      copied.close();
    }
  });

  it("refuses, exit 2 with one line naming it, a data key that does not open the database, and writes nothing; the right key backs up", async () => {
    const dir = tempDir();
    const database = join(dir, "keyed.db");
    await (await startTestServer({ database })).close(); // sealed under its key file
    const keyFile = dataKeyFilePath(database);
    const copy = join(dir, "copy.db");
    const written = () => readdirSync(dir).filter((name) => name.startsWith("copy.db"));

    // Another key in ACCESSD_DATA_KEY: before, exit 0, and a copy no key beside it opens.
    const wrongVariable = spawnCli(["backup", copy], { ACCESSD_DATABASE: database, ACCESSD_DATA_KEY: randomBytes(32).toString("hex") });
    track(wrongVariable);
    expect(await wrongVariable.exited).toEqual({ code: 2, signal: null });
    expect(wrongVariable.stderr().trim().split("\n")).toEqual([
      "accessd: invalid configuration: ACCESSD_DATA_KEY: ACCESSD_DATA_KEY is not the key the database's secrets are sealed with: " +
        "a backup kept with it could not be restored; run the backup with the key (or key file) the server starts with",
    ]);
    expect(wrongVariable.stdout()).toBe("");
    expect(written()).toEqual([]);

    // Another key in the key file.
    renameSync(keyFile, `${keyFile}.right`);
    writeFileSync(keyFile, `${randomBytes(32).toString("base64url")}\n`, { mode: 0o600 });
    const wrongFile = spawnCli(["backup", copy], { ACCESSD_DATABASE: database });
    track(wrongFile);
    expect(await wrongFile.exited).toEqual({ code: 2, signal: null });
    expect(wrongFile.stderr().trim().split("\n")).toEqual([
      `accessd: invalid configuration: ACCESSD_DATA_KEY: the key file ${keyFile} is not the key the database's secrets are sealed with: ` +
        "a backup kept with it could not be restored; run the backup with the key (or key file) the server starts with",
    ]);
    expect(written()).toEqual([]);

    renameSync(`${keyFile}.right`, keyFile);
    const right = spawnCli(["backup", copy], { ACCESSD_DATABASE: database });
    track(right);
    expect(await right.exited).toEqual({ code: 0, signal: null });
    expect(written().sort()).toEqual(["copy.db", "copy.db.key"]);
    await (await startTestServer({ database: copy })).close(); // the copy opens with the key kept beside it
  });

  it("with ACCESSD_DATA_KEY, backs up a database sealed under that key (and writes no key file)", async () => {
    const dir = tempDir();
    const database = join(dir, "variable.db");
    const dataKey = randomBytes(32);
    await (await startTestServer({ database, dataKey })).close();
    const copy = join(dir, "copy.db");
    const backup = spawnCli(["backup", copy], { ACCESSD_DATABASE: database, ACCESSD_DATA_KEY: dataKey.toString("hex") });
    track(backup);
    expect(await backup.exited).toEqual({ code: 0, signal: null });
    expect(existsSync(dataKeyFilePath(copy))).toBe(false);
    await (await startTestServer({ database: copy, dataKey })).close();
  });

  it("creates the database, its folder, its -wal and -shm and the backup copy readable by their owner only, whatever the umask", async () => {
    const dir = join(tempDir(), "new-folder");
    const database = join(dir, "private.db");
    const umask = process.umask(0o022);
    try {
      const server = await startTestServer({ database });
      const modes = [dir, database, `${database}-wal`, `${database}-shm`].map((path) => (statSync(path).mode & 0o777).toString(8));
      await server.close();
      expect(modes).toEqual(["700", "600", "600", "600"]);
    } finally {
      process.umask(umask);
    }
    const copy = join(tempDir(), "copy.db");
    const backup = track(spawnCli(["backup", copy], { ACCESSD_DATABASE: database }));
    expect(await backup.exited).toEqual({ code: 0, signal: null });
    expect((statSync(copy).mode & 0o777).toString(8)).toBe("600");
    // Through a symbolic link to a file not made yet, too.
    const linkDir = tempDir();
    symlinkSync(join(linkDir, "target.db"), join(linkDir, "link.db"));
    await (await startTestServer({ database: join(linkDir, "link.db") })).close();
    expect((statSync(join(linkDir, "target.db")).mode & 0o777).toString(8)).toBe("600");
  });

  it("refuses an empty name and a symbolic link by the copy's name (even one to nothing), and leaves no key behind (a copy of the live key was left by the failed link)", async () => {
    const dir = tempDir();
    const database = join(dir, "a.db");
    await (await startTestServer({ database })).close();
    const before = readdirSync(dir).sort();
    const empty = track(spawnCli(["backup", ""], { ACCESSD_DATABASE: database }, dir));
    expect(await empty.exited).toEqual({ code: 1, signal: null });
    expect(empty.stderr().trim()).toBe("accessd: name the file to write the backup to");
    const dangling = join(dir, "dangling.db");
    symlinkSync(join(dir, "nowhere.db"), dangling);
    const linked = track(spawnCli(["backup", dangling], { ACCESSD_DATABASE: database }));
    expect(await linked.exited).toEqual({ code: 1, signal: null });
    expect(linked.stderr().trim()).toBe(`accessd: ${dangling} exists; a backup does not overwrite anything`);
    expect(readdirSync(dir).sort()).toEqual([...before, "dangling.db"].sort());
  });

  it("names a destination folder that does not exist (exit 1, nothing written)", async () => {
    const dir = tempDir();
    const database = join(dir, "a.db");
    await (await startTestServer({ database })).close();
    const missing = join(dir, "no-such-folder");
    const backup = track(spawnCli(["backup", join(missing, "copy.db")], { ACCESSD_DATABASE: database }));
    expect(await backup.exited).toEqual({ code: 1, signal: null });
    expect(backup.stderr().trim()).toBe(`accessd: the folder ${missing} does not exist; create it first`);
  });
});
