import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { newId } from "../src/store/ids.js";
import { Store } from "../src/store/store.js";

const dir = mkdtempSync(join(tmpdir(), "accessd-wal-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("WAL checkpoints from their own thread", () => {
  it("copies committed pages into the database file without the writing connection checkpointing, and close() waits for the thread", async () => {
    const path = join(dir, "accessd.db");
    const store = Store.open(path, { backgroundCheckpoints: { busyIntervalMs: 5 } });
    // The writing connection's own automatic checkpoint only comes at 10,000 pages (40 MB).
    expect(store.db.pragma("wal_autocheckpoint", { simple: true })).toBe(10_000);
    const sizeBefore = statSync(path).size;
    for (let batch = 0; batch < 20; batch++) {
      store.transaction(() => {
        for (let i = 0; i < 100; i++) {
          const now = Date.now();
          store.apps.insert({ id: newId(), displayName: `app ${batch}-${i}`, description: "x".repeat(200), createdAt: now, updatedAt: now });
        }
      });
    }
    const walFrames = statSync(`${path}-wal`).size;
    expect(walFrames).toBeGreaterThan(100 * 4096);

    // The thread may have copied the first commits already; wait until it has copied the rest.
    const deadline = Date.now() + 5_000;
    while (statSync(path).size <= sizeBefore + 100 * 4096 && Date.now() < deadline) await sleep(10);
    expect(statSync(path).size).toBeGreaterThan(sizeBefore + 100 * 4096);

    await store.close(); // resolves only once the thread has closed its connection
    const reopened = Store.open(path);
    expect(reopened.db.prepare("SELECT count(*) FROM apps").pluck().get()).toBe(2_000);
    await reopened.close();
  });

  it("checkpoints the first commits after an idle spell within tens of milliseconds, not after a pause grown to a second", async () => {
    const path = join(dir, "idle.db");
    const store = Store.open(path, { backgroundCheckpoints: { busyIntervalMs: 5 } });
    const insertApps = (label: string) =>
      store.transaction(() => {
        for (let i = 0; i < 100; i++) {
          const now = Date.now();
          store.apps.insert({ id: newId(), displayName: `${label}-${i}`, description: "x".repeat(200), createdAt: now, updatedAt: now });
        }
      });
    const delays: number[] = [];
    for (let spell = 0; spell < 3; spell++) {
      // Long enough for a pause that doubles from 5 ms to reach 1 s (5 + 10 + ... + 640 ms).
      await sleep(1_400);
      const sizeBefore = statSync(path).size;
      insertApps(`spell ${spell}`);
      const written = Date.now();
      while (statSync(path).size <= sizeBefore && Date.now() - written < 2_000) await sleep(2);
      delays.push(Date.now() - written);
    }
    // With the pause capped at 20 ms each copy comes within about that; with a 1 s cap, all three
    // landing under 150 ms would have a chance of about 0.3%.
    expect(Math.max(...delays)).toBeLessThan(150);
    await store.close();
  }, 15_000);

  it.skipIf(!canMountTmpfs())("goes on checkpointing after a spell of full disk (one full disk turned the thread off until a restart)", async () => {
    const small = mkdtempSync(join(tmpdir(), "accessd-wal-full-"));
    execFileSync("mount", ["-t", "tmpfs", "-o", "size=3m", "tmpfs", small]);
    const events: string[] = [];
    let store: Store | undefined;
    try {
      store = Store.open(join(small, "full.db"), {
        backgroundCheckpoints: {
          busyIntervalMs: 5,
          retryIntervalMs: 20,
          onError: (error) => events.push(`thread died: ${error.message}`),
          onCheckpointFailed: (error) => events.push(`failed: ${(error as Error & { code: string }).code}`),
          onCheckpointsResumed: () => events.push("resumed"),
        },
      });
      const open = store;
      const insertApp = (label: string) => {
        const now = Date.now();
        open.apps.insert({ id: newId(), displayName: label, description: "x".repeat(3_000), createdAt: now, updatedAt: now });
      };
      // Fill the disk: the WAL takes what is left, and a checkpoint cannot grow the database file.
      const filler = join(small, "filler");
      writeFileSync(filler, Buffer.alloc(2_200_000));
      for (let i = 0; i < 2_000 && !events.some((e) => e.startsWith("failed")); i++) {
        try {
          open.transaction(() => insertApp(`full ${i}`));
        } catch {
          // SQLITE_FULL: the store is full too
        }
        await sleep(1);
      }
      expect(events[0]).toMatch(/^failed: SQLITE_(FULL|IOERR)/);
      // Meanwhile the connection checkpoints as SQLite does by default, in case it never ends.
      await sleep(50);
      expect(open.db.pragma("wal_autocheckpoint", { simple: true })).toBe(1_000);

      rmSync(filler); // space again
      const resumedBy = Date.now() + 5_000;
      while (!events.includes("resumed") && Date.now() < resumedBy) await sleep(10);
      expect(events.slice(1)).toEqual(["resumed"]);
      expect(open.db.pragma("wal_autocheckpoint", { simple: true })).toBe(10_000);

      // And it checkpoints what comes next, as before.
      const sizeBefore = statSync(join(small, "full.db")).size;
      open.transaction(() => {
        for (let i = 0; i < 100; i++) insertApp(`after ${i}`);
      });
      const copiedBy = Date.now() + 5_000;
      while (statSync(join(small, "full.db")).size <= sizeBefore && Date.now() < copiedBy) await sleep(10);
      expect(statSync(join(small, "full.db")).size).toBeGreaterThan(sizeBefore);
      expect(events).toHaveLength(2);
    } finally {
      await store?.close();
      execFileSync("umount", [small]);
      rmSync(small, { recursive: true, force: true });
    }
  });
});

/** A tmpfs of a few MB is a real full disk; mounting one takes root (CI's VM runs tests as root). */
function canMountTmpfs(): boolean {
  if (process.getuid?.() !== 0) return false;
  try {
    execFileSync("sh", ["-c", "command -v mount && command -v umount"], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
}
