import { generateKeyPairSync } from "node:crypto";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { decodeJwt, decodeProtectedHeader } from "jose";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { spawnCli } from "./support/spawn-cli.js";
import { startTestServer, type TestServer } from "./support/test-server.js";
import { createWebhookAutomation, type WebhookAutomation } from "./support/webhook-fixtures.js";

describe("accessd webhook sign|send", () => {
  let server: TestServer;
  let hook: WebhookAutomation;

  beforeAll(async () => {
    server = await startTestServer();
    hook = await createWebhookAutomation(server, { authMethod: "HMAC" });
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

  it("prints the headers of a JWT webhook with every claim", async () => {
    const dir = mkdtempSync(join(tmpdir(), "accessd-cli-key-"));
    const pem = join(dir, "key.pem");
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
