import { execFileSync } from "node:child_process";
import { once } from "node:events";
import { chmodSync, closeSync, existsSync, mkdirSync, openSync, rmSync, writeFileSync, writeSync } from "node:fs";
import { createServer as createNetServer, type AddressInfo } from "node:net";
import { join } from "node:path";
import { describe, expect, it, type TestContext } from "vitest";
import { damagedDatabaseMessage } from "../src/main.js";
import { dataKeyFilePath } from "../src/store/data-key.js";
import { servingLockPath } from "../src/store/serving-lock.js";
import { scratch } from "./support/scratch.js";
import { builtCli, listeningPort, spawnCli, type CliProcess } from "./support/spawn-cli.js";
import { bootstrapAuthorization, startLoggedAccessd, startTestServer } from "./support/test-server.js";
import { newId } from "../src/store/ids.js";
import BetterSqlite3 from "better-sqlite3";
import { v7 as uuidv7 } from "uuid";

/**
 * A start that cannot use its database or key file stops before it listens, with one line naming
 * the file (README "Configuration"): SQLite's and fs's own messages ("file is not a database",
 * "EISDIR: illegal operation on a directory, read") name neither, and a database the process can
 * only read started, logged "accessd listening", and died at its first write.
 */

const { tempDir, track } = scratch("accessd-start-errors-");

function serve(env: Record<string, string>): CliProcess {
  return track(spawnCli(["serve"], { ACCESSD_PORT: "0", ...env }));
}

/** A database (and its key file) a server has started on and stopped: migrated, sealed under its key file. */
async function startedDatabase(): Promise<string> {
  const database = join(tempDir(), "accessd.db");
  await (await startTestServer({ database })).close();
  return database;
}

async function expectStopsWith(cli: CliProcess, code: number, line: string): Promise<void> {
  expect(await cli.exited).toEqual({ code, signal: null });
  expect(cli.stderr().trim().split("\n")).toEqual([line]);
  expect(cli.stdout()).not.toContain("accessd listening");
}

/**
 * Makes `file` a file this process cannot write. As root, file modes do not stop writes, so the
 * file is made immutable (`chattr +i`, which needs CAP_LINUX_IMMUTABLE and a file system that has
 * the flag); returns an undo, or undefined when neither way is open here.
 */
function makeReadOnly(file: string): (() => void) | undefined {
  if (process.getuid?.() !== 0) {
    chmodSync(file, 0o444);
    return () => chmodSync(file, 0o644);
  }
  try {
    execFileSync("chattr", ["+i", file], { stdio: "ignore" });
  } catch {
    return undefined;
  }
  return () => execFileSync("chattr", ["-i", file], { stdio: "ignore" });
}

/**
 * Makes `file` (the database or one of its files) unwritable, expects a start on `database` to stop
 * naming it, and makes it writable again; false (the test skipped) where no file can be made unwritable.
 */
async function expectStopsNamingUnwritable(context: TestContext, database: string, file: string): Promise<boolean> {
  const undo = makeReadOnly(file);
  if (undo === undefined) {
    context.skip("running as root without `chattr +i` on this file system: no way to make a file root cannot write");
    return false;
  }
  try {
    await expectStopsWith(
      serve({ ACCESSD_DATABASE: database }),
      1,
      `accessd: cannot open the database ${database}: attempt to write a readonly database (not writable: ${file})`,
    );
  } finally {
    undo();
  }
  return true;
}

describe("a start whose database or key file cannot be used", () => {
  it("names the database whose path runs through a file (Node's bare ENOTDIR named nothing)", async () => {
    const file = join(tempDir(), "notes.txt");
    writeFileSync(file, "notes\n");
    const database = join(file, "accessd.db");
    await expectStopsWith(serve({ ACCESSD_DATABASE: database }), 1, `accessd: cannot open the database ${database}: a part of its path is a file, not a folder`);
  });

  it("names a folder given as the database, and makes no lock file beside it", async () => {
    const folder = join(tempDir(), "accessd.db");
    mkdirSync(folder);
    await expectStopsWith(serve({ ACCESSD_DATABASE: folder }), 1, `accessd: cannot open the database ${folder}: it is a folder, not a file`);
    expect(existsSync(`${folder}.lock`)).toBe(false);
  });

  it("names a file that is not a database", async () => {
    const database = join(tempDir(), "notes.db");
    writeFileSync(database, "these are my notes, not a database\n".repeat(100));
    await expectStopsWith(serve({ ACCESSD_DATABASE: database }), 1, `accessd: cannot open the database ${database}: file is not a database`);
  });

  it("names it in `accessd bootstrap` and `rotate-data-key` too, which open the database without a server", async () => {
    const database = join(tempDir(), "notes.db");
    writeFileSync(database, "these are my notes, not a database\n".repeat(100));
    for (const command of ["bootstrap", "rotate-data-key"]) {
      const cli = track(spawnCli([command], { ACCESSD_DATABASE: database }));
      await expectStopsWith(cli, 1, `accessd: cannot open the database ${database}: file is not a database`);
    }
  });

  it("refuses to bootstrap a client in a :memory: database, whose secret it printed for a client gone at once", async () => {
    await expectStopsWith(
      track(spawnCli(["bootstrap"], { ACCESSD_DATABASE: ":memory:" })),
      1,
      "accessd: ACCESSD_DATABASE is :memory:; a client bootstrapped there is gone when this command ends (use ACCESSD_BOOTSTRAP_CLIENT_ID/_SECRET with the server)",
    );
  });

  it("names it in `accessd backup` too", async () => {
    const dir = tempDir();
    const database = join(dir, "notes.db");
    writeFileSync(database, "these are my notes, not a database\n".repeat(100));
    writeFileSync(dataKeyFilePath(database), `${"k".repeat(43)}\n`, { mode: 0o600 });
    await expectStopsWith(
      track(spawnCli(["backup", join(dir, "copy.db")], { ACCESSD_DATABASE: database })),
      1,
      `accessd: cannot open the database ${database}: file is not a database`,
    );
    const folder = join(dir, "folder.db");
    mkdirSync(folder);
    await expectStopsWith(
      track(spawnCli(["backup", join(dir, "copy.db")], { ACCESSD_DATABASE: folder })),
      1,
      `accessd: cannot open the database ${folder}: it is a folder, not a file`,
    );
  });

  it("names a database damaged past its header, which opens and fails its first read of a damaged page", async () => {
    const database = await startedDatabase();
    const fd = openSync(database, "r+");
    try {
      writeSync(fd, Buffer.alloc(10 * 4096, 0xff), 0, 10 * 4096, 3 * 4096); // pages 4 to 13; page 1 (the header and schema) intact
    } finally {
      closeSync(fd);
    }
    await expectStopsWith(serve({ ACCESSD_DATABASE: database }), 1, `accessd: cannot open the database ${database}: database disk image is malformed`);
  });

  it("names a key file path that is a folder (exit 2, as for every key file that does not serve)", async () => {
    const database = await startedDatabase();
    const keyFile = dataKeyFilePath(database);
    rmSync(keyFile);
    mkdirSync(keyFile);
    await expectStopsWith(
      serve({ ACCESSD_DATABASE: database }),
      2,
      `accessd: invalid configuration: ACCESSD_DATA_KEY: not set, and the key file ${keyFile} cannot be read: EISDIR: illegal operation on a directory, read`,
    );
  });

  it("says the volume is full when a start on a full volume fails (SQLite says 'disk I/O error': it read as failing hardware)", async (context) => {
    const volume = join(tempDir(), "volume");
    mkdirSync(volume);
    try {
      execFileSync("mount", ["-t", "tmpfs", "-o", "size=2m", "tmpfs", volume], { stdio: "ignore" });
    } catch {
      context.skip(); // needs root and a mount namespace that allows it
      return;
    }
    try {
      const database = join(volume, "accessd.db");
      await (await startTestServer({ database })).close();
      try {
        execFileSync("dd", ["if=/dev/zero", `of=${join(volume, "filler")}`, "bs=64k"], { stdio: "ignore" });
      } catch {
        // dd stops at the full volume
      }
      const cli = serve({ ACCESSD_DATABASE: database });
      expect(await cli.exited).toEqual({ code: 1, signal: null });
      expect(cli.stderr().trim()).toMatch(new RegExp(`^accessd: cannot open the database ${database}: .* \\(its volume is full: free some space\\)$`));
    } finally {
      execFileSync("umount", [volume], { stdio: "ignore" });
    }
  });

  it("stops before it listens, naming the lock file, when it cannot write the serving lock (SQLite opened it read-only and took a shared lock: two servers ran on one database)", async (context) => {
    const database = await startedDatabase();
    const lockFile = servingLockPath(database);
    const undo = makeReadOnly(lockFile);
    if (undo === undefined) {
      context.skip("running as root without `chattr +i` on this file system: no way to make a file root cannot write");
      return;
    }
    try {
      await expectStopsWith(
        serve({ ACCESSD_DATABASE: database }),
        1,
        `accessd: cannot take the serving lock ${lockFile}: this process cannot write it (its owner or mode, a read-only volume); make it writable by the server's user, or remove it while no server runs`,
      );
    } finally {
      undo();
    }
  });

  it("stops before it listens, naming the file, on a database it cannot write", async (context) => {
    const database = await startedDatabase();
    if (!(await expectStopsNamingUnwritable(context, database, database))) return;
    const again = serve({ ACCESSD_DATABASE: database }); // writable again: serves
    await listeningPort(again);
    again.child.kill("SIGTERM");
    expect(await again.exited).toEqual({ code: 0, signal: null });
  });
});

describe("an address it cannot listen on", () => {
  it("names ACCESSD_HOST for an address that is none of this machine's (exit 2; it was Node's getaddrinfo error, exit 1)", async () => {
    const cli = serve({ ACCESSD_DATABASE: await startedDatabase(), ACCESSD_HOST: "999.999.999.999" });
    expect(await cli.exited).toEqual({ code: 2, signal: null });
    expect(cli.stderr().trim()).toMatch(
      /^accessd: invalid configuration: ACCESSD_HOST: 999\.999\.999\.999 is not an address this machine can listen on \(getaddrinfo \w+ 999\.999\.999\.999\)$/,
    );
  });

  it("says a port is taken, naming the variables (exit 1)", async () => {
    const squatter = createNetServer();
    await new Promise<void>((resolve) => squatter.listen(0, "127.0.0.1", resolve));
    const { port } = squatter.address() as AddressInfo;
    try {
      await expectStopsWith(
        serve({ ACCESSD_DATABASE: await startedDatabase(), ACCESSD_PORT: String(port) }),
        1,
        `accessd: cannot listen on 127.0.0.1:${port}: something else listens there (ACCESSD_HOST, ACCESSD_PORT)`,
      );
    } finally {
      squatter.close();
    }
  });
});

describe("a database whose -shm file cannot be written", () => {
  it("names that file, not only the database (a start on a read-only database leaves its -shm read-only)", async (context) => {
    const database = await startedDatabase();
    const shm = `${database}-shm`;
    writeFileSync(shm, Buffer.alloc(32_768));
    await expectStopsNamingUnwritable(context, database, shm);
  });
});

describe("a key file or a database that others can read", () => {
  /** The warnings of a start on `database` that is then stopped gracefully. */
  async function startWarnings(database: string): Promise<{ keyFile?: string; database?: string; mode?: string; msg: string }[]> {
    const cli = serve({ ACCESSD_DATABASE: database });
    await listeningPort(cli);
    cli.child.kill("SIGTERM");
    expect(await cli.exited).toEqual({ code: 0, signal: null });
    return cli
      .stdout()
      .split("\n")
      .filter((line) => line.includes('"level":40') && !line.includes("the thread was held")) // a loaded machine's, not the start's
      .map((line) => JSON.parse(line) as { keyFile?: string; database?: string; mode?: string; msg: string });
  }

  it("is used, with a warning at start naming the file and its mode; a 0600 one gets none", async () => {
    const database = await startedDatabase();
    const keyFile = dataKeyFilePath(database);
    expect(await startWarnings(database)).toEqual([]);

    chmodSync(keyFile, 0o644);
    expect(await startWarnings(database)).toMatchObject([
      {
        keyFile,
        mode: "0644",
        msg: "the data key file is open to group or others: whoever reads it opens every secret of a copy of the database; make it mode 0600",
      },
    ]);

    // A database an older build made 0644 (it kept its mode, and nothing said so).
    chmodSync(keyFile, 0o600);
    chmodSync(database, 0o644);
    expect(await startWarnings(database)).toMatchObject([
      {
        database,
        mode: "0644",
        msg: "the database file is open to group or others: it holds personal data, webhook bodies and the hashes of client secrets; make it (and its -wal and -shm) mode 0600",
      },
    ]);
  });
});

describe("ACCESSD_TRUSTED_PROXIES naming every address", () => {
  it("is taken, with a warning at start that any sender's X-Forwarded-For is then believed (it was silent); a proxy's own range gets none", async () => {
    const warnings = async (trustedProxies: string[]) => {
      const { accessd, lines } = await startLoggedAccessd("warn", { trustedProxies });
      await accessd.close();
      return lines().filter((line) => typeof line.msg === "string" && line.msg.startsWith("ACCESSD_TRUSTED_PROXIES"));
    };
    expect(await warnings(["10.0.0.0/8", "0.0.0.0/0", "::/0"])).toMatchObject([{ level: 40, trustedProxies: ["0.0.0.0/0", "::/0"] }]);
    expect(await warnings(["10.0.0.0/8"])).toEqual([]);
  });

  it("with a range whose host bits are set (10.0.0.1/8 trusts all of 10.0.0.0/8) is taken with a warning naming the network", async () => {
    const { accessd, lines } = await startLoggedAccessd("warn", { trustedProxies: ["10.0.0.1/8", "192.0.2.7", "2001:db8::5/64"] });
    await accessd.close();
    expect(lines().filter((line) => typeof line.msg === "string" && line.msg.startsWith("ACCESSD_TRUSTED_PROXIES"))).toMatchObject([
      { level: 40, trustedProxies: ["10.0.0.1/8", "2001:db8::5/64"], trustedNetworks: ["10.0.0.0/8", "2001:db8::/64"] },
    ]);
  });
});

describe("the one-shot commands' mistakes and output", () => {
  it("names a mistyped command as unknown (it read \"too many arguments for 'serve'\")", async () => {
    const cli = track(spawnCli(["bootstap"], {}));
    expect(await cli.exited).toEqual({ code: 1, signal: null });
    expect(cli.stderr().trim()).toBe(
      'accessd: unknown command "bootstap": the commands are serve, bootstrap, backup, rotate-data-key, rotate-signing-key, webhook (accessd --help)',
    );
  });

  it("names an ACCESSD_* variable it does not read, and the database it wrote to (a typo of ACCESSD_DATABASE made bootstrap write ./data/accessd.db without a word)", async () => {
    const folder = tempDir();
    const cli = track(spawnCli(["bootstrap"], { ACCESSD_DATABASE: join(folder, "a.db"), ACCESSD_DATABSE: "/elsewhere.db" }, folder));
    expect(await cli.exited).toEqual({ code: 0, signal: null });
    expect(cli.stderr().trim().split("\n")).toEqual([
      "accessd: ignoring ACCESSD_* variables accessd does not read (a typo?): ACCESSD_DATABSE",
      `accessd: created in ${join(folder, "a.db")}; store the client_secret now, it is not shown again (only its hash is kept)`,
    ]);
  });

  it("says in one line, exit 1, when its output cannot be written, and what was done all the same (it was a stack trace)", async () => {
    const folder = tempDir();
    const { spawn } = await import("node:child_process");
    // stdout a pipe whose reader has closed it: the write fails with EPIPE.
    const child = spawn(process.execPath, [builtCli, "bootstrap"], {
      env: { PATH: process.env.PATH ?? "", ACCESSD_DATABASE: join(folder, "a.db") },
      stdio: ["ignore", "pipe", "pipe"],
    });
    child.stdout.destroy();
    let stderr = "";
    child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
    const [code] = (await once(child, "exit")) as [number];
    expect(code).toBe(1);
    expect(stderr).not.toContain("    at ");
    expect(stderr).not.toContain("store the client_secret now"); // said only once the secret is out
    expect(stderr).toMatch(/^accessd: the output could not be written to stdout \(EPIPE\); the client \S+ was created in \S+, and its secret is lost: delete it \(DELETE \/api\/v1\/iam\/clients\/\S+\) and bootstrap again$/m);
  });
});

describe("a database damaged where the start does not read", () => {
  it("serves until a request meets the damage, then answers it 503, says so once and is not ready (/readyz 503), as a restore over an old -wal leaves it", async () => {
    const database = join(tempDir(), "accessd.db");
    const seeding = await startTestServer({ database });
    const now = Date.now();
    seeding.store.transaction(() => {
      for (let i = 0; i < 3_000; i++) {
        seeding.store.users.insert({ id: newId(), displayName: `user ${i} ${"x".repeat(40)}`, email: "", username: "", createdAt: now, updatedAt: now, roles: [] });
      }
    });
    await seeding.close();
    const leafPages = new BetterSqlite3(database, { readonly: true })
      .prepare<[], number>("SELECT pageno FROM dbstat WHERE name = 'users' AND pagetype = 'leaf' ORDER BY pageno")
      .pluck()
      .all();
    const damaged = leafPages[Math.floor(leafPages.length / 2)] ?? 0;
    const fd = openSync(database, "r+");
    try {
      writeSync(fd, Buffer.alloc(4096, 0xff), 0, 4096, (damaged - 1) * 4096);
    } finally {
      closeSync(fd);
    }

    const { accessd, lines } = await startLoggedAccessd("error", { database });
    try {
      const ready = () => fetch(`${accessd.url}/readyz`).then((res) => res.status);
      expect(await ready()).toBe(200); // the start read nothing damaged
      const { authorization } = await bootstrapAuthorization(accessd.url);
      let pageToken = "";
      const statuses: number[] = [];
      do {
        const res = await fetch(`${accessd.url}/api/v1/users?pageSize=1000&pageToken=${pageToken}`, { headers: { authorization } });
        statuses.push(res.status);
        pageToken = res.status === 200 ? ((await res.json()) as { nextPageToken: string }).nextPageToken : "";
      } while (pageToken !== "");
      expect(statuses.at(-1)).toBe(503); // a damaged page is the store failing, as an I/O error is (500 before)
      expect(await ready()).toBe(503);
      await fetch(`${accessd.url}/api/v1/users?pageSize=1000`, { headers: { authorization } }); // again: no second line
      expect(lines().filter((line) => line.msg === damagedDatabaseMessage)).toEqual([
        expect.objectContaining({ level: 50, database, err: expect.objectContaining({ code: "SQLITE_CORRUPT" }) }),
      ]);
    } finally {
      await accessd.close();
    }
  });
});

describe("a database whose newest record is ahead of the clock (the clock stepped back, or was ahead when it was written)", () => {
  // Last in this file: the ids made after it continue a day ahead, for the rest of this process.
  it("continues its ids after that record, so listings stay in creation order, and says so at the start (new ids sorted before it)", async () => {
    const database = join(tempDir(), "accessd.db");
    const seeding = await startTestServer({ database });
    const now = Date.now();
    const ahead = uuidv7({ msecs: now + 86_400_000 });
    seeding.store.apps.insert({ id: ahead, displayName: "made a day ahead", description: "", createdAt: now + 86_400_000, updatedAt: now + 86_400_000 });
    await seeding.close();

    const { accessd, lines } = await startLoggedAccessd("warn", { database });
    try {
      expect(lines()).toEqual([
        expect.objectContaining({
          level: 40,
          newestRecordAt: new Date(now + 86_400_000).toISOString(),
          continued: true,
          msg: "the newest record was made at a time still to come by this clock (it stepped back, or was ahead): new ids continue after it, so listings stay in creation order",
        }),
      ]);
      const { authorization } = await bootstrapAuthorization(accessd.url);
      const created = await fetch(`${accessd.url}/api/v1/apps`, { method: "POST", headers: { authorization, "content-type": "application/json" }, body: '{"displayName":"made now"}' });
      const { app } = (await created.json()) as { app: { id: string } };
      expect(app.id > ahead).toBe(true);
      const listed = (await (await fetch(`${accessd.url}/api/v1/apps`, { headers: { authorization } })).json()) as { list: { displayName: string }[] };
      expect(listed.list.map((a) => a.displayName)).toEqual(["made a day ahead", "made now"]);
    } finally {
      await accessd.close();
    }
  });
});
