import { connect } from "node:net";
import { connect as http2Connect } from "node:http2";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { scratch } from "../support/scratch.js";
import { serveProcess, until, type ServedProcess } from "../support/served-process.js";

const files = scratch("accessd-abandoned-");

/** Log lines of the process at level error (50) or above. */
function errorLines(server: ServedProcess): string[] {
  return server.cli
    .stdout()
    .split("\n")
    .filter((line) => line.startsWith("{") && (JSON.parse(line) as { level: number }).level >= 50);
}

describe("requests the client abandons", () => {
  it("logs a request whose client leaves mid-body as abandoned, not as a server error, on HTTP/1.1 and HTTP/2", async () => {
    const server = await serveProcess({ ACCESSD_DATABASE: join(files.tempDir(), "accessd.db") });
    files.track(server.cli);
    const { port } = new URL(server.url);
    // HTTP/1.1: half a declared body, then the connection is destroyed.
    for (const path of ["/api/v1/apps", "/auth/v1/token"]) {
      await new Promise<void>((resolve) => {
        const socket = connect(Number(port), "127.0.0.1", () => {
          socket.write(`POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"displ`);
          setTimeout(() => {
            socket.destroy();
            resolve();
          }, 100);
        });
        socket.on("error", () => resolve());
      });
    }
    // HTTP/2: streams that send part of a body, then the session is destroyed.
    const session = http2Connect(server.url);
    session.on("error", () => {});
    for (let i = 0; i < 8; i++) {
      const stream = session.request({ ":method": "POST", ":path": "/auth/v1/token", "content-type": "application/json", "content-length": "100" });
      stream.on("error", () => {});
      stream.write('{"grant_type"');
    }
    await new Promise((r) => setTimeout(r, 100));
    session.destroy();

    await until("the abandoned requests are logged", () => server.cli.stdout().split("request abandoned by the client").length - 1 >= 3, 10_000);
    expect(errorLines(server)).toEqual([]);
    expect((await fetch(`${server.url}/healthz`)).status).toBe(200);
  }, 30_000);
});
