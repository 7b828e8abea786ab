import { execFile } from "node:child_process";
import { once } from "node:events";
import { connect as http2Connect } from "node:http2";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { fromBinary } from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient, createRouterTransport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Health, HealthCheckResponse_ServingStatus as Status } from "../gen/grpc/health/v1/health_pb.js";
import { ServerReflection } from "../gen/grpc/reflection/v1/reflection_pb.js";
import { ServerReflection as ServerReflectionV1Alpha } from "../gen/grpc/reflection/v1alpha/reflection_pb.js";
import { healthService, statusPollMs } from "../src/server/health/health-service.js";
import { DescriptorIndex } from "../src/server/reflection/descriptor-index.js";
import { ReflectionStreams, serverReflectionV1, serverReflectionV1Alpha } from "../src/server/reflection/reflection-service.js";
import { createApp, createEntitlement, createUser, listOwnerIds } from "./support/api-fixtures.js";
import { startTestServer, type TestServer } from "./support/test-server.js";

const run = promisify(execFile);

/** A Health client of a health service in process whose readiness is `ready` (no shutdown). */
const healthClientReading = (ready: () => boolean) =>
  createClient(Health, createRouterTransport((router) => router.service(Health, healthService({ shutdown: new AbortController().signal, ready, services: [] }))));
const buf = fileURLToPath(new URL("../node_modules/.bin/buf", import.meta.url));

/** The real `buf curl`, over gRPC with h2c prior knowledge, as a user would run it. */
async function bufCurl(...args: string[]): Promise<{ stdout: string; stderr: string; exitCode: number }> {
  try {
    const { stdout, stderr } = await run(buf, ["curl", "--protocol", "grpc", "--http2-prior-knowledge", ...args], {
      timeout: 20_000,
    });
    return { stdout, stderr, exitCode: 0 };
  } catch (e) {
    const failed = e as { stdout?: string; stderr?: string; code?: number };
    return { stdout: failed.stdout ?? "", stderr: failed.stderr ?? "", exitCode: failed.code ?? -1 };
  }
}

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer();
});
afterAll(() => server.close());

describe("gRPC server reflection", () => {
  it("lets buf curl list every served method without proto files and without a token", async () => {
    const { stdout, exitCode, stderr } = await bufCurl("--list-methods", server.url);
    expect(stderr).toBe("");
    expect(exitCode).toBe(0);
    const listed = stdout.trim().split("\n");
    for (const rpc of server.rpcs) expect(listed).toContain(`${rpc.parent.typeName}/${rpc.name}`);
    expect(listed).toContain("svc.api.app.v1.AppEntitlementOwners/Add");
    expect(listed).toContain("grpc.health.v1.Health/Check");
    expect(listed).toContain("grpc.reflection.v1.ServerReflection/ServerReflectionInfo");
  });

  it("lets buf curl call AppEntitlementOwners/Add with a bearer token", async () => {
    const appId = await createApp(server);
    const entitlementId = await createEntitlement(server, appId);
    const userId = await createUser(server);
    const { stdout, exitCode, stderr } = await bufCurl(
      "-H",
      `Authorization: ${server.headers["authorization"]}`,
      "-d",
      JSON.stringify({ appId, entitlementId, userId }),
      `${server.url}/svc.api.app.v1.AppEntitlementOwners/Add`,
    );
    expect(stderr).toBe("");
    expect(exitCode).toBe(0);
    expect(JSON.parse(stdout)).toEqual({});
    expect(await listOwnerIds(server, appId, entitlementId)).toEqual([userId]);
  });

  it("keeps API methods closed to buf curl without a token while reflection stays open", async () => {
    const { stderr, exitCode } = await bufCurl("-d", "{}", `${server.url}/svc.api.app.v1.AppEntitlementOwners/Add`);
    expect(exitCode).not.toBe(0);
    expect(stderr).toMatch(/unauthenticated/);
  });

  it("answers the deprecated v1alpha protocol that older grpcurl speaks", async () => {
    const { stdout, exitCode } = await bufCurl("--reflect-protocol", "grpc-v1alpha", "--list-services", server.url);
    expect(exitCode).toBe(0);
    expect(stdout.trim().split("\n")).toContain("svc.api.user.v1.Users");
  });

  it("returns the file declaring a symbol followed by all of its imports", async () => {
    const client = createClient(ServerReflection, createGrpcTransport({ baseUrl: server.url }));
    const responses = client.serverReflectionInfo(
      (async function* () {
        yield { messageRequest: { case: "fileContainingSymbol" as const, value: "svc.api.app.v1.AppEntitlementOwners.Add" } };
      })(),
    );
    const names: string[] = [];
    for await (const res of responses) {
      expect(res.messageResponse.case).toBe("fileDescriptorResponse");
      if (res.messageResponse.case !== "fileDescriptorResponse") continue;
      for (const bytes of res.messageResponse.value.fileDescriptorProto) {
        names.push(fromBinary(FileDescriptorProtoSchema, bytes).name);
      }
    }
    expect(names[0]).toBe("svc/api/app/v1/app_entitlement_owners.proto");
    expect(names).toEqual(
      expect.arrayContaining([
        "google/api/annotations.proto",
        "google/api/http.proto",
        "google/protobuf/descriptor.proto",
        "svc/api/iam/v1/role.proto",
        "svc/api/user/v1/user.proto",
      ]),
    );
    expect(new Set(names).size).toBe(names.length);
  });

  it("answers an unknown symbol with an in-stream NOT_FOUND and keeps the stream usable (Connect over h2c)", async () => {
    const client = createClient(
      ServerReflectionV1Alpha,
      createConnectTransport({ baseUrl: server.url, httpVersion: "2" }),
    );
    const answers = [];
    for await (const res of client.serverReflectionInfo(
      (async function* () {
        yield { messageRequest: { case: "fileContainingSymbol" as const, value: "no.such.Thing" } };
        yield { messageRequest: { case: "listServices" as const, value: "*" } };
      })(),
    )) {
      answers.push(res.messageResponse);
    }
    expect(answers[0]).toEqual({
      case: "errorResponse",
      value: expect.objectContaining({ errorCode: Code.NotFound, errorMessage: "symbol no.such.Thing not found" }),
    });
    expect(answers[1]?.case).toBe("listServicesResponse");
  });

  it("keeps a stream that sends a message within each request timeout open past it, and ends one that stops sending with DEADLINE_EXCEEDED (it was reset at the timeout however busy, with no status)", async () => {
    const own = await startTestServer({ requestTimeoutMs: 1_000 });
    const session = http2Connect(own.url);
    session.on("error", () => {});
    try {
      const listServices = Buffer.from([0, 0, 0, 0, 2, 0x3a, 0x00]); // ServerReflectionRequest { list_services: "" }
      const stream = session.request(
        { ":method": "POST", ":path": "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", "content-type": "application/grpc", te: "trailers" },
        { endStream: false },
      );
      stream.on("error", () => {});
      let answers = 0;
      stream.on("data", () => answers++); // one DATA frame an answer at this size
      let trailers: Record<string, unknown> = {};
      stream.on("trailers", (received: Record<string, unknown>) => (trailers = received));
      const closed = once(stream, "close");
      const started = performance.now();
      for (let sent = 0; sent < 8; sent++) {
        stream.write(listServices);
        await new Promise((resolve) => setTimeout(resolve, 400));
      }
      // 3.2 s of use, three times the request timeout: every message answered, the stream open.
      expect(answers).toBe(8);
      expect(stream.closed).toBe(false);
      await closed; // then silence: cut between one and two timeouts after the last message
      const silentFor = performance.now() - started - 3_200;
      expect(silentFor).toBeGreaterThan(500);
      expect(silentFor).toBeLessThan(3_000);
      // With a status: a bare reset read CANCELLED to gRPC clients, as if they had cancelled.
      expect(trailers).toMatchObject({ "grpc-status": String(Code.DeadlineExceeded), "grpc-message": "no message arrived within 1000 ms" });
    } finally {
      session.destroy();
      await own.close();
    }
  });

  it("refuses a stream past its cap at once (RESOURCE_EXHAUSTED), shared by v1 and v1alpha, and takes one again when a stream ends", async () => {
    const streams = new ReflectionStreams(2);
    const index = new DescriptorIndex([ServerReflection]);
    const transport = createRouterTransport((router) => {
      router.service(ServerReflection, serverReflectionV1(index, streams));
      router.service(ServerReflectionV1Alpha, serverReflectionV1Alpha(index, streams));
    });
    const v1 = createClient(ServerReflection, transport);
    const v1alpha = createClient(ServerReflectionV1Alpha, transport);
    const holdOpen = (client: typeof v1 | typeof v1alpha) => {
      const cancel = new AbortController();
      const requests = (async function* () {
        yield { messageRequest: { case: "listServices" as const, value: "" } };
        await new Promise((resolve) => cancel.signal.addEventListener("abort", resolve));
      })();
      return { cancel, answers: client.serverReflectionInfo(requests, { signal: cancel.signal })[Symbol.asyncIterator]() };
    };
    const first = holdOpen(v1);
    const second = holdOpen(v1alpha);
    expect((await first.answers.next()).value?.messageResponse.case).toBe("listServicesResponse");
    expect((await second.answers.next()).value?.messageResponse.case).toBe("listServicesResponse");
    const refused = await holdOpen(v1).answers.next().then(
      () => undefined,
      (e: unknown) => ConnectError.from(e),
    );
    expect(refused?.code).toBe(Code.ResourceExhausted);
    first.cancel.abort();
    await first.answers.next().catch(() => undefined);
    await expect.poll(async () => {
      const third = holdOpen(v1);
      const answered = await third.answers.next().then(
        (r) => r.value?.messageResponse.case,
        () => undefined,
      );
      third.cancel.abort();
      return answered;
    }).toBe("listServicesResponse");
    second.cancel.abort();
  });
});

describe("gRPC health", () => {
  it("answers Check SERVING over gRPC without a token", async () => {
    const { stdout, exitCode } = await bufCurl(`${server.url}/grpc.health.v1.Health/Check`);
    expect(exitCode).toBe(0);
    expect(JSON.parse(stdout)).toEqual({ status: "SERVING" });
  });

  it("answers Check SERVING over Connect on HTTP/1.1 (JSON) without a token", async () => {
    const res = await fetch(`${server.url}/grpc.health.v1.Health/Check`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ service: "svc.api.app.v1.AppEntitlementOwners" }),
    });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ status: "SERVING" });
  });

  it("answers NOT_FOUND for a service the server does not have", async () => {
    const client = createClient(Health, createConnectTransport({ baseUrl: server.url, httpVersion: "1.1" }));
    const error = await client.check({ service: "no.such.Service" }).catch((e: unknown) => ConnectError.from(e));
    expect(error).toBeInstanceOf(ConnectError);
    expect((error as ConnectError).code).toBe(Code.NotFound);
  });

  it("answers Check NOT_SERVING once shutdown has begun", async () => {
    const shutdown = new AbortController();
    const transport = createRouterTransport((router) =>
      router.service(Health, healthService({ shutdown: shutdown.signal, ready: () => true, services: ["a.B"] })),
    );
    const client = createClient(Health, transport);
    expect((await client.check({})).status).toBe(Status.SERVING);
    shutdown.abort();
    expect((await client.check({})).status).toBe(Status.NOT_SERVING);
    expect((await client.check({ service: "a.B" })).status).toBe(Status.NOT_SERVING);
  });

  it("refuses a Watch past maxWatches at once (RESOURCE_EXHAUSTED), takes one again when a watch ends, and ends the rest at shutdown", async () => {
    const shutdown = new AbortController();
    const client = createClient(
      Health,
      createRouterTransport((router) =>
        router.service(Health, healthService({ shutdown: shutdown.signal, ready: () => true, services: [], maxWatches: 2 })),
      ),
    );
    const open = () => {
      const cancel = new AbortController();
      return { cancel, stream: client.watch({}, { signal: cancel.signal })[Symbol.asyncIterator]() };
    };
    const first = open();
    const second = open();
    expect((await first.stream.next()).value?.status).toBe(Status.SERVING);
    expect((await second.stream.next()).value?.status).toBe(Status.SERVING);
    const refused = await open().stream.next().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(refused).toBeInstanceOf(ConnectError);
    expect((refused as ConnectError).code).toBe(Code.ResourceExhausted);

    first.cancel.abort();
    await first.stream.next().catch(() => undefined); // the cancelled watch ends, and frees its place
    const third = open();
    let taken: Status | undefined;
    for (let attempt = 0; attempt < 50 && taken === undefined; attempt++) {
      taken = await third.stream.next().then(
        (r) => r.value?.status,
        () => undefined,
      );
      if (taken === undefined) Object.assign(third, open());
    }
    expect(taken).toBe(Status.SERVING);

    shutdown.abort();
    expect((await second.stream.next()).value?.status).toBe(Status.NOT_SERVING);
    expect((await third.stream.next()).value?.status).toBe(Status.NOT_SERVING);
    expect((await second.stream.next()).done).toBe(true);
  });

  it("answers NOT_SERVING when the store does not answer", async () => {
    const client = createClient(
      Health,
      createRouterTransport((router) =>
        router.service(Health, healthService({ shutdown: new AbortController().signal, ready: () => false, services: [] })),
      ),
    );
    expect((await client.check({})).status).toBe(Status.NOT_SERVING);
  });

  it("streams SERVING to a Watch, then NOT_SERVING when the server begins to shut down, and ends the stream", async () => {
    const own = await startTestServer();
    const client = createClient(Health, createGrpcTransport({ baseUrl: own.url }));
    const seen: Status[] = [];
    let closing: Promise<void> | undefined;
    for await (const res of client.watch({})) {
      seen.push(res.status);
      if (seen.length === 1) closing = own.close();
    }
    await closing;
    expect(seen).toEqual([Status.SERVING, Status.NOT_SERVING]);
  });

  it("streams NOT_SERVING to a Watch when the readiness changes (the store found damaged), and SERVING again once it is back (a watch said nothing of either)", async () => {
    let ready = true;
    const client = healthClientReading(() => ready);
    const abort = new AbortController();
    const seen: Status[] = [];
    const started = performance.now();
    try {
      for await (const res of client.watch({}, { signal: abort.signal })) {
        seen.push(res.status);
        if (seen.length === 1) ready = false;
        if (seen.length === 2) ready = true;
        if (seen.length === 3) abort.abort();
      }
    } catch (e) {
      if (ConnectError.from(e).code !== Code.Canceled) throw e;
    }
    expect(seen).toEqual([Status.SERVING, Status.NOT_SERVING, Status.SERVING]);
    expect(performance.now() - started).toBeLessThan(2 * statusPollMs + 1_500);
  });

  it("sends a change to every open Watch, also when another Watch opens right after it (that one's opening hid it from the others)", async () => {
    let ready = true;
    const client = healthClientReading(() => ready);
    const abort = new AbortController();
    const first: Status[] = [];
    const watching = (async () => {
      try {
        for await (const res of client.watch({}, { signal: abort.signal })) first.push(res.status);
      } catch (e) {
        if (ConnectError.from(e).code !== Code.Canceled) throw e;
      }
    })();
    while (first.length === 0) await new Promise((resolve) => setTimeout(resolve, 10));
    ready = false;
    const second = client.watch({}, { signal: abort.signal })[Symbol.asyncIterator]();
    expect((await second.next()).value?.status).toBe(Status.NOT_SERVING); // opened just after the change
    const deadline = performance.now() + 2 * statusPollMs + 1_000;
    while (first.length < 2 && performance.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
    abort.abort();
    await watching;
    expect(first).toEqual([Status.SERVING, Status.NOT_SERVING]);
  });

  for (const httpVersion of ["1.1", "2"] as const) {
    it(`streams SERVING as the first message of a Watch over Connect on HTTP/${httpVersion} without a token`, async () => {
      const client = createClient(Health, createConnectTransport({ baseUrl: server.url, httpVersion }));
      const statuses: Status[] = [];
      const abort = new AbortController();
      // A message held back until the stream ends never arrives: the watch stays open, so give up after 5 s.
      const giveUp = setTimeout(() => abort.abort(), 5_000);
      const watching = (async () => {
        for await (const res of client.watch({}, { signal: abort.signal })) {
          statuses.push(res.status);
          abort.abort(); // the stream stays open until the server shuts down or the client cancels
        }
      })();
      await expect(watching).rejects.toThrow(/canceled|aborted/);
      clearTimeout(giveUp);
      expect(statuses).toEqual([Status.SERVING]);
    });
  }

  it("streams SERVING then NOT_SERVING to a Watch over Connect on HTTP/1.1 and ends the stream when the server shuts down", async () => {
    const own = await startTestServer();
    const client = createClient(Health, createConnectTransport({ baseUrl: own.url, httpVersion: "1.1" }));
    const seen: Status[] = [];
    let closing: Promise<void> | undefined;
    const abort = new AbortController();
    const giveUp = setTimeout(() => abort.abort(), 5_000); // no first message: fail now, not at the test timeout
    try {
      for await (const res of client.watch({}, { signal: abort.signal })) {
        seen.push(res.status);
        if (seen.length === 1) closing = own.close();
      }
    } finally {
      clearTimeout(giveUp);
      await (closing ?? own.close());
    }
    expect(seen).toEqual([Status.SERVING, Status.NOT_SERVING]);
  });

  it("reports SERVICE_UNKNOWN to a Watch of an unknown service", async () => {
    const client = createClient(Health, createGrpcTransport({ baseUrl: server.url }));
    const statuses: Status[] = [];
    const abort = new AbortController();
    const watching = (async () => {
      for await (const res of client.watch({ service: "no.such.Service" }, { signal: abort.signal })) {
        statuses.push(res.status);
        abort.abort(); // the stream stays open (the service might appear) until cancelled
      }
    })();
    await expect(watching).rejects.toThrow(/canceled|aborted/);
    expect(statuses).toEqual([Status.SERVICE_UNKNOWN]);
  });
});
