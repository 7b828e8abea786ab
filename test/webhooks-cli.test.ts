import { generateKeyPairSync, type KeyObject } from "node:crypto";
import { once } from "node:events";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type AddressInfo, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { decodeJwt, decodeProtectedHeader } from "jose";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { spawnCli } from "./support/spawn-cli.js";
import type { TestServer } from "./support/test-server.js";
import { startHmacListener, startJwtListener, type JwksServer, type JwtListener, type WebhookAutomation } from "./support/webhook-fixtures.js";

describe("accessd webhook sign|send", () => {
  let server: TestServer;
  let hook: WebhookAutomation;

  beforeAll(async () => {
    ({ server, hook } = await startHmacListener());
  });
  afterAll(() => server.close());

  it("sends a signed HMAC webhook that the server accepts, and exits 1 on a refusal", async () => {
    const ok = spawnCli(["webhook", "send", "--url", hook.postUrl, "--data", '{"from":"cli"}', "--secret", hook.secret], {});
    expect((await ok.exited).code).toBe(0);
    expect(ok.stdout()).toMatch(/^200 \{"eventId":"[0-9a-f-]{36}","executionId":"[0-9a-f-]{36}"\}\n$/);
    const refused = spawnCli(["webhook", "send", "--url", hook.postUrl, "--data", "{}", "--secret", "wrong"], {});
    expect((await refused.exited).code).toBe(1);
    expect(refused.stdout()).toMatch(/^401 \{"code":"unauthenticated"/);
  });

  it("reports a redirect and does not follow it (a 302 turned the POST into a GET, a 307 failed on the body)", async () => {
    const { createServer: createHttpServer } = await import("node:http");
    const redirector = createHttpServer((req, res) => {
      req.resume();
      res.writeHead(req.url === "/307" ? 307 : 302, { location: hook.postUrl }).end();
    });
    redirector.listen(0, "127.0.0.1");
    await once(redirector, "listening");
    const base = `http://127.0.0.1:${(redirector.address() as AddressInfo).port}`;
    try {
      for (const [path, status] of [["/302", 302], ["/307", 307]] as const) {
        const cli = spawnCli(["webhook", "send", "--url", `${base}${path}`, "--data", "{}", "--secret", hook.secret], {});
        expect((await cli.exited).code).toBe(1);
        expect(cli.stdout()).toBe(`${status} redirect to ${hook.postUrl}, not followed: a listener's URL is the one it names (endpointUrl)\n`);
      }
    } finally {
      redirector.close();
    }
  });

  it("prints the headers of a JWT webhook with every claim", async () => {
    const pem = join(keyDir(), "key.pem");
    writeFileSync(pem, generateKeyPairSync("ec", { namedCurve: "P-256" }).privateKey.export({ type: "pkcs8", format: "pem" }));
    const url = "https://accessd.example.com/api/v1/webhooks/incoming/abc";
    const cli = spawnCli(["webhook", "sign", "--url", url, "--data", '{"a":1}', "--key", pem, "--kid", "k1"], {});
    expect((await cli.exited).code).toBe(0);
    const headers = Object.fromEntries(
      cli.stdout().trim().split("\n").map((line) => [line.slice(0, line.indexOf(":")), line.slice(line.indexOf(":") + 2)]),
    );
    expect(Object.keys(headers)).toEqual(["Content-Type", "Webhook-Timestamp", "Webhook-Event-Id", "Authorization"]);
    const jwt = String(headers.Authorization).replace(/^Bearer /, "");
    expect(decodeProtectedHeader(jwt)).toMatchObject({ alg: "ES256", kid: "k1" });
    const claims = decodeJwt(jwt);
    expect(claims).toMatchObject({ sub: "https://accessd.example.com", aud: url, jti: headers["Webhook-Event-Id"], htm: "POST" });
    expect(claims.htb_s256).toBe("AVq9f1zFei3ZS3WQ8ErYCEJzkF7jPsXOvq5iJ2qX-GI");
    expect(Number(claims.exp) - Number(headers["Webhook-Timestamp"])).toBe(300);
  });
});

const keyDirs: string[] = [];
afterAll(() => {
  for (const dir of keyDirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/** A temporary folder for a PEM key, removed after the tests. */
function keyDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "accessd-cli-key-"));
  keyDirs.push(dir);
  return dir;
}

/** A port nothing listens on right now (the server below must know its URL before it starts). */
async function freePort(): Promise<number> {
  const probe = createServer();
  probe.listen(0, "127.0.0.1");
  await once(probe, "listening");
  const { port } = probe.address() as AddressInfo;
  await new Promise<void>((resolve) => probe.close(() => resolve()));
  return port;
}

function pemFile(key: KeyObject): string {
  const path = join(keyDir(), "key.pem");
  writeFileSync(path, key.export({ type: "pkcs8", format: "pem" }));
  return path;
}

describe("accessd webhook send --key --kid (JWT listeners)", () => {
  let server: TestServer;
  let jwks: JwksServer;
  let hook: WebhookAutomation;

  let listener: JwtListener;

  beforeAll(async () => {
    // The CLI signs aud = --url and sub = the URL up to /api/v1/webhooks/incoming/, so the
    // endpoint URL (from ACCESSD_BASE_URL) must be the address the server really listens on.
    const port = await freePort();
    listener = await startJwtListener({ port, host: "127.0.0.1", baseUrl: `http://127.0.0.1:${port}` });
    ({ server, jwks, hook } = listener);
  });
  afterAll(() => listener.close());

  it("sends a JWT webhook signed with a PEM key that the server verifies against the listener's JWKS, and exits 0", async () => {
    expect(hook.endpointUrl).toBe(hook.postUrl);
    const cli = spawnCli(["webhook", "send", "--url", hook.endpointUrl, "--key", pemFile(jwks.keys.es256), "--kid", "es1", "--data", '{"from":"cli-jwt"}'], {});
    expect((await cli.exited).code).toBe(0);
    const match = /^200 (\{"eventId":"[0-9a-f-]{36}","executionId":"[0-9a-f-]{36}"\})\n$/.exec(cli.stdout());
    expect(match, cli.stdout() + cli.stderr()).not.toBeNull();
    const { eventId, executionId } = JSON.parse(match?.[1] ?? "{}") as { eventId: string; executionId: string };
    expect(jwks.requests).toBeGreaterThanOrEqual(1);

    await server.worker.whenIdle();
    const res = await server.call("GET", `/api/v1/automation_executions/${executionId}`);
    expect(res.status).toBe(200);
    const { execution } = (await res.json()) as { execution: { state: string; eventId: string; trigger: unknown } };
    expect(execution).toMatchObject({ state: "SUCCEEDED", eventId, trigger: { from: "cli-jwt" } });
  });

  it("exits 1 with the 401 when the key is not the one the JWKS holds for that kid", async () => {
    const stranger = pemFile(generateKeyPairSync("ec", { namedCurve: "P-256" }).privateKey);
    const cli = spawnCli(["webhook", "send", "--url", hook.endpointUrl, "--key", stranger, "--kid", "es1", "--data", "{}"], {});
    expect((await cli.exited).code).toBe(1);
    expect(cli.stdout()).toBe('401 {"code":"unauthenticated","message":"the JWT signature does not verify"}\n');
  });
});

describe("accessd webhook send --aud (a listener reached through another address)", () => {
  let jwks: JwksServer;
  let hook: WebhookAutomation;

  let listener: JwtListener;

  beforeAll(async () => {
    // The endpoint URL the service shows (ACCESSD_BASE_URL) is not the address the test reaches it at.
    listener = await startJwtListener({ baseUrl: "https://accessd.example.com" });
    ({ jwks, hook } = listener);
  });
  afterAll(() => listener.close());

  it("signs aud and sub for the endpoint URL the service shows while posting to --url", async () => {
    expect(hook.endpointUrl).not.toBe(hook.postUrl);
    const key = pemFile(jwks.keys.es256);
    const cli = spawnCli(["webhook", "send", "--url", hook.postUrl, "--aud", hook.endpointUrl, "--key", key, "--kid", "es1", "--data", "{}"], {});
    expect((await cli.exited).code, cli.stdout() + cli.stderr()).toBe(0);
    expect(cli.stdout()).toMatch(/^200 \{"eventId"/);

    const unaddressed = spawnCli(["webhook", "send", "--url", hook.postUrl, "--key", key, "--kid", "es1", "--data", "{}"], {});
    expect((await unaddressed.exited).code).toBe(1);
    expect(unaddressed.stdout()).toMatch(/^401 \{"code":"unauthenticated","message":"JWT claim (aud|sub) has the wrong value"\}/);
  });
});

describe("accessd webhook sign|send: what it refuses, and how a send fails", () => {
  let server: TestServer;
  let hook: WebhookAutomation;

  beforeAll(async () => {
    ({ server, hook } = await startHmacListener());
  });
  afterAll(() => server.close());

  const sign = (...args: string[]) => spawnCli(["webhook", "sign", "--url", hook.postUrl, "--data", "{}", ...args], {});

  it("refuses a --timestamp that is not whole Unix seconds (it signed and sent `Webhook-Timestamp: NaN`)", async () => {
    const refusals = ["abc", "1.5", "-5", "1e9", ""].map((value) => ({ value, cli: sign("--secret", hook.secret, "--timestamp", value) }));
    for (const { value, cli } of refusals) {
      expect(await cli.exited, value).toEqual({ code: 1, signal: null });
      expect(cli.stderr()).toBe(
        `error: option '--timestamp <seconds>' argument '${value}' is invalid. Expected a Unix time in whole seconds, such as 1767225600.\n`,
      );
      expect(cli.stdout()).toBe("");
    }
    const old = sign("--secret", hook.secret, "--timestamp", "1700000000"); // any whole seconds, also out of the server's window
    expect((await old.exited).code).toBe(0);
    expect(old.stdout()).toContain("Webhook-Timestamp: 1700000000\n");
  });

  it("refuses an --event-id that is not a UUID v4, the only kind the service accepts", async () => {
    const refusals = ["abc", "3b241101-e2bb-1255-8caf-4136c566a962"].map((value) => ({ value, cli: sign("--secret", hook.secret, "--event-id", value) }));
    for (const { value, cli } of refusals) {
      expect(await cli.exited, value).toEqual({ code: 1, signal: null });
      expect(cli.stderr()).toBe(
        `error: option '--event-id <uuid>' argument '${value}' is invalid. ` +
          "Expected a UUID v4, the only event id the service accepts, such as 3b241101-e2bb-4255-8caf-4136c566a962.\n",
      );
    }
    const given = sign("--secret", hook.secret, "--event-id", "3b241101-e2bb-4255-8caf-4136c566a962");
    expect((await given.exited).code).toBe(0);
    expect(given.stdout()).toContain("Webhook-Event-Id: 3b241101-e2bb-4255-8caf-4136c566a962\n");
  });

  it("refuses an empty --secret, and an empty --secret-file", async () => {
    const empty = sign("--secret", "");
    expect(await empty.exited).toEqual({ code: 1, signal: null });
    expect(empty.stderr()).toBe("accessd: --secret is empty: give the listener's signing secret\n");

    const file = join(keyDir(), "secret");
    writeFileSync(file, "\n");
    const emptyFile = sign("--secret-file", file);
    expect(await emptyFile.exited).toEqual({ code: 1, signal: null });
    expect(emptyFile.stderr()).toBe(`accessd: --secret-file ${file} is empty: it must hold the listener's signing secret\n`);
  });

  it("names the option and the file it cannot read or use: --data @file, --key (a bare ENOENT, and OpenSSL's DECODER error, before)", async () => {
    const missing = join(keyDir(), "missing.json");
    const noData = spawnCli(["webhook", "sign", "--url", hook.postUrl, "--data", `@${missing}`, "--secret", hook.secret], {});
    expect(await noData.exited).toEqual({ code: 1, signal: null });
    expect(noData.stderr()).toBe(`accessd: cannot read --data @${missing}: ENOENT: no such file or directory, open '${missing}'\n`);

    const notAKey = join(keyDir(), "not-a-key.pem");
    writeFileSync(notAKey, "this is no key\n");
    const badKey = sign("--key", notAKey, "--kid", "k1");
    expect(await badKey.exited).toEqual({ code: 1, signal: null });
    expect(badKey.stderr()).toContain(`accessd: --key ${notAKey} is not a PEM private key (RSA, EC P-256 or Ed25519): `);
    const noKey = sign("--key", missing, "--kid", "k1");
    expect(await noKey.exited).toEqual({ code: 1, signal: null });
    expect(noKey.stderr()).toBe(`accessd: cannot read --key ${missing}: ENOENT: no such file or directory, open '${missing}'\n`);
  });

  it("sends with the secret read from --secret-file (kept out of argv), its trailing newline ignored", async () => {
    const file = join(keyDir(), "secret");
    writeFileSync(file, `${hook.secret}\n`, { mode: 0o600 });
    const cli = spawnCli(["webhook", "send", "--url", hook.postUrl, "--data", '{"from":"file"}', "--secret-file", file], {});
    expect(await cli.exited, cli.stderr()).toEqual({ code: 0, signal: null });
    expect(cli.stdout()).toMatch(/^200 \{"eventId":"[0-9a-f-]{36}","executionId":"[0-9a-f-]{36}"\}\n$/);

    const both = sign("--secret", hook.secret, "--secret-file", file);
    expect(await both.exited).toEqual({ code: 1, signal: null });
    expect(both.stderr()).toBe("accessd: give --secret or --secret-file, not both\n");
  });

  it("names the cause when it cannot connect (not only `fetch failed`)", async () => {
    const port = await freePort();
    const url = `http://127.0.0.1:${port}/api/v1/webhooks/incoming/x`;
    const cli = spawnCli(["webhook", "send", "--url", url, "--data", "{}", "--secret", hook.secret], {});
    expect(await cli.exited).toEqual({ code: 1, signal: null });
    expect(cli.stderr()).toBe(`accessd: cannot send to ${url}: connect ECONNREFUSED 127.0.0.1:${port}\n`);
  });

  it("refuses a --url with user:password@ without showing it (fetch's refusal quoted the password twice)", async () => {
    const given = hook.postUrl.replace("http://", "http://ops:hunter2-password@");
    const cases: [string, string][] = [["send", given], ["sign", given], ["send", "http://ops:hunter2-password@127.0.0.1:99999/x"], ["send", "ops:hunter2-password@localhost/x"]];
    for (const [command, url] of cases) {
      const cli = spawnCli(["webhook", command, "--url", url, "--data", "{}", "--secret", hook.secret], {});
      expect(await cli.exited).toEqual({ code: 1, signal: null });
      expect(cli.stderr()).toBe("accessd: --url carries user:password@, which a listener does not take (the signature authenticates the sender): leave it out\n");
      expect(cli.stdout()).toBe("");
    }
  });

  it("gives up on a listener that never answers after --timeout seconds (30 by default), saying so", async () => {
    const sockets: Socket[] = [];
    const silent = createServer((socket) => void sockets.push(socket)); // accepts, reads, never answers
    silent.listen(0, "127.0.0.1");
    await once(silent, "listening");
    const url = `http://127.0.0.1:${(silent.address() as AddressInfo).port}/api/v1/webhooks/incoming/x`;
    try {
      const started = Date.now();
      const cli = spawnCli(["webhook", "send", "--url", url, "--data", "{}", "--secret", hook.secret, "--timeout", "1"], {});
      expect(await cli.exited).toEqual({ code: 1, signal: null });
      expect(cli.stderr()).toBe(`accessd: no answer from ${url} within 1 s (--timeout)\n`);
      expect(Date.now() - started).toBeLessThan(15_000);
    } finally {
      for (const socket of sockets) socket.destroy();
      silent.close();
    }
    const help = spawnCli(["webhook", "send", "--help"], {});
    await help.exited;
    expect(help.stdout()).toMatch(/--timeout <seconds> +how long to wait for the answer \(default: 30\)/);
  });
});

