import { execFile, execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { TestServer } from "./support/test-server.js";
import { startHmacListener, startJwtListener, type JwtListener, type WebhookAutomation } from "./support/webhook-fixtures.js";

/**
 * Webhook senders accessd did not write, in the languages HR tools and ticketing systems are
 * written in (`test/support/senders/`): each signs with its own standard library and sends with
 * its own HTTP client, and the same request sent again is a 409. The bodies carry non-ASCII text,
 * so every sender must sign and send the same UTF-8 bytes. A language missing from the machine
 * skips its tests (this VM, where CI runs, has all of them).
 */

const run = promisify(execFile);
const senders = fileURLToPath(new URL("./support/senders/", import.meta.url));
const has = (command: string): boolean => {
  try {
    execFileSync("sh", ["-c", `command -v ${command}`], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
};

/** The Java senders, compiled once (`java File.java` compiles on every run: 2 s each). */
let javaClasses = "";
beforeAll(async () => {
  if (!has("javac")) return;
  javaClasses = mkdtempSync(join(tmpdir(), "accessd-java-senders-"));
  await run("javac", ["-d", javaClasses, "HmacSender.java", "JwtSender.java"], { cwd: senders, timeout: 60_000 });
});
afterAll(() => {
  if (javaClasses !== "") rmSync(javaClasses, { recursive: true, force: true });
});
const java = (main: string, ...args: string[]): [string, ...string[]] => ["java", "-cp", javaClasses, main, ...args];

interface Target {
  /** Where the sender posts (the test server's real address). */
  postUrl: string;
  /** The endpoint URL the service shows (a JWT's `aud`). */
  endpointUrl: string;
  /** HMAC listeners' secret. */
  secret: string;
}

/** Runs a sender with the target and the body in its environment; its two answers, each `<body> <status>`. */
async function send(target: Target, body: string, command: string, ...args: string[]): Promise<{ first: string; second: string }> {
  const env = { ...process.env, URL: target.postUrl, AUD: target.endpointUrl, WHSECRET: target.secret, BODY: body };
  const { stdout } = await run(command, args, { env, cwd: senders, timeout: 60_000 });
  const [first = "", second = ""] = stdout.trim().split("\n");
  return { first, second };
}

/** The first answer is a 200 naming an execution, the second a 409; the execution ran with the body as sent. */
async function expectAcceptedOnce(server: TestServer, { first, second }: { first: string; second: string }, body: unknown): Promise<void> {
  expect(first).toMatch(/^\{"eventId":"[^"]+","executionId":"[^"]+"\} 200$/);
  expect(second).toMatch(/^\{"code":"already_exists",.*\} 409$/);
  const { eventId, executionId } = JSON.parse(first.slice(0, first.lastIndexOf(" "))) as { eventId: string; executionId: string };
  const deadline = Date.now() + 10_000;
  for (;;) {
    const res = await server.call("GET", `/api/v1/automation_executions/${executionId}`);
    const { execution } = (await res.json()) as { execution: { state: string; eventId: string; trigger: unknown } };
    if (execution.state === "SUCCEEDED") {
      expect(execution).toMatchObject({ eventId, trigger: body });
      return;
    }
    if (Date.now() > deadline) throw new Error(`execution ${executionId} still ${execution.state}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

describe("HMAC webhooks from senders in other languages", () => {
  const body = { user_id: "u-1", display_name: "Zoë Ångström 山田", note: 'tab\there, a quote " and an emoji 🙂' };
  const text = JSON.stringify(body);
  let server: TestServer;
  let hook: WebhookAutomation;
  beforeAll(async () => {
    ({ server, hook } = await startHmacListener());
  });
  afterAll(() => server.close());

  it.skipIf(!has("openssl") || !has("curl"))("the README's openssl and curl recipe", async () => {
    await expectAcceptedOnce(server, await send(hook, text, "bash", "hmac-sender.sh"), body);
  });

  it.skipIf(!has("python3"))("Python's standard library (hmac, urllib)", async () => {
    await expectAcceptedOnce(server, await send(hook, text, "python3", "hmac_sender.py"), body);
  });

  it.skipIf(!has("javac"))("Java's javax.crypto and HttpClient, which offers an h2c upgrade", async () => {
    await expectAcceptedOnce(server, await send(hook, text, ...java("HmacSender")), body);
  });
});

describe("JWT webhooks signed by Java's own crypto", () => {
  const body = { user_id: "u-2", display_name: "Zoë 山田" };
  let listener: JwtListener;
  let keys: string;
  beforeAll(async () => {
    listener = await startJwtListener();
    keys = mkdtempSync(join(tmpdir(), "accessd-sender-keys-"));
    for (const [name, key] of Object.entries(listener.jwks.keys)) {
      writeFileSync(join(keys, `${name}.pem`), key.export({ type: "pkcs8", format: "pem" }), { mode: 0o600 });
    }
  });
  afterAll(async () => {
    rmSync(keys, { recursive: true, force: true });
    await listener.close();
  });

  it.skipIf(!has("javac")).each([
    ["RS256", "rs1", "rs256"],
    ["ES256", "es1", "es256"],
    ["EdDSA", "ed1", "eddsa"],
  ])("%s", async (alg, kid, key) => {
    const answers = await send(listener.hook, JSON.stringify(body), ...java("JwtSender", alg, kid, join(keys, `${key}.pem`)));
    await expectAcceptedOnce(listener.server, answers, body);
  });
});
