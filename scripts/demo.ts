/**
 * `npm run demo`: the whole flow a newcomer wants to see, against a fresh temporary database.
 * Bootstraps a Super Admin client with `accessd bootstrap`, starts the server, gets a token,
 * creates an app, an entitlement and a user, an HMAC-triggered automation that adds
 * `ctx.trigger.userId` as an owner, sends a signed webhook with `accessd webhook send`, waits for
 * the execution, prints the owners, and stops. Exits non-zero when any step fails.
 */
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { configDefaults, type Config } from "../src/config.js";
import { createLogger } from "../src/logger.js";
import { startAccessd } from "../src/main.js";

const run = promisify(execFile);
const root = fileURLToPath(new URL("..", import.meta.url));
const tsx = join(root, "node_modules", ".bin", "tsx");
const cli = join(root, "src", "cli", "main.ts");

let stepNumber = 0;
function step(title: string, detail?: unknown): void {
  stepNumber++;
  process.stdout.write(`\n${stepNumber}. ${title}\n`);
  if (detail !== undefined) process.stdout.write(`   ${typeof detail === "string" ? detail : JSON.stringify(detail)}\n`);
}

/** `accessd <args>` as a user runs it (through tsx, so no build is needed). */
async function accessd(args: string[], env: Record<string, string>): Promise<string> {
  const { stdout } = await run(tsx, [cli, ...args], { cwd: root, env: { ...process.env, ...env } });
  return stdout.trim();
}

async function freePort(): Promise<number> {
  const probe = createServer();
  await new Promise<void>((resolve) => probe.listen(0, "127.0.0.1", resolve));
  const address = probe.address();
  await new Promise<void>((resolve) => probe.close(() => resolve()));
  if (address === null || typeof address === "string") throw new Error("no free port");
  return address.port;
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "accessd-demo-"));
  const database = join(dir, "accessd.db");
  const port = await freePort();
  const baseUrl = `http://127.0.0.1:${port}`;
  const env = { ACCESSD_DATABASE: database, ACCESSD_LOG_LEVEL: "warn" };

  step("Fresh database", database);
  const bootstrap = JSON.parse(await accessd(["bootstrap"], env)) as { client_id: string; client_secret: string };
  step("accessd bootstrap: a Super Admin API client", { client_id: bootstrap.client_id, client_secret: "(hidden)" });

  const config: Config = { ...configDefaults, port, database, baseUrl, logLevel: "warn" };
  const server = await startAccessd(config, createLogger(config.logLevel));
  try {
    step("Server started", `${server.url} (gRPC, Connect and REST on one port)`);

    const tokenResponse = await fetch(`${baseUrl}/auth/v1/token`, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({
        grant_type: "client_credentials",
        client_id: bootstrap.client_id,
        client_secret: bootstrap.client_secret,
      }),
    });
    const token = ((await expectOk(tokenResponse, "POST /auth/v1/token")) as { access_token: string }).access_token;
    step("POST /auth/v1/token (client credentials)", "got a bearer access token");

    const api = async (method: string, path: string, body?: unknown): Promise<Record<string, unknown>> => {
      const res = await fetch(`${baseUrl}${path}`, {
        method,
        headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { "content-type": "application/json" }) },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      return (await expectOk(res, `${method} ${path}`)) as Record<string, unknown>;
    };

    const app = (await api("POST", "/api/v1/apps", { displayName: "Billing" }))["app"] as { id: string };
    step("Created app", app);
    const entitlement = (
      await api("POST", `/api/v1/apps/${app.id}/entitlements`, { displayName: "Billing admin" })
    )["appEntitlement"] as { id: string };
    step("Created entitlement", entitlement);
    const user = (await api("POST", "/api/v1/users", { displayName: "Ada Lovelace", email: "ada@example.com" }))[
      "user"
    ] as { id: string };
    step("Created user", user);

    const created = await api("POST", "/api/v1/automations", {
      displayName: "Grant billing admin on request",
      trigger: { webhook: { authMethod: "HMAC" } },
      steps: [
        {
          name: "add_owner",
          addEntitlementOwner: {
            appIdCel: JSON.stringify(app.id),
            entitlementIdCel: JSON.stringify(entitlement.id),
            userIdCel: "ctx.trigger.userId",
          },
        },
      ],
    });
    const automation = created["automation"] as { id: string; trigger: { webhook: { endpointUrl: string } } };
    const secret = created["webhookSecret"] as string;
    step("Created automation with an HMAC webhook trigger (step: add ctx.trigger.userId as owner)", {
      id: automation.id,
      endpointUrl: automation.trigger.webhook.endpointUrl,
    });
    await api("POST", `/api/v1/automations/${automation.id}/publish`, {});
    await api("POST", `/api/v1/automations/${automation.id}/trigger`, { enabled: true });
    step("Published it and enabled its trigger");

    const sent = await accessd(
      ["webhook", "send", "--url", automation.trigger.webhook.endpointUrl, "--secret", secret, "--data", JSON.stringify({ userId: user.id })],
      env,
    );
    step("accessd webhook send (signed with HMAC-SHA256)", sent);
    const executionId = (JSON.parse(sent.slice(sent.indexOf(" ") + 1)) as { executionId: string }).executionId;

    let state = "";
    for (let i = 0; i < 100 && state !== "SUCCEEDED" && state !== "FAILED"; i++) {
      const got = await api("GET", `/api/v1/automation_executions/${executionId}`);
      state = (got["execution"] as { state: string }).state;
      if (state !== "SUCCEEDED" && state !== "FAILED") await new Promise((r) => setTimeout(r, 50));
    }
    step("Execution finished", { executionId, state });
    if (state !== "SUCCEEDED") throw new Error(`the execution ended ${state}`);

    const owners = await api("GET", `/api/v1/apps/${app.id}/entitlements/${entitlement.id}/owners`);
    const list = owners["list"] as { id: string; displayName: string }[];
    step("Owners of the entitlement", list.map((u) => `${u.displayName} (${u.id})`).join(", "));
    if (!list.some((u) => u.id === user.id)) throw new Error("the user was not added as an owner");
    process.stdout.write(`\nDone: the webhook added ${user.id} as an owner.\n`);
  } finally {
    await server.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

async function expectOk(res: Response, what: string): Promise<unknown> {
  const text = await res.text();
  if (!res.ok) throw new Error(`${what} answered ${res.status}: ${text}`);
  return JSON.parse(text) as unknown;
}

main().catch((e: unknown) => {
  process.stderr.write(`demo failed: ${e instanceof Error ? e.message : String(e)}\n`);
  process.exit(1);
});
