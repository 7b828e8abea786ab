import { listeningPort, spawnCli, type CliProcess } from "./spawn-cli.js";

/** The Super Admin client a child-process server is bootstrapped with (ACCESSD_BOOTSTRAP_CLIENT_*). */
export const processBootstrapClient = {
  ACCESSD_BOOTSTRAP_CLIENT_ID: "process-test-admin",
  ACCESSD_BOOTSTRAP_CLIENT_SECRET: "process-test-admin-secret-0123456789",
} as const;

export interface ServedProcess {
  cli: CliProcess;
  /** http://127.0.0.1:<port> parsed from the "accessd listening" line. */
  url: string;
  /** An API call with the bootstrap client's bearer token; throws unless the answer is 200. */
  call<T>(method: string, path: string, body?: unknown): Promise<T>;
}

/**
 * `accessd serve` in a child process on an ephemeral port with the bootstrap client configured,
 * and a token for it from POST /auth/v1/token. `env` adds or overrides ACCESSD_* variables.
 */
export async function serveProcess(env: Record<string, string>): Promise<ServedProcess> {
  const cli = spawnCli(["serve"], { ACCESSD_PORT: "0", ...processBootstrapClient, ...env });
  const url = `http://127.0.0.1:${await listeningPort(cli)}`;
  const res = await fetch(`${url}/auth/v1/token`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({
      grant_type: "client_credentials",
      client_id: env.ACCESSD_BOOTSTRAP_CLIENT_ID ?? processBootstrapClient.ACCESSD_BOOTSTRAP_CLIENT_ID,
      client_secret: env.ACCESSD_BOOTSTRAP_CLIENT_SECRET ?? processBootstrapClient.ACCESSD_BOOTSTRAP_CLIENT_SECRET,
    }),
  });
  const token = (await res.json()) as { access_token?: string };
  if (res.status !== 200 || token.access_token === undefined) {
    cli.child.kill("SIGKILL");
    throw new Error(`token request failed: ${res.status} ${JSON.stringify(token)}`);
  }
  const authorization = `Bearer ${token.access_token}`;
  return {
    cli,
    url,
    async call<T>(method: string, path: string, body?: unknown): Promise<T> {
      const answer = await fetch(url + path, {
        method,
        headers: { authorization, ...(body === undefined ? {} : { "content-type": "application/json" }) },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      const text = await answer.text();
      if (answer.status !== 200) throw new Error(`${method} ${path}: ${answer.status} ${text}`);
      return JSON.parse(text) as T;
    },
  };
}

/** A published, enabled HMAC webhook automation on a child-process server, as a sender sees it. */
export interface HmacListener {
  automationId: string;
  /** The path to POST events to (on whatever address the server has now). */
  path: string;
  /** The endpoint URL the automation reports (what HMAC senders sign for). */
  endpointUrl: string;
  secret: string;
}

/** Creates an automation with an HMAC webhook trigger and `steps`, publishes it and enables the trigger. */
export async function createHmacListener(served: ServedProcess, displayName: string, steps: unknown[]): Promise<HmacListener> {
  const created = await served.call<{
    automation: { id: string; trigger: { webhook: { listenerId: string; endpointUrl: string } } };
    webhookSecret: string;
  }>("POST", "/api/v1/automations", { displayName, trigger: { webhook: { authMethod: "HMAC" } }, steps });
  const automationId = created.automation.id;
  await served.call("POST", `/api/v1/automations/${automationId}/publish`, {});
  await served.call("POST", `/api/v1/automations/${automationId}/trigger`, { enabled: true });
  const { listenerId, endpointUrl } = created.automation.trigger.webhook;
  return { automationId, path: `/api/v1/webhooks/incoming/${listenerId}`, endpointUrl, secret: created.webhookSecret };
}

/** Polls `condition` every 10 ms until it holds; throws naming `what` after `timeoutMs`. */
export async function until(what: string, condition: () => Promise<boolean> | boolean, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** "<execution id>/<step>" for every "automation log" line the process printed (log steps that ran). */
export function automationLogLines(cli: CliProcess): string[] {
  return cli
    .stdout()
    .split("\n")
    .filter((line) => line.includes('"automation log"'))
    .map((line) => {
      const entry = JSON.parse(line) as { executionId: string; step: string };
      return `${entry.executionId}/${entry.step}`;
    });
}
