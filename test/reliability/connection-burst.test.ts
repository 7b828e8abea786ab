import { spawn } from "node:child_process";
import { once } from "node:events";
import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../support/test-server.js";

/** More than Node's default listen backlog (511), within the kernel's usual cap (4096). */
const burst = 1_200;
/** The kernel's cap on any listen backlog; below the burst, the test cannot tell. */
const somaxconn = Number(readFileSync("/proc/sys/net/core/somaxconn", "utf8").trim());

/**
 * A process of its own opens `burst` connections at once, reports how long each took to connect,
 * then sends GET /healthz on each and reports the statuses.
 */
const sender = `
const net = require("node:net");
const port = Number(process.argv[1]);
const n = Number(process.argv[2]);
process.stdout.write("ready\\n");
const started = performance.now();
const connectMs = [];
const sockets = [];
for (let i = 0; i < n; i++) {
  const socket = net.connect(port, "127.0.0.1", () => {
    connectMs.push(performance.now() - started);
    if (connectMs.length === n) ask();
  });
  socket.on("error", (e) => { process.stdout.write(JSON.stringify({ error: e.message }) + "\\n"); process.exit(1); });
  sockets.push(socket);
}
function ask() {
  let answered = 0;
  const statuses = {};
  for (const socket of sockets) {
    let head = "";
    socket.on("data", (chunk) => {
      head += chunk.toString("latin1");
      if (!head.includes("\\r\\n\\r\\n") || socket.counted) return;
      socket.counted = true;
      const status = head.slice(9, 12);
      statuses[status] = (statuses[status] ?? 0) + 1;
      socket.destroy();
      if (++answered === n) {
        process.stdout.write(JSON.stringify({ maxConnectMs: Math.max(...connectMs), statuses }) + "\\n");
        process.exit(0);
      }
    });
    socket.write("GET /healthz HTTP/1.1\\r\\nhost: 127.0.0.1\\r\\n\\r\\n");
  }
}`;

describe("a burst of connections", () => {
  let server: TestServer;

  beforeAll(async () => {
    server = await startTestServer();
  });
  afterAll(() => server.close());

  it.skipIf(somaxconn < burst)(
    `queues ${burst} senders connecting while the thread is busy, and serves them all without a SYN retry`,
    async () => {
      const child = spawn(process.execPath, ["-e", sender, String(server.address.port), String(burst)], { stdio: ["ignore", "pipe", "inherit"] });
      let output = "";
      child.stdout.on("data", (chunk: Buffer) => (output += chunk.toString()));
      while (!output.includes("ready\n")) await once(child.stdout, "data");
      // The server's thread busy for 500 ms (a long batch, a GC): nothing is accepted meanwhile,
      // so every connection of the burst waits in the kernel's accept queue.
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 500);
      const [code] = (await once(child, "exit")) as [number];
      const report = JSON.parse(output.slice(output.indexOf("\n") + 1)) as { maxConnectMs: number; statuses: Record<string, number> };
      expect(code).toBe(0);
      expect(report.statuses).toEqual({ "200": burst });
      // A dropped SYN is sent again after 1 s; with the connection queued, the handshake is at once.
      expect(report.maxConnectMs).toBeLessThan(900);
    },
    30_000,
  );
});
