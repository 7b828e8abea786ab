import { once } from "node:events";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { connect, type AddressInfo } from "node:net";
import { afterAll, describe, expect, it } from "vitest";
import { ConnectionTracker } from "../src/server/connection-tracker.js";
import { until } from "./support/served-process.js";

describe("ConnectionTracker", () => {
  const server = createServer();
  const tracker = new ConnectionTracker(server);
  let requests = 0;
  server.on("request", (req: IncomingMessage, res: ServerResponse) => {
    requests++;
    tracker.track(req, res);
    req.resume(); // reads the body, which never ends: the client hangs up first
    req.on("end", () => res.end());
  });
  afterAll(() => new Promise((resolve) => server.close(resolve)));

  it("forgets an HTTP/1.1 connection whose client hung up mid-request (each one was kept for good, with its request and response)", async () => {
    server.listen(0, "127.0.0.1");
    await once(server, "listening");
    const { port } = server.address() as AddressInfo;
    for (let i = 0; i < 50; i++) {
      const socket = connect(port, "127.0.0.1");
      await once(socket, "connect");
      socket.write("POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"partial\":");
      await until("the request is in flight", () => requests === i + 1, 2_000);
      socket.destroy();
    }
    await until("the server saw every connection close", () => tracker.openConnections === 0, 2_000).catch(() => {});
    expect(tracker.openConnections).toBe(0);
  });
});
