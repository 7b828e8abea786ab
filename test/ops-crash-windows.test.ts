import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, statSync, utimesSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { dataKeyFilePath, nextKeyFilePath } from "../src/store/data-key.js";
import { isRunning } from "../src/store/leftover-files.js";
import { until } from "./support/served-process.js";
import { backdateFiles, scratch } from "./support/scratch.js";
import { builtCli, listeningPort, spawnCli } from "./support/spawn-cli.js";
import { startTestServer } from "./support/test-server.js";

/**
 * The narrow windows of the file operations around the database (an outside review found them by
 * holding a process at one system call and killing it there): a SIGKILL at the worst moment must
 * leave files the next run takes as they are, with no hand-made cleanup. strace holds the
 * process (`inject=...:delay_enter`) at a system call on one path; the test kills it there.
 */

const { tempDir, track } = scratch("accessd-crash-windows-");
const hasStrace = spawnSync("strace", ["-V"], { stdio: "ignore" }).status === 0;

interface Held {
  /** Kills the traced node process (SIGKILL) and strace; resolves when both are gone. */
  kill(): Promise<void>;
  /** The process's exit code (strace exits with it), once it ends by itself. */
  exited: Promise<number | null>;
  stderr: () => string;
}

/** `node dist/src/cli/main.js <args>`, held for `seconds` (a minute) at each of its `syscalls` on `path`. */
function heldAt(path: string, syscalls: string, args: string[], env: Record<string, string>, seconds = 60): Held {
  const inherited = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("ACCESSD_")));
  const delay = `delay_enter=${seconds * 1_000_000}`;
  const strace: ChildProcess = spawn(
    "strace",
    ["-f", "-qq", "-o", "/dev/null", "-P", path, "-e", `trace=${syscalls}`, "-e", `inject=${syscalls}:${delay}`, process.execPath, builtCli, ...args],
    { env: { ...inherited, ...env }, stdio: ["ignore", "ignore", "pipe"] },
  );
  let stderr = "";
  strace.stderr?.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
  const exited = once(strace, "exit");
  return {
    exited: exited.then(([code]) => code as number | null),
    stderr: () => stderr,
    async kill() {
      const found = spawnSync("ps", ["-o", "pid=", "--ppid", String(strace.pid)], { encoding: "utf8" }).stdout.trim();
      const pids = found.split(/\s+/).filter(Boolean).map(Number);
      for (const pid of pids) process.kill(pid, "SIGKILL");
      strace.kill("SIGKILL");
      await exited;
      // Gone for good (reaped), as after a real crash: until then its id still answers kill(pid, 0).
      await until("the killed process is reaped", () => pids.every((pid) => !isRunning(pid)), 10_000);
    },
  };
}

describe.skipIf(!hasStrace)("a process killed at the worst moment of a file operation", () => {
  it("a first start killed while it writes the new key file: the next start serves (an empty key file stopped every later start)", async () => {
    const dir = tempDir();
    const database = join(dir, "new.db");
    const keyFile = dataKeyFilePath(database);
    const held = heldAt(keyFile, "write,link,linkat", ["serve"], { ACCESSD_DATABASE: database, ACCESSD_PORT: "0" });
    // Held at the key file's first write (created in place) or at its link (written aside).
    await until("the key file is under way", () => readdirSync(dir).some((name) => name.startsWith("new.db.key")), 20_000);
    await new Promise((resolve) => setTimeout(resolve, 300));
    await held.kill();
    expect(!existsSync(keyFile) || statSync(keyFile).size > 0).toBe(true);
    backdateFiles(dir, "new.db.key.writing-");

    const next = track(spawnCli(["serve"], { ACCESSD_DATABASE: database, ACCESSD_PORT: "0" }));
    expect(await listeningPort(next)).toBeGreaterThan(0);
    next.child.kill("SIGTERM");
    expect((await next.exited).code).toBe(0);
    expect(readdirSync(dir).filter((name) => name.startsWith("new.db.key"))).toEqual(["new.db.key"]);
  });

  it("a backup killed between linking the copy's key and the copy: the next backup to that name succeeds and leaves nothing else", async () => {
    const dir = tempDir();
    const database = join(dir, "live.db");
    await (await startTestServer({ database })).close(); // a database sealed under its key file
    const copy = join(dir, "copy.db");
    const held = heldAt(copy, "link,linkat", ["backup", copy], { ACCESSD_DATABASE: database });
    await until("the copy's key is linked", () => existsSync(dataKeyFilePath(copy)), 20_000);
    await new Promise((resolve) => setTimeout(resolve, 300));
    await held.kill();
    expect(existsSync(copy)).toBe(false);
    backdateFiles(dir, "copy.db.partial-");

    const again = track(spawnCli(["backup", copy], { ACCESSD_DATABASE: database }));
    expect(await again.exited).toEqual({ code: 0, signal: null });
    expect(readdirSync(dir).filter((name) => name.startsWith("copy.db")).sort()).toEqual(["copy.db", "copy.db.key"]);
    await (await startTestServer({ database: copy })).close(); // and it opens with the key beside it
  });
});

describe.skipIf(!hasStrace)("a data key rotation while a backup runs", () => {
  it("a backup that finds its own key by the copy's name checks the copy against that key: a rotation meanwhile fails it", async () => {
    const dir = tempDir();
    const database = join(dir, "live.db");
    await (await startTestServer({ database })).close();
    const copy = join(dir, "copy.db");
    copyFileSync(dataKeyFilePath(database), dataKeyFilePath(copy)); // what a backup killed between its links left
    // Held for 8 s as it opens the database, after it took the key by the copy's name as its own;
    // the rotation runs meanwhile (the held process is there within 2 s, the rotation takes 1-3).
    const backup = heldAt(database, "openat", ["backup", copy], { ACCESSD_DATABASE: database }, 8);
    await new Promise((resolve) => setTimeout(resolve, 2_000));
    const rotate = track(spawnCli(["rotate-data-key"], { ACCESSD_DATABASE: database }));
    expect((await rotate.exited).code).toBe(0);
    const code = await backup.exited;
    // Before the fix: exit 0, and a copy sealed under the new key beside the old one.
    expect(code).not.toBe(0);
    expect(backup.stderr()).toContain("the data key changed while the backup ran");
    expect(existsSync(copy)).toBe(false);
  });
});

describe("what a killed run leaves, taken by the next", () => {
  it("a backup removes the partial copy, journal and key a killed backup to the same name left, and nothing else", async () => {
    const dir = tempDir();
    const database = join(dir, "live.db");
    await (await startTestServer({ database })).close();
    const copy = join(dir, "copy.db");
    const gone = 2 ** 22 + 1; // above Linux's largest pid: no process has it
    const leftovers = [`copy.db.partial-${gone}-0123abcd`, `copy.db.partial-${gone}-0123abcd-journal`, `copy.db.partial-${gone}-0123abcd.key`];
    const kept = [
      `copy.db.partial-${process.ppid}-0123abcd`, // its process runs: it may be writing it now
      `copy.db.partial-${gone}-4567cdef`, // changed a moment ago: a process of another pid namespace may be writing it
      "copy.db.partial-2024-12-01.db", // not a name a backup makes
      `copy.db.partial-${gone}-89abcdef.key.old`,
    ];
    for (const name of [...leftovers, ...kept]) writeFileSync(join(dir, name), "left by a killed backup");
    mkdirSync(join(dir, `copy.db.partial-${gone}-deadbeef`)); // a folder is never ours
    kept.push(`copy.db.partial-${gone}-deadbeef`);
    backdateFiles(dir, "copy.db.partial-");
    const recently = new Date();
    utimesSync(join(dir, `copy.db.partial-${gone}-4567cdef`), recently, recently);

    const backup = track(spawnCli(["backup", copy], { ACCESSD_DATABASE: database }));
    expect(await backup.exited).toEqual({ code: 0, signal: null });
    expect(readdirSync(dir).filter((name) => name.startsWith("copy.db")).sort()).toEqual(["copy.db", "copy.db.key", ...kept].sort());
  });

  it("a key by the copy's name that is not this database's key is still refused", async () => {
    const dir = tempDir();
    const database = join(dir, "live.db");
    await (await startTestServer({ database })).close();
    const copy = join(dir, "copy.db");
    writeFileSync(dataKeyFilePath(copy), "someone else's key\n", { mode: 0o600 });
    const backup = track(spawnCli(["backup", copy], { ACCESSD_DATABASE: database }));
    expect(await backup.exited).toEqual({ code: 1, signal: null });
    expect(backup.stderr()).toContain(`${dataKeyFilePath(copy)} exists; a backup does not overwrite anything`);
    expect(readFileSync(dataKeyFilePath(copy), "utf8")).toBe("someone else's key\n");
  });

  it("a backup during a key rotation stopped after its commit says so, as the start does", async () => {
    const dir = tempDir();
    const database = join(dir, "live.db");
    await (await startTestServer({ database })).close();
    const keyFile = dataKeyFilePath(database);
    copyFileSync(keyFile, `${keyFile}.old`);
    const rotate = track(spawnCli(["rotate-data-key"], { ACCESSD_DATABASE: database }));
    expect((await rotate.exited).code).toBe(0);
    // The state of a rotation killed between its commit and its rename: the database sealed under
    // the new key, the old key file in place, the new one beside it as .key.next.
    renameSync(keyFile, nextKeyFilePath(database));
    renameSync(`${keyFile}.old`, keyFile);

    const backup = track(spawnCli(["backup", join(dir, "copy.db")], { ACCESSD_DATABASE: database }));
    expect((await backup.exited).code).toBe(2);
    expect(backup.stderr()).toContain("a data key rotation was stopped before it finished; run `accessd rotate-data-key` to finish it");
  });
});
