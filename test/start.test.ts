import { existsSync, readFileSync } from "node:fs";
import { request as httpRequest, Agent } from "node:http";
import { connect as http2Connect, type ClientHttp2Session } from "node:http2";
import { connect, createServer } from "node:net";
import { join } from "node:path";
import { Code, ConnectError, createClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { beforeAll, describe, expect, it } from "vitest";
import { Apps } from "../gen/svc/api/app/v1/app_pb.js";
import { scratch } from "./support/scratch.js";
import { until } from "./support/served-process.js";
import { builtCli, repoRoot, listeningPort, spawnCli, type CliProcess } from "./support/spawn-cli.js";

const { tempDir, track } = scratch("accessd-start-");

const bootstrap = { ACCESSD_BOOTSTRAP_CLIENT_ID: "start-test", ACCESSD_BOOTSTRAP_CLIENT_SECRET: "start-test-secret-0123456789" };

async function serve(cwd: string): Promise<{ cli: CliProcess; url: string }> {
  const cli = spawnCli(["serve"], { ACCESSD_PORT: "0", ...bootstrap }, cwd);
  track(cli);
  const port = await listeningPort(cli);
  return { cli, url: `http://127.0.0.1:${port}` };
}

/** The Authorization header for API calls: a bootstrap client's token once auth exists, none before. */
async function authHeaders(url: string): Promise<Record<string, string>> {
  const res = await fetch(`${url}/auth/v1/token`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({
      grant_type: "client_credentials",
      client_id: bootstrap.ACCESSD_BOOTSTRAP_CLIENT_ID,
      client_secret: bootstrap.ACCESSD_BOOTSTRAP_CLIENT_SECRET,
    }).toString(),
  });
  if (res.status === 404) return {};
  expect(res.status).toBe(200);
  const token = (await res.json()) as { access_token: string };
  return { authorization: `Bearer ${token.access_token}` };
}

/** A raw HTTP/1.1 connection: what it received (errors as `<message>`), and all of it once closed. */
const healthz = "GET /healthz HTTP/1.1\r\nhost: accessd\r\n\r\n";

/** A server, and a raw HTTP/1.1 keep-alive connection to it that has been answered one /healthz. */
async function serveWithAnsweredConnection(): Promise<{ cli: CliProcess; connection: ReturnType<typeof rawConnection> }> {
  const { cli, url } = await serve(tempDir());
  const connection = rawConnection(url);
  connection.socket.write(healthz);
  await until("the first answer arrived", () => connection.received().includes('{"status":"ok"}'));
  return { cli, connection };
}

/**
 * Sends SIGTERM, then, once the server says it is shutting down, `request` on `connection`: it
 * must be answered 200 with Connection: close, and the server exit 0.
 */
async function expectClosingAnswerAfterSigterm(cli: CliProcess, connection: ReturnType<typeof rawConnection>, request: string): Promise<void> {
  cli.child.kill("SIGTERM");
  await until("the server began shutting down", () => cli.stdout().includes('"shutting down"'));
  connection.socket.write(request);
  const answer = await connection.closed;
  expect(answer).toMatch(/^HTTP\/1\.1 200 /);
  expect(answer.toLowerCase()).toContain("\r\nconnection: close\r\n");
  expect(await cli.exited).toEqual({ code: 0, signal: null });
}

/** A server, and an HTTP/2 session to it that has served one request (so the server tracks it). */
async function serveWithUsedHttp2Session(): Promise<{ cli: CliProcess; session: ClientHttp2Session }> {
  const { cli, url } = await serve(tempDir());
  const session = http2Connect(url);
  session.on("error", () => {});
  await new Promise<void>((resolve) => session.request({ ":path": "/healthz" }).on("close", () => resolve()).resume());
  return { cli, session };
}

/** Sets `headers` on every call (the bearer token). */
function withHeaders(headers: Record<string, string>): Interceptor {
  return (next) => (req) => {
    for (const [name, value] of Object.entries(headers)) req.header.set(name, value);
    return next(req);
  };
}

function rawConnection(url: string) {
  const socket = connect({ host: "127.0.0.1", port: Number(new URL(url).port) });
  let received = "";
  socket.setEncoding("latin1").on("data", (chunk: string) => (received += chunk));
  socket.on("error", (e) => (received += `\n<${e.message}>`));
  return {
    socket,
    received: () => received,
    /** Drops what was received so far. */
    forget: () => void (received = ""),
    closed: new Promise<string>((resolve) => socket.on("close", () => resolve(received))),
  };
}

describe("npm start (accessd serve)", () => {
  it("is what `npm start` and the accessd bin run", () => {
    const pkg = JSON.parse(readFileSync(join(repoRoot, "package.json"), "utf8")) as {
      scripts: Record<string, string>;
      bin: Record<string, string>;
    };
    // exec: the shell npm runs the script in becomes the server, so npm's SIGTERM reaches it (the
    // shell died of it and left the server running on, orphaned).
    expect(pkg.scripts.start).toBe("exec node dist/src/cli/main.js serve");
    expect(pkg.bin.accessd).toBe("dist/src/cli/main.js");
    expect(pkg.scripts.bench).toBe("tsx bench/run.ts");
  });

  it("creates ./data/accessd.db in its working directory, answers /healthz and /readyz, keeps data across restarts and exits 0 on SIGTERM", async () => {
    const cwd = tempDir();
    const first = await serve(cwd);
    expect(existsSync(join(cwd, "data", "accessd.db"))).toBe(true);
    expect(first.cli.stdout()).toContain('"database":"./data/accessd.db"');

    const health = await fetch(`${first.url}/healthz`);
    expect(health.status).toBe(200);
    expect((await fetch(`${first.url}/readyz`)).status).toBe(200);

    const created = await fetch(`${first.url}/api/v1/apps`, {
      method: "POST",
      headers: { ...(await authHeaders(first.url)), "content-type": "application/json" },
      body: JSON.stringify({ displayName: "Persisted" }),
    });
    expect(created.status).toBe(200);
    const appId = ((await created.json()) as { app: { id: string } }).app.id;

    first.cli.child.kill("SIGTERM");
    expect(await first.cli.exited).toEqual({ code: 0, signal: null });
    expect(first.cli.stdout()).toContain("accessd stopped");

    const second = await serve(cwd);
    const got = await fetch(`${second.url}/api/v1/apps/${appId}`, { headers: await authHeaders(second.url) });
    expect(got.status).toBe(200);
    second.cli.child.kill("SIGTERM");
    expect((await second.cli.exited).code).toBe(0);
  });

  it("stops when `npm start` itself gets SIGTERM (a supervisor stopping npm left the server running, orphaned, holding the lock)", async () => {
    const { spawn } = await import("node:child_process");
    const folder = tempDir();
    const inherited = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("ACCESSD_") && !k.startsWith("npm_")));
    const npm = spawn("npm", ["start", "--silent"], {
      cwd: repoRoot,
      env: { ...inherited, ACCESSD_DATABASE: join(folder, "a.db"), ACCESSD_PORT: "0" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    npm.stdout.on("data", (c: Buffer) => (out += c.toString()));
    const exited = new Promise<number | null>((resolve) => npm.once("exit", (code) => resolve(code)));
    const cli: CliProcess = { child: npm, stdout: () => out, stderr: () => "", exited: exited.then((code) => ({ code, signal: null })) };
    const port = await listeningPort(cli);
    npm.kill("SIGTERM");
    await exited;
    await until("the server stopped", async () => fetch(`http://127.0.0.1:${port}/healthz`).then(() => false, () => true), 10_000);
    expect(out).toContain("shutting down");
  });

  it("stops gracefully (exit 0) on a SIGTERM that comes while it is still starting", async () => {
    const cli = spawnCli(["serve"], { ACCESSD_PORT: "0", ...bootstrap }, tempDir());
    track(cli);
    // The bootstrap client's line is written part-way through the start, before the listen.
    await until("the start is part-way", () => cli.stdout().includes("bootstrap Super Admin client") || cli.child.exitCode !== null, 20_000);
    cli.child.kill("SIGTERM");
    expect(await cli.exited).toEqual({ code: 0, signal: null });
    const messages = cli.stdout().split("\n").filter((l) => l !== "").map((l) => (JSON.parse(l) as { msg: string }).msg);
    expect(messages.slice(-3)).toEqual(["accessd listening", "shutting down", "accessd stopped"]);
  });

  it("shuts down promptly on SIGTERM while a client holds an idle keep-alive connection", async () => {
    const { cli, url } = await serve(tempDir());
    const agent = new Agent({ keepAlive: true });
    await new Promise<void>((resolve, reject) => {
      const req = httpRequest(`${url}/healthz`, { agent }, (res) => {
        res.resume();
        res.on("end", () => resolve());
      });
      req.on("error", reject);
      req.end();
    });
    const started = Date.now();
    cli.child.kill("SIGTERM");
    expect(await cli.exited).toEqual({ code: 0, signal: null });
    expect(Date.now() - started).toBeLessThan(4_000);
    agent.destroy();
  });

  // SIGHUP too: what a server started in a terminal gets when the terminal closes.
  it.each(["SIGTERM", "SIGHUP"] as const)("reads to its end and answers a request whose body is still arriving when %s lands, then exits 0", async (signal) => {
    const { cli, url } = await serve(tempDir());
    const { authorization } = await authHeaders(url);
    const connection = rawConnection(url);
    const body = JSON.stringify({ displayName: "Created while the server stops" });
    const half = Math.floor(body.length / 2);
    connection.socket.write(
      `POST /api/v1/apps HTTP/1.1\r\nhost: accessd\r\nauthorization: ${authorization}\r\n` +
        `content-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body.slice(0, half)}`,
    );
    await new Promise((resolve) => setTimeout(resolve, 100)); // the server has read the headers and half the body

    cli.child.kill(signal);
    await until("the server began shutting down", () => cli.stdout().includes(`"signal":"${signal}","msg":"shutting down"`));
    await new Promise((resolve) => setTimeout(resolve, 1_100)); // past the idle connections' grace
    connection.socket.write(body.slice(half));
    const answer = await connection.closed;
    expect(answer).toMatch(/^HTTP\/1\.1 200 /);
    expect(answer).toContain("Created while the server stops");
    expect(await cli.exited).toEqual({ code: 0, signal: null });
  });

  it("sends GOAWAY to an HTTP/2 client on SIGTERM, finishes its stream whose body is still arriving, and exits 0", async () => {
    const { cli, url } = await serve(tempDir());
    const { authorization } = await authHeaders(url);
    const session = http2Connect(url);
    let goaway = false;
    session.on("goaway", () => (goaway = true));
    session.on("error", () => {});
    const stream = session.request({
      ":method": "POST",
      ":path": "/api/v1/apps",
      authorization: authorization ?? "",
      "content-type": "application/json",
    });
    const body = JSON.stringify({ displayName: "Created over HTTP/2 while the server stops" });
    const half = Math.floor(body.length / 2);
    stream.write(body.slice(0, half));
    const answer = new Promise<{ status: number; text: string }>((resolve, reject) => {
      let status = 0;
      let text = "";
      stream.on("response", (headers) => (status = Number(headers[":status"])));
      stream.setEncoding("utf8").on("data", (chunk: string) => (text += chunk));
      stream.on("end", () => resolve({ status, text }));
      stream.on("error", reject);
    });
    await new Promise((resolve) => setTimeout(resolve, 100)); // the server has the stream and half its body

    const started = Date.now();
    cli.child.kill("SIGTERM");
    await until("the client was told to go away", () => goaway);
    stream.end(body.slice(half));
    const { status, text } = await answer;
    expect(status).toBe(200);
    expect(text).toContain("Created over HTTP/2 while the server stops");
    expect(await cli.exited).toEqual({ code: 0, signal: null });
    expect(Date.now() - started).toBeLessThan(4_000);
    session.destroy();
  });

  it("answers, with Connection: close, a request that arrives on an idle keep-alive connection just after SIGTERM", async () => {
    // A client cannot know the server is stopping: a request it sends on a connection it holds
    // must be answered (or never read), not reset.
    const { cli, connection } = await serveWithAnsweredConnection();
    connection.forget();

    await expectClosingAnswerAfterSigterm(cli, connection, healthz);
  });

  it("answers, with Connection: close, the first request on a connection accepted just before SIGTERM with nothing in flight (the drain destroyed it unread: a reset)", async () => {
    const { cli, url } = await serve(tempDir());
    const connection = rawConnection(url); // a client that connects for each request
    await new Promise((resolve) => connection.socket.once("connect", resolve));
    await new Promise((resolve) => setTimeout(resolve, 100)); // accepted, nothing sent yet
    await expectClosingAnswerAfterSigterm(cli, connection, "GET /healthz HTTP/1.1\r\nhost: accessd\r\n\r\n");
  });

  it("serves the Connect calls an HTTP/2 client sends just after SIGTERM, or tells it to go elsewhere, never CANCELED or INTERNAL for a call not run (they all were: no GOAWAY, then a final one refusing streams on their way)", async () => {
    const { cli, url } = await serve(tempDir());
    const transport = createConnectTransport({ baseUrl: url, httpVersion: "2", interceptors: [withHeaders(await authHeaders(url))] });
    const apps = createClient(Apps, transport);
    await apps.list({}); // the session is open and used
    cli.child.kill("SIGTERM");
    const outcomes = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        apps.create({ displayName: `sent at the stop ${i}` }).then(
          () => "ok",
          (e: unknown) => Code[ConnectError.from(e).code],
        ),
      ),
    );
    expect(await cli.exited).toEqual({ code: 0, signal: null });
    expect(outcomes.filter((outcome) => outcome !== "ok" && outcome !== "Unavailable"), outcomes.join(", ")).toEqual([]);
  });

  it("sends an idle HTTP/2 session GOAWAY at the end of the stop's grace before its connection ends (the socket went first: calls sent then were reset, ECONNRESET or CANCEL)", async () => {
    const { cli, session } = await serveWithUsedHttp2Session();
    try {
      const goaway = new Promise<number>((resolve) => session.once("goaway", (code: number) => resolve(code)));
      const closed = new Promise<string>((resolve) => session.once("close", () => resolve("closed")));
      cli.child.kill("SIGTERM");
      expect(await Promise.race([goaway.then((code) => `goaway ${code}`), closed])).toBe("goaway 0");
      expect(await cli.exited).toEqual({ code: 0, signal: null });
    } finally {
      session.destroy();
    }
  });

  it("answers a reflection request sent during the stop's grace (the stream ended at once, unanswered, status OK)", async () => {
    const { cli, session } = await serveWithUsedHttp2Session();
    try {
      cli.child.kill("SIGTERM");
      await until("the server began shutting down", () => cli.stdout().includes('"shutting down"'));
      const stream = session.request({ ":method": "POST", ":path": "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", "content-type": "application/grpc", te: "trailers" });
      stream.on("error", () => {});
      let answered = 0;
      stream.on("data", () => answered++);
      stream.end(Buffer.from([0, 0, 0, 0, 3, 0x3a, 0x01, 0x2a])); // list_services: "*"
      await new Promise((resolve) => stream.on("close", resolve));
      expect(answered).toBeGreaterThan(0);
      expect(await cli.exited).toEqual({ code: 0, signal: null });
    } finally {
      session.destroy();
    }
  });

  it("ends an open reflection stream at the end of the stop's grace instead of waiting the drain's 10 s for it (one grpcui window held every deploy)", async () => {
    const { cli, url } = await serve(tempDir());
    const session = http2Connect(url);
    session.on("error", () => {});
    try {
      const stream = session.request({ ":method": "POST", ":path": "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", "content-type": "application/grpc", te: "trailers" });
      stream.on("error", () => {});
      let status: string | undefined;
      let answered = 0;
      stream.on("data", () => answered++);
      stream.on("trailers", (trailers) => (status = String(trailers["grpc-status"])));
      stream.write(Buffer.from([0, 0, 0, 0, 3, 0x3a, 0x01, 0x2a])); // list_services: "*", and the stream stays open
      await until("the list of services came back", () => answered > 0);
      const stopping = Date.now();
      cli.child.kill("SIGTERM");
      expect(await cli.exited).toEqual({ code: 0, signal: null });
      expect(Date.now() - stopping).toBeLessThan(4_000);
      expect(status).toBe("0");
      expect(cli.stdout()).not.toContain("requests still in flight at the deadline were cut");
      expect(cli.stdout()).not.toContain('"level":50');
    } finally {
      session.destroy();
    }
  });

  it("answers a request in flight at SIGTERM with Connection: close (it said keep-alive, and the client's next request was reset)", async () => {
    const { cli, url } = await serve(tempDir());
    const connection = rawConnection(url);
    const form = "grant_type=client_credentials&client_id=nobody&client_secret=x";
    connection.socket.write(`POST /auth/v1/token HTTP/1.1\r\nhost: accessd\r\ncontent-type: application/x-www-form-urlencoded\r\ncontent-length: ${form.length}\r\n\r\n${form.slice(0, 10)}`);
    await new Promise((resolve) => setTimeout(resolve, 200)); // its headers read: in flight
    cli.child.kill("SIGTERM");
    await until("the server began shutting down", () => cli.stdout().includes('"shutting down"'));
    connection.socket.write(form.slice(10));
    const answer = await connection.closed;
    expect(answer).toMatch(/^HTTP\/1\.1 401 /);
    expect(answer.toLowerCase()).toContain("\r\nconnection: close\r\n");
    expect(await cli.exited).toEqual({ code: 0, signal: null });
  });

  it("ends at once on a second signal during the shutdown, with the exit code of the signal's default action (it relied on that default, which the kernel ignores for PID 1 in a container)", async () => {
    const { cli, url } = await serve(tempDir());
    const connection = rawConnection(url);
    // A request whose body never ends: the drain would wait its 10 s for it.
    connection.socket.write("POST /api/v1/apps HTTP/1.1\r\nhost: accessd\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{");
    await new Promise((resolve) => setTimeout(resolve, 200));
    cli.child.kill("SIGTERM");
    await until("the server began shutting down", () => cli.stdout().includes('"shutting down"'));
    const second = Date.now();
    cli.child.kill("SIGTERM");
    expect(await cli.exited).toEqual({ code: 143, signal: null });
    expect(Date.now() - second).toBeLessThan(3_000);
    expect(cli.stdout()).toContain('"a second signal: stopping at once"');
    connection.socket.destroy();
  });

  it("stops at once, without saying requests were cut, when requests pipelined behind one answered with Connection: close go unanswered (it waited the drain's 10 s for them)", async () => {
    const { cli, connection } = await serveWithAnsweredConnection();
    const stopping = Date.now();
    cli.child.kill("SIGTERM");
    await until("the server began shutting down", () => cli.stdout().includes('"shutting down"'));
    connection.socket.write(healthz.repeat(3));
    await connection.closed;
    expect(await cli.exited).toEqual({ code: 0, signal: null });
    expect(Date.now() - stopping).toBeLessThan(4_000);
    expect(cli.stdout()).not.toContain("requests still in flight at the deadline were cut");
  });
});

/** Throws a message naming the port when something on this machine already listens on it. */
async function expectPortFree(host: string, port: number): Promise<void> {
  const probe = createServer();
  await new Promise<void>((resolve, reject) => {
    probe.once("error", (e: NodeJS.ErrnoException) =>
      reject(
        new Error(
          e.code === "EADDRINUSE"
            ? `${host}:${port} is already in use on this machine; the shipped-defaults test needs it free (stop whatever listens there)`
            : `cannot probe ${host}:${port}: ${e.message}`,
        ),
      ),
    );
    probe.listen(port, host, () => resolve());
  });
  await new Promise<void>((resolve) => probe.close(() => resolve()));
}

describe("npm start with the shipped defaults (no ACCESSD_* variable)", () => {
  // dist/ is built from the sources by the tests' global setup (test/support/build-dist.ts).
  beforeAll(() => expect(existsSync(builtCli)).toBe(true));

  it("serves /healthz on 127.0.0.1:8080, creates ./data/accessd.db in its working directory and exits 0 on SIGTERM", async () => {
    await expectPortFree("127.0.0.1", 8080);
    const cwd = tempDir();
    const cli = spawnCli(["serve"], {}, cwd); // spawnCli passes on no ACCESSD_* variable of this process
    track(cli);
    expect(await listeningPort(cli)).toBe(8080);
    const listening = cli.stdout().split("\n").find((line) => line.includes("accessd listening")) ?? "";
    expect(JSON.parse(listening)).toMatchObject({ address: "127.0.0.1", port: 8080, database: "./data/accessd.db" });

    const health = await fetch("http://127.0.0.1:8080/healthz");
    expect(health.status).toBe(200);
    expect(existsSync(join(cwd, "data", "accessd.db"))).toBe(true);

    cli.child.kill("SIGTERM");
    expect(await cli.exited).toEqual({ code: 0, signal: null });
    expect(cli.stdout()).toContain("accessd stopped");
  });
});
