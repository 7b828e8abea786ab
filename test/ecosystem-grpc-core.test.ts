import { execFile, execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createApp, createEntitlement, createUser, listOwnerIds } from "./support/api-fixtures.js";
import { startTestServer, type TestServer } from "./support/test-server.js";

/**
 * accessd from gRPC's C core (Debian's `python3-grpcio`), the gRPC stack of Python, Ruby, PHP
 * and C++ clients: its own HTTP/2 (flow control, BDP pings, a queue beyond the server's stream
 * limit), its own `grpc-timeout` and `grpc-message` coding, gzip on request. It knows the service
 * only from the published protos (`buf build proto`), as a client generated from them would
 * (`test/support/grpc-clients/grpc_core_client.py`). A machine without it skips these tests
 * (`apt-get install python3-grpcio python3-protobuf`; `.ci/run` installs them where it can).
 */

const buf = fileURLToPath(new URL("../node_modules/.bin/buf", import.meta.url));
const client = fileURLToPath(new URL("./support/grpc-clients/grpc_core_client.py", import.meta.url));
const repository = fileURLToPath(new URL("..", import.meta.url));

/** A Python with grpcio and protobuf: pyenv's `python3` may lack what Debian's has. */
const python = ["python3", "/usr/bin/python3"].find((candidate) => {
  try {
    execFileSync(candidate, ["-c", "import grpc, google.protobuf"], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
});

interface Call {
  method: string;
  request?: unknown;
  metadata?: Record<string, string>;
  timeout?: number;
  repeat?: number;
  concurrent?: boolean;
  take?: number;
  types?: string;
}
interface Answer {
  code: string;
  details: string;
  response?: unknown;
}

let server: TestServer;
let scratch = "";
let descriptors = "";

beforeAll(async () => {
  if (python === undefined) return;
  server = await startTestServer();
  scratch = mkdtempSync(join(tmpdir(), "accessd-grpc-core-"));
  descriptors = join(scratch, "accessd.binpb");
  execFileSync(buf, ["build", "proto", "-o", descriptors], { cwd: repository, stdio: "ignore" });
});
afterAll(async () => {
  if (scratch !== "") rmSync(scratch, { recursive: true, force: true });
  await server?.close();
});

/** Runs the calls on one C-core channel; each call's answers. */
function callOverCore(calls: Call[], channel: { compression?: "gzip"; options?: Record<string, number> } = {}): Promise<Answer[][]> {
  const spec = { target: `127.0.0.1:${server.address.port}`, descriptors, ...channel, calls };
  return new Promise((resolve, reject) => {
    const child = execFile(python ?? "python3", [client], { timeout: 60_000, maxBuffer: 64 << 20 }, (error, stdout, stderr) => {
      if (error !== null) reject(new Error(`${error.message}\n${stderr}`));
      else resolve(JSON.parse(stdout) as Answer[][]);
    });
    child.stdin?.end(JSON.stringify(spec));
  });
}

/** The one answer of each call (calls without `repeat`). */
async function answersOf(calls: Call[], channel: Parameters<typeof callOverCore>[1] = {}): Promise<(Answer | undefined)[]> {
  return (await callOverCore(calls, channel)).map((answers) => answers[0]);
}

const bearer = (): Record<string, string> => ({ authorization: server.headers.authorization ?? "" });

describe.skipIf(python === undefined)("gRPC clients on gRPC's C core (python3-grpcio)", () => {
  it("creates, adds an owner and reads back what REST shows, field for field (Python's proto3 JSON against the REST body)", async () => {
    const appId = await createApp(server, "Zoë's Billing 山田");
    const entitlementId = await createEntitlement(server, appId);
    const userId = await createUser(server, "Ada Lovelace");
    const [added, app, owners] = await answersOf([
      { method: "/svc.api.app.v1.AppEntitlementOwners/Add", request: { appId, entitlementId, userId }, metadata: bearer() },
      { method: "/svc.api.app.v1.Apps/Get", request: { id: appId }, metadata: bearer() },
      { method: "/svc.api.app.v1.AppEntitlementOwners/List", request: { appId, entitlementId, pageSize: 10 }, metadata: bearer() },
    ]);
    expect(added).toEqual({ code: "OK", details: "", response: {} });
    const rest = (await (await server.call("GET", `/api/v1/apps/${appId}`)).json()) as unknown;
    expect(app).toEqual({ code: "OK", details: "", response: rest });
    const restOwners = (await (await server.call("GET", `/api/v1/apps/${appId}/entitlements/${entitlementId}/owners`)).json()) as unknown;
    expect(owners?.response).toEqual(restOwners);
    expect(await listOwnerIds(server, appId, entitlementId)).toEqual([userId]);
  });

  it("reads accessd's status codes and UTF-8 messages as sent (NOT_FOUND, UNAUTHENTICATED, INVALID_ARGUMENT, UNIMPLEMENTED)", async () => {
    const [notFound, noToken, invalid, unknownMethod] = await answersOf([
      { method: "/svc.api.app.v1.Apps/Get", request: { id: "nöpe/ü 100%" }, metadata: bearer() },
      { method: "/svc.api.app.v1.Apps/Get", request: { id: "x" } },
      { method: "/svc.api.app.v1.Apps/Create", request: { displayName: "" }, metadata: bearer() },
      { method: "/svc.api.app.v1.Apps/Archive", types: "/svc.api.app.v1.Apps/Get", request: { id: "x" }, metadata: bearer() },
    ]);
    expect(notFound).toEqual({ code: "NOT_FOUND", details: 'app "nöpe/ü 100%" not found' });
    expect(noToken?.code).toBe("UNAUTHENTICATED");
    expect(noToken?.details).toMatch(/^missing bearer token/);
    expect(invalid?.code).toBe("INVALID_ARGUMENT");
    expect(invalid?.details).toMatch(/displayName/);
    expect(unknownMethod?.code).toBe("UNIMPLEMENTED");
  });

  it("accepts gzip-compressed requests and refuses a message over 1 MiB with RESOURCE_EXHAUSTED", async () => {
    const [created, tooLarge, after] = await answersOf(
      [
        { method: "/svc.api.app.v1.Apps/Create", request: { displayName: "gzip", description: "compressible ".repeat(300) }, metadata: bearer() },
        { method: "/svc.api.app.v1.Apps/Create", request: { displayName: "big", description: "x".repeat(2 << 20) }, metadata: bearer() },
        { method: "/grpc.health.v1.Health/Check", request: {} },
      ],
      { compression: "gzip", options: { "grpc.max_send_message_length": -1 } },
    );
    expect(created?.code).toBe("OK");
    expect(created?.response).toMatchObject({ app: { displayName: "gzip", description: "compressible ".repeat(300) } });
    expect(tooLarge?.code).toBe("RESOURCE_EXHAUSTED");
    expect(after).toEqual({ code: "OK", details: "", response: { status: "SERVING" } });
  });

  it("serves 1,500 calls started at once on one channel: C core queues past the 256 streams accessd allows a connection", async () => {
    const [answers] = await callOverCore([
      { method: "/svc.api.app.v1.Apps/List", request: { pageSize: 1 }, metadata: bearer(), repeat: 1_500, concurrent: true },
    ]);
    expect(answers).toHaveLength(1_500);
    expect(answers?.filter((a) => a.code !== "OK")).toEqual([]);
  });

  it("streams Health Watch and checks health without a token", async () => {
    const [watched, checked] = await answersOf([
      { method: "/grpc.health.v1.Health/Watch", request: {}, take: 1 },
      { method: "/grpc.health.v1.Health/Check", request: { service: "svc.api.app.v1.AppEntitlementOwners" } },
    ]);
    expect(watched).toEqual({ code: "OK", details: "", response: [{ status: "SERVING" }] });
    expect(checked).toEqual({ code: "OK", details: "", response: { status: "SERVING" } });
  });
});
