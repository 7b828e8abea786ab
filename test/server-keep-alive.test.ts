import { once } from "node:events";
import { connect as http2Connect } from "node:http2";
import { connect as netConnect, type Socket } from "node:net";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import BetterSqlite3 from "better-sqlite3";
import { afterAll, describe, expect, it } from "vitest";
import { scratch } from "./support/scratch.js";
import { processBootstrapClient, serveProcess, type ServedProcess } from "./support/served-process.js";

/**
 * An idle HTTP/1.1 keep-alive connection is closed after 5 s (README, "Operating it"). Node closes
 * it from a timer, and timers run before the sockets are read: after the server's one thread was
 * held past that timeout (a write waiting up to 5 s on another process's lock), a request its
 * client sent meanwhile lay unread in the socket, and the client got a connection reset instead
 * of its answer (a probe: 8 keep-alive clients, 8 resets).
 */

const { tempDir } = scratch("accessd-keep-alive-");
const started: ServedProcess[] = [];
afterAll(() => {
  for (const served of started) served.cli.child.kill("SIGKILL");
});

/** HTTP/1.1 answers read off `socket` (their status lines), and how it ended. */
function answersOn(socket: Socket): { statuses: () => string[]; ended: () => string | undefined } {
  let received = "";
  let ended: string | undefined;
  socket.on("data", (chunk: Buffer) => (received += chunk.toString()));
  socket.on("error", (e: NodeJS.ErrnoException) => (ended ??= e.code));
  socket.on("close", () => (ended ??= "closed"));
  return { statuses: () => received.match(/HTTP\/1\.1 \d{3}/g) ?? [], ended: () => ended };
}

describe("an idle HTTP/1.1 keep-alive connection", () => {
  it("answers a request its client sent while the thread was held past the keep-alive timeout by a locked database (it was reset, unread)", async () => {
    const database = join(tempDir(), "accessd.db");
    const served = await serveProcess({ ACCESSD_DATABASE: database });
    started.push(served);
    const tokenAnswer = await fetch(`${served.url}/auth/v1/token`, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({
        grant_type: "client_credentials",
        client_id: processBootstrapClient.ACCESSD_BOOTSTRAP_CLIENT_ID,
        client_secret: processBootstrapClient.ACCESSD_BOOTSTRAP_CLIENT_SECRET,
      }),
    });
    const { access_token: token } = (await tokenAnswer.json()) as { access_token: string };
    const port = Number(new URL(served.url).port);
    const reader = netConnect(port, "127.0.0.1");
    await once(reader, "connect");
    const read = answersOn(reader);
    const health = "GET /healthz HTTP/1.1\r\nHost: accessd\r\n\r\n";
    reader.write(health);
    await sleep(1_500); // answered: the connection is idle, and its keep-alive timeout runs (5 s, which Node stretches by 1 s)

    const holder = new BetterSqlite3(database, { timeout: 0 });
    holder.exec("BEGIN IMMEDIATE"); // another process's write lock, held past the server's 5 s busy timeout
    try {
      const writer = netConnect(port, "127.0.0.1");
      await once(writer, "connect");
      const write = answersOn(writer);
      // A write that waits for the lock: the thread is held for 5 s from here, past the timeout.
      const body = '{"displayName":"waits for the lock"}';
      writer.write(`POST /api/v1/apps HTTP/1.1\r\nHost: accessd\r\nAuthorization: Bearer ${token}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
      await sleep(500);
      reader.write(health); // sent while the thread is held
      await sleep(6_000);
      expect(write.statuses()).toEqual(["HTTP/1.1 503"]); // the lock, past the busy timeout
    } finally {
      holder.exec("ROLLBACK");
      holder.close();
    }
    for (let waited = 0; read.statuses().length < 2 && read.ended() === undefined && waited < 3_000; waited += 50) await sleep(50);
    expect({ statuses: read.statuses(), ended: read.ended() }).toEqual({ statuses: ["HTTP/1.1 200", "HTTP/1.1 200"], ended: undefined });
    reader.destroy();

    // One that stays idle is still closed after its timeout.
    const idle = netConnect(port, "127.0.0.1");
    await once(idle, "connect");
    const quiet = answersOn(idle);
    idle.write(health);
    const answeredAt = performance.now();
    for (let waited = 0; quiet.ended() === undefined && waited < 10_000; waited += 100) await sleep(100);
    expect({ statuses: quiet.statuses(), ended: quiet.ended() }).toEqual({ statuses: ["HTTP/1.1 200"], ended: "closed" });
    expect(performance.now() - answeredAt).toBeGreaterThan(4_900);
  });
});

describe("an idle HTTP/2 session", () => {
  it("answers a call its client sent while the process was held past the session's idle timeout (the GOAWAY refused it, unread: REFUSED_STREAM)", async () => {
    // Idle sessions are closed after twice the request timeout: 2 s here.
    const served = await serveProcess({ ACCESSD_DATABASE: join(tempDir(), "accessd.db"), ACCESSD_REQUEST_TIMEOUT: "1s" });
    started.push(served);
    const session = http2Connect(served.url);
    session.on("error", () => {});
    const get = (path: string) =>
      new Promise<string>((resolve) => {
        const stream = session.request({ ":path": path });
        let status = "";
        stream.on("response", (headers) => (status = String(headers[":status"])));
        stream.on("error", (e: NodeJS.ErrnoException) => resolve(e.code ?? e.message));
        stream.on("close", () => resolve(status));
        stream.resume();
      });
    try {
      expect(await get("/healthz")).toBe("200");
      await sleep(1_000);
      served.cli.child.kill("SIGSTOP"); // a paused VM, a thread held: the idle timer comes due meanwhile
      await sleep(1_500);
      const answer = get("/healthz"); // sent while the process is held
      await sleep(500);
      served.cli.child.kill("SIGCONT");
      expect(await answer).toBe("200");
    } finally {
      served.cli.child.kill("SIGCONT");
      session.close();
    }
  });
});

describe("a request whose body arrived while the process was held", () => {
  it("is answered, not cut as late: the request deadline's timer ran before the body that had arrived was read (408)", async () => {
    const served = await serveProcess({ ACCESSD_DATABASE: join(tempDir(), "accessd.db"), ACCESSD_REQUEST_TIMEOUT: "1s" });
    started.push(served);
    const body = new URLSearchParams({
      grant_type: "client_credentials",
      client_id: processBootstrapClient.ACCESSD_BOOTSTRAP_CLIENT_ID,
      client_secret: processBootstrapClient.ACCESSD_BOOTSTRAP_CLIENT_SECRET,
    }).toString();
    const socket = netConnect(Number(new URL(served.url).port), "127.0.0.1");
    await once(socket, "connect");
    const read = answersOn(socket);
    try {
      socket.write(`POST /auth/v1/token HTTP/1.1\r\nHost: accessd\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: ${body.length}\r\n\r\n`);
      await sleep(300); // the headers are read, and the request's 1 s deadline runs
      served.cli.child.kill("SIGSTOP");
      socket.write(body); // all of it, while the process is held past the deadline
      await sleep(1_500);
      served.cli.child.kill("SIGCONT");
      for (let waited = 0; read.statuses().length === 0 && waited < 5_000; waited += 50) await sleep(50);
      expect(read.statuses()).toEqual(["HTTP/1.1 200"]);
    } finally {
      served.cli.child.kill("SIGCONT");
      socket.destroy();
    }
  });
});
