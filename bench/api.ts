/**
 * API benchmarks (issues 2 and 7), against `accessd serve` in its own process over a SQLite file:
 *
 * 1. Latency of the first page of an app's entitlements versus a page 999,000 items deep into
 *    1,000,000 (keyset pagination: the ratio should stay near 1). The rows are bulk-inserted into
 *    the database file in one transaction before the server starts; the deep page's token is
 *    minted with the server's own page-token key from that file (what walking 9,990 pages would
 *    end with), and a short walk of 100 pages from there is timed too.
 * 2. Add-owner throughput on one server over REST (autocannon, HTTP/1.1), gRPC (a raw HTTP/2 loop
 *    and @grpc/grpc-js, h2c) and Connect JSON (autocannon), each against the same client on a
 *    no-op Add served by the same stack (bench/support/noop-server.ts: our HttpServer, Connect
 *    router and REST transcoder, no interceptors, no store), as a ratio, with each server's CPU
 *    time per request in the phase (from /proc: when the client is the bound, as it can be for
 *    the gRPC loops, the rates say little and the CPU a request tells the servers apart); plus
 *    two floors for scale: /healthz (HTTP stack only) and a Connect Add refused before the store.
 * 3. The server's peak RSS.
 *
 * Run with `npm run bench` (all benches) or `npx tsx bench/api.ts`.
 */
import { spawn } from "node:child_process";
import { once } from "node:events";
import { mkdtempSync, rmSync } from "node:fs";
import { Agent, request as httpRequest } from "node:http";
import { connect as http2Connect, constants as h2, type ClientHttp2Session } from "node:http2";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import * as grpc from "@grpc/grpc-js";
import autocannon from "autocannon";
import {
  AddAppEntitlementOwnerRequestSchema,
  AddAppEntitlementOwnerResponseSchema,
} from "../gen/svc/api/app/v1/app_entitlement_owners_pb.js";
import { listingFingerprint, PageTokenCodec } from "../src/pagination/index.js";
import { newId } from "../src/store/ids.js";
import { Store } from "../src/store/store.js";
import { procCpuSeconds, startAccessdProcess, type AccessdProcess } from "./support/accessd-process.js";
import { phaseSeconds, progress, report, round } from "./support/report.js";

const entitlementCount = 1_000_000;
const deepOffset = 999_000;
const userCount = 30_000;
const concurrency = 32;
const latencySeconds = phaseSeconds(5);
const throughputSeconds = phaseSeconds(8);

/** Where a load phase goes: accessd, or the no-op server on the same stack. */
type Target = Pick<AccessdProcess, "url" | "host" | "port" | "headers" | "cpuSeconds">;

/** bench/support/noop-server.ts in its own process (the same stack, a no-op Add). */
async function startNoopServer(): Promise<Target & { stop(): void }> {
  const script = fileURLToPath(new URL("./support/noop-server.ts", import.meta.url));
  const child = spawn(process.execPath, ["--import", "tsx", script], { stdio: ["ignore", "pipe", "inherit"] });
  const [chunk] = (await once(child.stdout, "data")) as [Buffer];
  const port = Number(chunk.toString().trim());
  const pid = child.pid ?? -1;
  return {
    url: `http://127.0.0.1:${port}`,
    host: "127.0.0.1",
    port,
    headers: {},
    cpuSeconds: () => procCpuSeconds(pid),
    stop: () => child.kill("SIGTERM"),
  };
}

interface Seeded {
  listAppId: string;
  /** The nextPageToken a walk ends with just before item `deepOffset`. */
  deepToken: string;
  ownersAppId: string;
  /** One entitlement per load phase, so each starts with no owners. */
  ownerEntitlements: string[];
  userIds: string[];
}

/** Writes the data straight into the database file before the server starts (fast, one transaction each). */
function seed(database: string, phases: number): Seeded {
  const store = Store.open(database);
  store.db.pragma("synchronous = OFF"); // bench data, written once; the server opens it as shipped
  const now = Date.now();
  let deepKey = "";
  const listAppId = newId();
  const ownersAppId = newId();
  const ownerEntitlements: string[] = [];
  const userIds: string[] = [];
  store.transaction(() => {
    for (const id of [listAppId, ownersAppId]) {
      store.apps.insert({ id, displayName: `Bench ${id}`, description: "", createdAt: now, updatedAt: now });
    }
    for (let i = 0; i < entitlementCount; i++) {
      const id = newId();
      if (i === deepOffset - 1) deepKey = id;
      store.appEntitlements.insert({
        id,
        appId: listAppId,
        displayName: `Entitlement ${i}`,
        description: "benchmark entitlement",
        slug: `entitlement-${i}`,
        createdAt: now,
        updatedAt: now,
      });
    }
    for (let i = 0; i < phases; i++) {
      const id = newId();
      ownerEntitlements.push(id);
      store.appEntitlements.insert({
        id,
        appId: ownersAppId,
        displayName: `Owners ${i}`,
        description: "",
        slug: `owners-${i}`,
        createdAt: now,
        updatedAt: now,
      });
    }
    for (let i = 0; i < userCount; i++) {
      const id = newId();
      userIds.push(id);
      store.users.insert({
        id,
        displayName: `User ${i}`,
        email: `user${i}@example.com`,
        username: `user${i}`,
        createdAt: now,
        updatedAt: now,
      });
    }
  });
  const pageTokens = new PageTokenCodec(store.settings.secret("page_token_key"));
  const deepToken = pageTokens.encode(listingFingerprint("app_entitlements", listAppId), deepKey);
  store.close();
  return { listAppId, deepToken, ownersAppId, ownerEntitlements, userIds };
}

async function getJson(server: AccessdProcess, path: string): Promise<unknown> {
  const res = await fetch(server.url + path, { headers: server.headers });
  if (res.status !== 200) throw new Error(`GET ${path} answered ${res.status}: ${await res.text()}`);
  return res.json();
}

/** Walks `pages` pages of 100 from `token`; returns the time per page. */
async function walk(server: AccessdProcess, appId: string, from: string, pages: number): Promise<number> {
  const started = performance.now();
  let token = from;
  for (let i = 0; i < pages; i++) {
    const page = (await getJson(
      server,
      `/api/v1/apps/${appId}/entitlements?page_size=100&page_token=${encodeURIComponent(token)}`,
    )) as { nextPageToken: string };
    if (page.nextPageToken === "") throw new Error(`the walk ended after ${i + 1} pages`);
    token = page.nextPageToken;
  }
  return (performance.now() - started) / pages;
}

/** autocannon with our default concurrency; any failed request fails the bench unless `refusals` are expected. */
async function cannon(options: autocannon.Options, refusals = false): Promise<autocannon.Result> {
  const result = await autocannon({ ...options, connections: options.connections ?? concurrency });
  const failed = (refusals ? 0 : result.non2xx) + result.errors;
  if (failed > 0) {
    throw new Error(`${options.url}: ${failed} failed requests (non-2xx ${result.non2xx}, errors ${result.errors})`);
  }
  return result;
}

/** One GET over a keep-alive connection, timed with performance.now() (autocannon rounds to whole ms). */
function timedGet(agent: Agent, url: string, headers: Record<string, string>): Promise<number> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const req = httpRequest(url, { agent, headers }, (res) => {
      res.resume();
      res.on("end", () => (res.statusCode === 200 ? resolve(performance.now() - started) : reject(new Error(`GET ${url}: ${res.statusCode}`))));
    });
    req.on("error", reject);
    req.end();
  });
}

function percentile(sorted: readonly number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? 0;
}

async function pageLatency(server: AccessdProcess, appId: string, deepToken: string): Promise<void> {
  const deep = { token: deepToken };
  progress(`walking 100 pages of 100 from the start and from item ${deepOffset}...`);
  const walkStart = await walk(server, appId, "", 100);
  const walkDeep = await walk(server, appId, deepToken, 9);
  report({
    name: "walk, 100 items per page (first 100 pages)",
    value: round(walkStart, 3),
    unit: "ms/page",
    note: `pages from item ${deepOffset.toLocaleString("en")} to the end (9): ${round(walkDeep, 3)} ms/page; one client, sequential`,
  });
  const base = `${server.url}/api/v1/apps/${appId}/entitlements`;
  const urls = [base, `${base}?page_token=${encodeURIComponent(deep.token)}`] as const;
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  progress(`latency of the first page and of the page at item ${deepOffset}, interleaved (${latencySeconds}s, 1 connection)...`);
  for (let i = 0; i < 200; i++) await timedGet(agent, urls[i % 2] ?? base, server.headers); // warm-up
  const samples: [number[], number[]] = [[], []];
  const end = performance.now() + latencySeconds * 1000;
  for (let i = 0; performance.now() < end; i++) samples[i % 2]?.push(await timedGet(agent, urls[i % 2] ?? base, server.headers));
  agent.destroy();
  const stats = samples.map((xs) => {
    const sorted = [...xs].sort((a, b) => a - b);
    return { mean: xs.reduce((a, b) => a + b, 0) / xs.length, p50: percentile(sorted, 50), p99: percentile(sorted, 99), n: xs.length };
  });
  const [first, deepPage] = stats as [(typeof stats)[number], (typeof stats)[number]];
  for (const [label, st] of [["first page", first], [`page at item ${deepOffset.toLocaleString("en")}`, deepPage]] as const) {
    report({
      name: `${label} latency, 25 of ${entitlementCount.toLocaleString("en")} (mean)`,
      value: round(st.mean, 3),
      unit: "ms",
      note: `p50 ${round(st.p50, 3)} ms, p99 ${round(st.p99, 3)} ms, ${st.n} requests, REST, 1 keep-alive connection`,
    });
  }
  report({
    name: "deep page / first page latency",
    value: round(deepPage.mean / first.mean),
    unit: "x",
    note: `mean; p50 ratio ${round(deepPage.p50 / first.p50)}, p99 ratio ${round(deepPage.p99 / first.p99)}`,
  });
}

/** Bodies cycle through the users, so most Adds insert a new owner row. */
function cyclingBody(userIds: readonly string[], body: (userId: string) => object): (req: autocannon.Request) => autocannon.Request {
  let i = 0;
  return (req) => ({ ...req, body: JSON.stringify(body(userIds[i++ % userIds.length] ?? "")) });
}

function throughputFigure(name: string, phase: Measured<unknown>, note: string): void {
  report({ name, value: round(phase.rps, 0), unit: "req/s", note: `${note}; mean latency ${round(phase.meanMs)} ms${cpuNote(phase)}` });
}

/** A load phase's result with its rate, mean latency and the server's CPU time a request. */
type Measured<T> = T & {
  rps: number;
  meanMs: number;
  /** The server process's CPU time (all threads) per request answered, in microseconds; undefined off Linux. */
  cpuUs: number | undefined;
};

/** Runs a phase and reads the server's CPU time around it (/proc, in 10 ms ticks: a phase of seconds is needed). */
async function measured<T>(
  server: Target,
  run: () => Promise<T>,
  figures: (result: T) => { rps: number; meanMs: number; requests: number },
): Promise<Measured<T>> {
  const cpuBefore = server.cpuSeconds();
  const result = await run();
  const cpuAfter = server.cpuSeconds();
  const { rps, meanMs, requests } = figures(result);
  const cpuUs = cpuBefore === undefined || cpuAfter === undefined || requests === 0 ? undefined : ((cpuAfter - cpuBefore) * 1e6) / requests;
  return { ...result, rps, meanMs, cpuUs };
}

const fromAutocannon = (r: autocannon.Result) => ({ rps: r.requests.average, meanMs: r.latency.mean, requests: r.requests.total });
const fromLoop = (r: LoopResult) => ({ rps: r.rps, meanMs: r.meanMs, requests: r.done + r.failed });

function cpuNote(phase: { cpuUs: number | undefined }): string {
  return phase.cpuUs === undefined ? "" : `; server CPU ${round(phase.cpuUs, 0)} us per request`;
}

async function restAdd(server: Target, s: Seeded, entitlementId: string, seconds: number) {
  return cannon({
    url: server.url,
    duration: seconds,
    requests: [
      {
        method: "POST",
        path: `/api/v1/apps/${s.ownersAppId}/entitlements/${entitlementId}/owners`,
        headers: { ...server.headers, "content-type": "application/json" },
        setupRequest: cyclingBody(s.userIds, (userId) => ({ userId })),
      },
    ],
  });
}

async function connectAdd(server: Target, s: Seeded, entitlementId: string, seconds: number, userIds = s.userIds) {
  const refusals = userIds.every((id) => id === "");
  return cannon({
    url: server.url,
    duration: seconds,
    requests: [
      {
        method: "POST",
        path: "/svc.api.app.v1.AppEntitlementOwners/Add",
        headers: { ...server.headers, "content-type": "application/json" },
        setupRequest: cyclingBody(userIds, (userId) => ({ appId: s.ownersAppId, entitlementId, userId })),
      },
    ],
  }, refusals);
}

function grpcFrame(appId: string, entitlementId: string, userId: string): Buffer {
  const message = toBinary(AddAppEntitlementOwnerRequestSchema, create(AddAppEntitlementOwnerRequestSchema, { appId, entitlementId, userId }));
  const frame = Buffer.alloc(5 + message.length);
  frame.writeUInt32BE(message.length, 1);
  frame.set(message, 5);
  return frame;
}

interface LoopResult {
  rps: number;
  meanMs: number;
  done: number;
  failed: number;
}

/** Keeps `concurrency` calls in flight for `seconds`; `call` resolves true on success. */
async function closedLoop(seconds: number, call: () => Promise<boolean>): Promise<LoopResult> {
  const end = performance.now() + seconds * 1000;
  let done = 0;
  let failed = 0;
  let latencyTotal = 0;
  const worker = async () => {
    while (performance.now() < end) {
      const started = performance.now();
      const ok = await call();
      latencyTotal += performance.now() - started;
      if (ok) done++;
      else failed++;
    }
  };
  const started = performance.now();
  await Promise.all(Array.from({ length: concurrency }, worker));
  const elapsed = (performance.now() - started) / 1000;
  return { rps: done / elapsed, meanMs: latencyTotal / Math.max(done + failed, 1), done, failed };
}

/** gRPC over one h2c session with hand-framed messages: the lightest client, like autocannon for HTTP/1.1. */
async function h2GrpcAdd(server: Target, s: Seeded, entitlementId: string, seconds: number): Promise<LoopResult> {
  const session: ClientHttp2Session = http2Connect(server.url);
  let i = 0;
  const call = () =>
    new Promise<boolean>((resolve) => {
      const stream = session.request({
        [h2.HTTP2_HEADER_METHOD]: "POST",
        [h2.HTTP2_HEADER_PATH]: "/svc.api.app.v1.AppEntitlementOwners/Add",
        "content-type": "application/grpc+proto",
        te: "trailers",
        ...server.headers,
      });
      let status: string | undefined;
      stream.on("trailers", (trailers) => {
        const value = trailers["grpc-status"];
        status = Array.isArray(value) ? value[0] : value;
      });
      stream.on("response", (headers) => {
        const value = headers["grpc-status"]; // trailers-only responses
        if (value !== undefined) status = Array.isArray(value) ? value[0] : value;
      });
      stream.on("data", () => {});
      stream.on("close", () => resolve(status === "0"));
      stream.on("error", () => resolve(false));
      stream.end(grpcFrame(s.ownersAppId, entitlementId, s.userIds[i++ % s.userIds.length] ?? ""));
    });
  try {
    return await closedLoop(seconds, call);
  } finally {
    session.close();
  }
}

/** gRPC through @grpc/grpc-js (one channel), the client most internal services would use. */
async function grpcJsAdd(server: Target, s: Seeded, entitlementId: string, seconds: number): Promise<LoopResult> {
  const client = new grpc.Client(`${server.host}:${server.port}`, grpc.credentials.createInsecure());
  const metadata = new grpc.Metadata();
  for (const [name, value] of Object.entries(server.headers)) metadata.set(name, value);
  let i = 0;
  const call = () =>
    new Promise<boolean>((resolve) => {
      const request = create(AddAppEntitlementOwnerRequestSchema, {
        appId: s.ownersAppId,
        entitlementId,
        userId: s.userIds[i++ % s.userIds.length] ?? "",
      });
      client.makeUnaryRequest(
        "/svc.api.app.v1.AppEntitlementOwners/Add",
        (m: typeof request) => Buffer.from(toBinary(AddAppEntitlementOwnerRequestSchema, m)),
        (b: Buffer) => fromBinary(AddAppEntitlementOwnerResponseSchema, b),
        request,
        metadata,
        {},
        (err) => resolve(err === null),
      );
    });
  try {
    return await closedLoop(seconds, call);
  } finally {
    client.close();
  }
}

async function addOwnerThroughput(server: AccessdProcess, s: Seeded): Promise<void> {
  const [restE, h2E, grpcJsE, connectE, warmE] = s.ownerEntitlements as [string, string, string, string, string];
  progress("warming up...");
  await restAdd(server, s, warmE, 1);
  await h2GrpcAdd(server, s, warmE, 1);
  await connectAdd(server, s, warmE, 1);

  progress(`REST Add owner (${throughputSeconds}s, ${concurrency} connections)...`);
  const rest = await measured(server, () => restAdd(server, s, restE, throughputSeconds), fromAutocannon);
  throughputFigure("Add owner, REST (HTTP/1.1, autocannon)", rest, `${concurrency} connections`);

  progress(`gRPC Add owner, raw h2 loop (${throughputSeconds}s, ${concurrency} streams)...`);
  const h2r = await measured(server, () => h2GrpcAdd(server, s, h2E, throughputSeconds), fromLoop);
  if (h2r.failed > 0) throw new Error(`gRPC h2 loop: ${h2r.failed} failed calls`);
  throughputFigure("Add owner, gRPC (h2c, raw HTTP/2 loop)", h2r, `${concurrency} concurrent streams, one session`);

  progress(`gRPC Add owner, @grpc/grpc-js (${throughputSeconds}s, ${concurrency} in flight)...`);
  const gjs = await measured(server, () => grpcJsAdd(server, s, grpcJsE, throughputSeconds), fromLoop);
  if (gjs.failed > 0) throw new Error(`grpc-js loop: ${gjs.failed} failed calls`);
  throughputFigure("Add owner, gRPC (h2c, @grpc/grpc-js)", gjs, `${concurrency} calls in flight, one channel`);

  progress(`Connect JSON Add owner (${throughputSeconds}s)...`);
  const connect = await measured(server, () => connectAdd(server, s, connectE, throughputSeconds), fromAutocannon);
  throughputFigure("Add owner, Connect JSON (HTTP/1.1, autocannon)", connect, `${concurrency} connections`);

  progress(`the same clients against a no-op Add on the same stack (${throughputSeconds}s each)...`);
  const noop = await startNoopServer();
  try {
    await restAdd(noop, s, warmE, 1);
    await h2GrpcAdd(noop, s, warmE, 1);
    const noopRest = await measured(noop, () => restAdd(noop, s, restE, throughputSeconds), fromAutocannon);
    const noopH2 = await measured(noop, () => h2GrpcAdd(noop, s, h2E, throughputSeconds), fromLoop);
    const noopConnect = await measured(noop, () => connectAdd(noop, s, connectE, throughputSeconds), fromAutocannon);
    for (const [protocol, add, noopAdd] of [
      ["REST", rest, noopRest],
      ["gRPC (raw h2)", h2r, noopH2],
      ["Connect JSON", connect, noopConnect],
    ] as const) {
      const cpu =
        add.cpuUs === undefined || noopAdd.cpuUs === undefined
          ? ""
          : `; server CPU ${round(add.cpuUs, 0)} vs ${round(noopAdd.cpuUs, 0)} us per request (${round(add.cpuUs / noopAdd.cpuUs)}x)`;
      report({
        name: `Add owner, ${protocol} / no-op Add on the same stack`,
        value: round(add.rps / noopAdd.rps, 3),
        unit: "x",
        note: `${round(add.rps, 0)} vs ${round(noopAdd.rps, 0)} req/s${cpu} (no-op: same HttpServer, Connect router and REST transcoder, no interceptors, no store)`,
      });
    }
  } finally {
    noop.stop();
  }

  report({
    name: "gRPC (raw h2) / REST Add-owner throughput",
    value: round(h2r.rps / rest.rps),
    unit: "x",
    note: `grpc-js / REST ${round(gjs.rps / rest.rps)}x; Connect / REST ${round(connect.rps / rest.rps)}x`,
  });

  progress("floors: /healthz and a Connect Add refused before the store...");
  const health = await measured(server, () => cannon({ url: `${server.url}/healthz`, duration: throughputSeconds }), fromAutocannon);
  throughputFigure("floor: GET /healthz (no Connect, no store)", health, `${concurrency} connections`);
  const refused = await measured(server, () => connectAdd(server, s, connectE, throughputSeconds, [""]), fromAutocannon);
  if (refused["4xx"] === 0) throw new Error("the refused Add was not refused");
  throughputFigure(
    "floor: Connect Add refused with 400 (Connect stack, no store)",
    refused,
    `${concurrency} connections; the store's share of an Add is the gap to the Connect row`,
  );
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "accessd-bench-"));
  const database = join(dir, "bench.db");
  let server: AccessdProcess | undefined;
  try {
    progress(`seeding ${entitlementCount} entitlements and ${userCount} users...`);
    const seedStarted = performance.now();
    const seeded = seed(database, 5);
    progress(`seeded in ${round((performance.now() - seedStarted) / 1000, 1)} s`);
    server = await startAccessdProcess(database);
    const startRss = server.rssMiB();
    await pageLatency(server, seeded.listAppId, seeded.deepToken);
    await addOwnerThroughput(server, seeded);
    const rss = server.peakRssMiB();
    if (rss !== undefined) {
      report({
        name: "server peak RSS",
        value: round(rss, 0),
        unit: "MiB",
        note: `VmHWM of the accessd process over all phases; ${round(startRss ?? 0, 0)} MiB just after start`,
      });
    }
  } finally {
    await server?.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
