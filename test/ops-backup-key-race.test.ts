import { randomBytes } from "node:crypto";
import * as fs from "node:fs";
import { join } from "node:path";
import { describe, expect, it, vi } from "vitest";
import { backupDatabase } from "../src/store/backup.js";
import { scratch } from "./support/scratch.js";
import { startTestServer } from "./support/test-server.js";

/**
 * `accessd backup` checks the data key before it copies anything (test/store-backup.test.ts), and
 * checks the copy again against the key it copied beside it: a `rotate-data-key` that replaces the
 * key file while the copy is read (the backup takes no serving lock) would otherwise leave a copy
 * whose key file does not open it. The replacement is simulated at the moment the key file is copied.
 */

const keyFileReplacedWhileCopying = { on: false };

vi.mock("node:fs", async (importOriginal) => {
  const real = await importOriginal<typeof import("node:fs")>();
  return {
    ...real,
    copyFileSync(source: fs.PathLike, destination: fs.PathLike, mode?: number) {
      real.copyFileSync(source, destination, mode);
      if (keyFileReplacedWhileCopying.on && String(source).endsWith(".key")) {
        real.writeFileSync(destination, `${randomBytes(32).toString("base64url")}\n`);
      }
    },
  };
});

const { tempDir } = scratch("accessd-backup-race-");

describe("accessd backup, the data key replaced while it runs", () => {
  it("keeps no copy whose key file does not open it, and leaves nothing by the copy's name", async () => {
    const dir = tempDir();
    const database = join(dir, "live.db");
    await (await startTestServer({ database })).close();
    const copy = join(dir, "copy.db");

    keyFileReplacedWhileCopying.on = true;
    try {
      expect(() => backupDatabase(database, copy, { dataKey: undefined })).toThrow(
        `the copy of ${database} does not open with the key copied from ${database}.key: the data key changed while the backup ran ` +
          "(a rotate-data-key?); nothing was written, run the backup again",
      );
    } finally {
      keyFileReplacedWhileCopying.on = false;
    }
    expect(fs.readdirSync(dir).filter((name) => name.startsWith("copy.db"))).toEqual([]);

    expect(backupDatabase(database, copy, { dataKey: undefined }).keyFile).toBe(`${copy}.key`);
  });
});
