import { execFile, execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "./support/test-server.js";
import { createWebhookAutomation, type WebhookAutomation } from "./support/webhook-fixtures.js";

/**
 * Webhook senders accessd did not write, in the languages HR tools and ticketing systems are
 * written in: each signs spec 5.2's `<timestamp>.<event_id>.<body>` with its own standard
 * library and sends it with its own HTTP client, and the same request sent again is a 409. The
 * body carries non-ASCII text, so every sender must sign and send the same UTF-8 bytes. A
 * language missing from the machine skips its test (this VM and CI have all three).
 */

const run = promisify(execFile);
const has = (command: string): boolean => {
  try {
    execFileSync("sh", ["-c", `command -v ${command}`], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
};

/** The README's recipe ("Sending a signed webhook"), openssl and curl, run as written there. */
const opensslCurl = `
TS=$(date +%s); ID=$(node -p 'crypto.randomUUID()')
SIG=$(printf '%s' "$TS.$ID.$BODY" | openssl dgst -sha256 -hmac "$WHSECRET" -binary \\
  | openssl base64 -A | tr '+/' '-_' | tr -d '=')
send() {
  curl -s -w ' %{http_code}' -X POST "$URL" -H 'Content-Type: application/json' -H "Webhook-Timestamp: $TS" \\
    -H "Webhook-Event-Id: $ID" -H "Webhook-Signature: $SIG" --data "$BODY"
  echo
}
send; send
`;

/** Python's standard library only (hmac, hashlib, base64, urllib). */
const python = `
import base64, hashlib, hmac, os, time, urllib.error, urllib.request, uuid
body = os.environ["BODY"].encode("utf-8")
ts, event_id = str(int(time.time())), str(uuid.uuid4())
mac = hmac.new(os.environ["WHSECRET"].encode(), f"{ts}.{event_id}.".encode() + body, hashlib.sha256).digest()
signature = base64.urlsafe_b64encode(mac).rstrip(b"=").decode()
for _ in range(2):
    request = urllib.request.Request(os.environ["URL"], data=body, method="POST", headers={
        "Content-Type": "application/json", "Webhook-Timestamp": ts,
        "Webhook-Event-Id": event_id, "Webhook-Signature": signature})
    try:
        with urllib.request.urlopen(request, timeout=20) as response:
            print(response.read().decode(), response.status)
    except urllib.error.HTTPError as refused:
        print(refused.read().decode(), refused.code)
`;

/**
 * Java's java.net.http client, which by default asks a plain-HTTP server to upgrade to HTTP/2
 * (`Connection: Upgrade, HTTP2-Settings` and `Upgrade: h2c`); accessd answers in HTTP/1.1.
 */
const java = `
import java.net.URI;
import java.net.http.*;
import java.nio.charset.StandardCharsets;
import java.util.*;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

public class Sender {
  public static void main(String[] args) throws Exception {
    String body = System.getenv("BODY");
    String ts = Long.toString(System.currentTimeMillis() / 1000);
    String id = UUID.randomUUID().toString();
    Mac mac = Mac.getInstance("HmacSHA256");
    mac.init(new SecretKeySpec(System.getenv("WHSECRET").getBytes(StandardCharsets.UTF_8), "HmacSHA256"));
    byte[] signed = mac.doFinal((ts + "." + id + "." + body).getBytes(StandardCharsets.UTF_8));
    String signature = Base64.getUrlEncoder().withoutPadding().encodeToString(signed);
    HttpClient client = HttpClient.newHttpClient();
    for (int i = 0; i < 2; i++) {
      HttpRequest request = HttpRequest.newBuilder(URI.create(System.getenv("URL")))
        .header("Content-Type", "application/json").header("Webhook-Timestamp", ts)
        .header("Webhook-Event-Id", id).header("Webhook-Signature", signature)
        .POST(HttpRequest.BodyPublishers.ofString(body, StandardCharsets.UTF_8)).build();
      HttpResponse<String> response = client.send(request, HttpResponse.BodyHandlers.ofString());
      System.out.println(response.body() + " " + response.statusCode());
    }
  }
}
`;

let server: TestServer;
let automation: WebhookAutomation;
let folder: string;
beforeAll(async () => {
  server = await startTestServer();
  automation = await createWebhookAutomation(server, { authMethod: "HMAC" });
  folder = mkdtempSync(join(tmpdir(), "accessd-senders-"));
  writeFileSync(join(folder, "Sender.java"), java);
});
afterAll(async () => {
  rmSync(folder, { recursive: true, force: true });
  await server.close();
});

/** Runs a sender with the endpoint, secret and body in its environment; its two answers, `<body> <status>` a line. */
async function send(command: string, args: string[], body: string): Promise<{ first: string; second: string }> {
  const env = { ...process.env, URL: automation.postUrl, WHSECRET: automation.secret, BODY: body };
  const { stdout } = await run(command, args, { env, cwd: folder, timeout: 60_000 });
  const [first = "", second = ""] = stdout.trim().split("\n");
  return { first, second };
}

/** The execution the first answer named has run, with the body the sender meant. */
async function expectRanWith(firstAnswer: string, body: unknown): Promise<void> {
  const { eventId, executionId } = JSON.parse(firstAnswer.slice(0, firstAnswer.lastIndexOf(" "))) as { eventId: string; executionId: string };
  expect(eventId).toMatch(/^[0-9a-f-]{36}$/);
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

describe("webhook senders in other languages", () => {
  const body = { user_id: "u-1", display_name: "Zoë Ångström 山田", note: "tab\there, quote \" and emoji 🙂" };
  const text = JSON.stringify(body);

  it.skipIf(!has("openssl") || !has("curl"))("the README's openssl and curl recipe: 200, then 409 for the same request", async () => {
    const { first, second } = await send("bash", ["-c", opensslCurl], text);
    expect(first).toMatch(/^\{"eventId":"[^"]+","executionId":"[^"]+"\} 200$/);
    expect(second).toMatch(/ 409$/);
    await expectRanWith(first, body);
  });

  it.skipIf(!has("python3"))("Python's standard library: 200, then 409 for the same request", async () => {
    const { first, second } = await send("python3", ["-c", python], text);
    expect(first).toMatch(/ 200$/);
    expect(second).toMatch(/ 409$/);
    await expectRanWith(first, body);
  });

  it.skipIf(!has("java"))("Java's HttpClient, which offers an h2c upgrade: 200, then 409 for the same request", async () => {
    const { first, second } = await send("java", ["Sender.java"], text);
    expect(first).toMatch(/ 200$/);
    expect(second).toMatch(/ 409$/);
    await expectRanWith(first, body);
  });
});
