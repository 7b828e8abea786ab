import { copyFileSync, linkSync, readdirSync, symlinkSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { describe, expect, it } from "vitest";
import { configDefaults } from "../src/config.js";
import { createLogger } from "../src/logger.js";
import { startAccessd } from "../src/main.js";
import { DatabaseInUseError, servingLockPath } from "../src/store/serving-lock.js";
import { serveProcess } from "./support/served-process.js";
import { scratch } from "./support/scratch.js";
import { spawnCli } from "./support/spawn-cli.js";
import { startTestServer } from "./support/test-server.js";

/**
 * One process serves a database (README "Operating it"): its read caches and its worker assume no
 * other process writes. A second `accessd serve` (on another port) or `accessd bootstrap` on a
 * served database must stop at once with a line that says so, not run beside it.
 */

const { tempDir, track } = scratch("accessd-lock-");
const tempDatabase = () => join(tempDir(), "accessd.db");

describe("one process serves a database", () => {
  it("refuses a second server on a database in use, in this process too, and serves again once the first has stopped", async () => {
    const database = tempDatabase();
    const first = await startTestServer({ database });
    const second = startAccessd({ ...configDefaults, port: 0, database }, createLogger("silent"));
    await expect(second).rejects.toThrow(DatabaseInUseError);
    expect(readdirSync(dirname(database)).sort()).toEqual(["accessd.db", "accessd.db-shm", "accessd.db-wal", "accessd.db.key", "accessd.db.lock"]);
    await expect(second).rejects.toThrow(
      `another accessd process is using the database ${database} (it holds ${servingLockPath(database)})`,
    );
    expect((await fetch(`${first.url}/healthz`)).status).toBe(200);

    await first.close();
    const third = await startTestServer({ database });
    await third.close();
  });

  it("finds the same lock through a symbolic link to the database file, and refuses a database with a second hard link", async () => {
    const database = tempDatabase();
    const first = await startTestServer({ database });
    const alias = join(tempDir(), "alias.db");
    symlinkSync(database, alias);
    copyFileSync(`${database}.key`, `${alias}.key`);
    await expect(startAccessd({ ...configDefaults, port: 0, database: alias }, createLogger("silent"))).rejects.toThrow(
      `another accessd process is using the database ${alias} (it holds ${database}.lock)`,
    );
    await first.close();

    const hardLink = join(dirname(database), "second-name.db");
    linkSync(database, hardLink);
    for (const name of [database, hardLink]) {
      await expect(startAccessd({ ...configDefaults, port: 0, database: name }, createLogger("silent"))).rejects.toThrow(
        `the database ${name} has 2 hard links`,
      );
    }
  });

  it("names the lock file when something else stands where it should be", async () => {
    const database = tempDatabase();
    writeFileSync(servingLockPath(database), "not a lock\n");
    await expect(startTestServer({ database })).rejects.toThrow(
      `cannot take the serving lock ${servingLockPath(database)}: file is not a database`,
    );
  });

  it("`accessd serve` and `accessd bootstrap` on a served database exit 1 with one line; after a SIGKILL the next start takes over", async () => {
    const database = tempDatabase();
    const first = await serveProcess({ ACCESSD_DATABASE: database });
    track(first.cli);
    const refusal = `accessd: another accessd process is using the database ${database} (it holds ${servingLockPath(database)}); one process serves a database: stop that one first`;

    for (const args of [["serve"], ["bootstrap"]]) {
      const cli = spawnCli(args, { ACCESSD_DATABASE: database, ACCESSD_PORT: "0" });
      track(cli);
      expect(await cli.exited).toEqual({ code: 1, signal: null });
      expect(cli.stderr().trim().split("\n")).toEqual([refusal]);
      expect(cli.stdout()).not.toContain("client_secret");
    }

    // The kernel drops the lock with the process, however it ends: no stale lock to clean up.
    first.cli.child.kill("SIGKILL");
    await first.cli.exited;
    const next = await serveProcess({ ACCESSD_DATABASE: database });
    track(next.cli);
    next.cli.child.kill("SIGTERM");
    expect(await next.cli.exited).toEqual({ code: 0, signal: null });
  });
});
