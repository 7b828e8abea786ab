/**
 * Inbound webhook benchmarks (issue 5), against `accessd serve` in its own process over a SQLite
 * file, with the load generated here by autocannon (HTTP/1.1, keep-alive):
 *
 * 1. A bare `node:http` server (its own process) that reads the body and answers 200: the ceiling
 *    of this machine and load generator, measured in the same run.
 * 2. Accepted HMAC webhooks per second (each request a new event id, signed as it is sent).
 * 3. Accepted JWT webhooks per second for RS256, ES256 and EdDSA (tokens signed before the phase,
 *    so signing does not load the generator; JWKS from a local HTTP server, cached by the service).
 * Every accepted webhook creates an execution that the in-process worker runs (one log step) while
 * the load continues: the figures include that work. Any non-200 answer fails the bench.
 * Reports req/s and the ratio to the bare server, p50/p99 latency, and the server's peak RSS.
 *
 * Run with `npm run bench -- webhooks` or `npx tsx bench/webhooks.ts`.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { createHash, createPublicKey, generateKeyPairSync, randomUUID, type KeyObject } from "node:crypto";
import { once } from "node:events";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import autocannon from "autocannon";
import { exportJWK, SignJWT } from "jose";
import { hmacSignature } from "../src/webhooks/hmac-signature.js";
import { startAccessdProcess, type AccessdProcess } from "./support/accessd-process.js";
import { phaseSeconds, progress, report, round } from "./support/report.js";

const connections = 16;
const seconds = phaseSeconds(8);
/** JWT phases send a fixed number of pre-signed requests. */
const jwtRequests = Math.round(1_500 * seconds);
const body = Buffer.from(JSON.stringify({ user: "u-1", action: "grant", entitlement: "e-1" }));
const bodyHash = createHash("sha256").update(body).digest("base64url");

interface Phase {
  label: string;
  rps: number;
  p50: number;
  p99: number;
}

async function run(label: string, url: string, requests: autocannon.Request[], limit: { duration?: number; amount?: number }): Promise<Phase> {
  const result = await autocannon({ url, method: "POST", connections, requests, ...limit });
  const failed = result.non2xx + result.errors + result.timeouts;
  if (failed > 0) throw new Error(`${label}: ${failed} requests failed (non-2xx ${result.non2xx}, errors ${result.errors})`);
  const rps = result.requests.total / result.duration;
  progress(`${label}: ${round(rps, 0)} req/s, p50 ${result.latency.p50} ms, p99 ${result.latency.p99} ms`);
  return { label, rps, p50: result.latency.p50, p99: result.latency.p99 };
}

/** A request generator that signs each request with a fresh event id (HMAC is cheap enough to do inline). */
function hmacRequests(secret: string, path: string): autocannon.Request[] {
  return [
    {
      method: "POST",
      path,
      setupRequest: (req) => {
        const timestamp = String(Math.floor(Date.now() / 1000));
        const eventId = randomUUID();
        return {
          ...req,
          body,
          headers: {
            "content-type": "application/json",
            "webhook-timestamp": timestamp,
            "webhook-event-id": eventId,
            "webhook-signature": hmacSignature(secret, timestamp, eventId, body),
          },
        };
      },
    },
  ];
}

/** `count` pre-signed JWT requests, sent in turn. */
async function jwtRequests_(count: number, key: KeyObject, kid: string, alg: string, endpointUrl: string, baseUrl: string, path: string) {
  const pool: Record<string, string>[] = [];
  const timestamp = Math.floor(Date.now() / 1000);
  for (let i = 0; i < count; i++) {
    const eventId = randomUUID();
    const jwt = await new SignJWT({ htm: "POST", htb_s256: bodyHash })
      .setProtectedHeader({ alg, kid })
      .setSubject(baseUrl)
      .setAudience(endpointUrl)
      .setJti(eventId)
      .setExpirationTime(timestamp + 590)
      .sign(key);
    pool.push({
      "content-type": "application/json",
      "webhook-timestamp": String(timestamp),
      "webhook-event-id": eventId,
      authorization: `Bearer ${jwt}`,
    });
  }
  let next = 0;
  const requests: autocannon.Request[] = [
    { method: "POST", path, setupRequest: (req) => ({ ...req, body, headers: pool[next++ % pool.length] }) },
  ];
  return requests;
}

async function startBareServer(): Promise<{ url: string; child: ChildProcess }> {
  const source = `
    const http = require("node:http");
    const server = http.createServer((req, res) => {
      req.on("data", () => {});
      req.on("end", () => { res.writeHead(200, { "content-type": "application/json" }); res.end('{"ok":true}'); });
    });
    server.listen(0, "127.0.0.1", () => process.stdout.write(String(server.address().port) + "\\n"));`;
  const child = spawn(process.execPath, ["-e", source], { stdio: ["ignore", "pipe", "inherit"] });
  const [chunk] = (await once(child.stdout!, "data")) as [Buffer];
  return { url: `http://127.0.0.1:${chunk.toString().trim()}`, child };
}

async function startJwksServer(keys: { kid: string; alg: string; key: KeyObject }[]) {
  const document = JSON.stringify({
    keys: await Promise.all(
      keys.map(async ({ kid, alg, key }) => ({ ...(await exportJWK(createPublicKey(key))), kid, alg, use: "sig" })),
    ),
  });
  const server = createServer((_req, res) => res.writeHead(200, { "content-type": "application/json" }).end(document));
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/jwks.json`, server };
}

async function createAutomation(server: AccessdProcess, trigger: object): Promise<{ id: string; listenerId: string; endpointUrl: string; secret: string }> {
  const call = async (path: string, json: object) => {
    const res = await fetch(server.url + path, {
      method: "POST",
      headers: { ...server.headers, "content-type": "application/json" },
      body: JSON.stringify(json),
    });
    if (res.status !== 200) throw new Error(`${path}: ${res.status} ${await res.text()}`);
    return res.json() as Promise<Record<string, unknown>>;
  };
  const created = (await call("/api/v1/automations", {
    displayName: "bench",
    trigger: { webhook: trigger },
    steps: [{ name: "note", log: { messageCel: "ctx.trigger.user" } }],
  })) as { automation: { id: string; trigger: { webhook: { listenerId: string; endpointUrl: string } } }; webhookSecret?: string };
  const id = created.automation.id;
  await call(`/api/v1/automations/${id}/publish`, {});
  await call(`/api/v1/automations/${id}/trigger`, { enabled: true });
  return { id, ...created.automation.trigger.webhook, secret: created.webhookSecret ?? "" };
}

const keys = [
  { kid: "rs1", alg: "RS256", key: generateKeyPairSync("rsa", { modulusLength: 2048 }).privateKey },
  { kid: "es1", alg: "ES256", key: generateKeyPairSync("ec", { namedCurve: "P-256" }).privateKey },
  { kid: "ed1", alg: "EdDSA", key: generateKeyPairSync("ed25519").privateKey },
];
const jwks = await startJwksServer(keys);
const dir = mkdtempSync(join(tmpdir(), "accessd-bench-webhooks-"));
process.env.ACCESSD_JWKS_ALLOW_HTTP = "true";
const server = await startAccessdProcess(join(dir, "accessd.db"));
const bare = await startBareServer();
try {
  const hmac = await createAutomation(server, { authMethod: "HMAC" });
  const jwt = await createAutomation(server, { authMethod: "JWT", jwksUrl: jwks.url });
  const baseUrl = hmac.endpointUrl.slice(0, hmac.endpointUrl.indexOf("/api/v1/"));
  const pathOf = (listenerId: string) => `/api/v1/webhooks/incoming/${listenerId}`;

  progress(`warm-up (${connections} connections)...`);
  await run("warm-up", server.url, hmacRequests(hmac.secret, pathOf(hmac.listenerId)), { duration: 2 });

  progress(`bare node:http, ${seconds}s...`);
  const baseline = await run("bare node:http 200", bare.url, hmacRequests(hmac.secret, "/"), { duration: seconds });
  const phases: Phase[] = [];
  phases.push(await run("HMAC", server.url, hmacRequests(hmac.secret, pathOf(hmac.listenerId)), { duration: seconds }));
  for (const { kid, alg, key } of keys) {
    progress(`signing ${jwtRequests} ${alg} tokens...`);
    const requests = await jwtRequests_(jwtRequests, key, kid, alg, jwt.endpointUrl, baseUrl, pathOf(jwt.listenerId));
    phases.push(await run(`JWT ${alg}`, server.url, requests, { amount: jwtRequests }));
  }

  report({
    name: "bare node:http answering 200",
    value: round(baseline.rps, 0),
    unit: "req/s",
    note: `p50 ${baseline.p50} ms, p99 ${baseline.p99} ms; ${connections} connections, same load generator`,
  });
  for (const phase of phases) {
    report({
      name: `accepted webhooks, ${phase.label}`,
      value: round(phase.rps, 0),
      unit: "req/s",
      note: `${round(phase.rps / baseline.rps, 3)}x the bare server; p50 ${phase.p50} ms, p99 ${phase.p99} ms; ${connections} connections, ${body.length}-byte body, each run by the worker`,
    });
    report({ name: `accepted webhooks, ${phase.label} / bare node:http`, value: round(phase.rps / baseline.rps, 3), unit: "x" });
  }
  const rss = server.peakRssMiB();
  if (rss !== undefined) report({ name: "accessd peak RSS (webhooks bench)", value: round(rss, 1), unit: "MiB" });
} finally {
  await server.stop();
  bare.child.kill("SIGTERM");
  jwks.server.close();
  rmSync(dir, { recursive: true, force: true });
}
