import { PassThrough } from "node:stream";
import { Role } from "../../gen/svc/api/iam/v1/role_pb.js";
import { hashSecret } from "../../src/auth/client-secret.js";
import type { Clock } from "../../src/clock.js";
import { configDefaults, type Config } from "../../src/config.js";
import { createLogger } from "../../src/logger.js";
import { startAccessd, type Accessd, type StartOptions } from "../../src/main.js";
import { newId } from "../../src/store/ids.js";

/** The Super Admin client every test server is bootstrapped with (ACCESSD_BOOTSTRAP_CLIENT_*). */
export const testBootstrapClient = {
  clientId: "test-super-admin",
  clientSecret: "test-super-admin-secret-0123456789",
} as const;

export interface TestServer extends Accessd {
  /**
   * Headers every API request of a test should carry: `authorization: Bearer <token>` of the
   * bootstrapped Super Admin client.
   */
  headers: Record<string, string>;
  /** fetch against the server, with `headers` added; a JSON `json` body sets Content-Type. */
  call(method: string, path: string, json?: unknown, extraHeaders?: Record<string, string>): Promise<Response>;
  /** A token from POST /auth/v1/token for these client credentials (client_secret_post, form-encoded). */
  fetchToken(clientId: string, clientSecret: string): Promise<string>;
  /**
   * A bearer token of a new client whose new user holds `roles` (none: a user without roles).
   * Use `{ authorization: "Bearer " + token }` as headers.
   */
  tokenFor(...roles: Role[]): Promise<string>;
}

export interface TestServerOptions {
  clock?: Clock;
}

/**
 * A real accessd on an ephemeral port of 127.0.0.1, over an in-memory database (unless
 * `overrides.database` names a file), bootstrapped with a Super Admin client whose token is in
 * `server.headers`.
 */
export async function startTestServer(overrides: Partial<Config> = {}, options: TestServerOptions = {}): Promise<TestServer> {
  const config: Config = {
    ...configDefaults,
    port: 0,
    database: ":memory:",
    logLevel: "silent",
    bootstrapClient: testBootstrapClient,
    ...overrides,
  };
  const startOptions: StartOptions = options.clock === undefined ? {} : { clock: options.clock };
  const accessd = await startAccessd(config, createLogger(config.logLevel), startOptions);
  const headers: Record<string, string> = {};

  const fetchToken = (clientId: string, clientSecret: string): Promise<string> => fetchTokenAt(accessd.url, clientId, clientSecret);

  const tokenFor = async (...roles: Role[]): Promise<string> => {
    const { store } = accessd;
    const now = Date.now();
    const userId = newId();
    const clientId = newId();
    const clientSecret = `secret-${clientId}`;
    const secretHash = await hashSecret(clientSecret);
    store.transaction(() => {
      const label = roles.length === 0 ? "no role" : roles.map((r) => Role[r]).join("+");
      store.users.insert({ id: userId, displayName: `test ${label}`, email: "", username: "", createdAt: now, updatedAt: now, roles });
      store.clients.insert({ id: clientId, userId, displayName: `test ${label}`, secretHash, publicJwk: undefined, createdAt: now });
    });
    return fetchToken(clientId, clientSecret);
  };

  if (config.bootstrapClient !== undefined) {
    const token = await fetchToken(config.bootstrapClient.clientId, config.bootstrapClient.clientSecret);
    headers.authorization = `Bearer ${token}`;
  }

  return Object.assign(accessd, {
    headers,
    fetchToken,
    tokenFor,
    call(method: string, path: string, json?: unknown, extraHeaders: Record<string, string> = {}) {
      return fetch(accessd.url + path, {
        method,
        headers: {
          ...headers,
          ...(json === undefined ? {} : { "content-type": "application/json" }),
          ...extraHeaders,
        },
        body: json === undefined ? undefined : typeof json === "string" ? json : JSON.stringify(json),
      });
    },
  });
}

/** A token from `url`'s POST /auth/v1/token for these client credentials (client_secret_post). */
async function fetchTokenAt(url: string, clientId: string, clientSecret: string): Promise<string> {
  const res = await fetch(`${url}/auth/v1/token`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({ grant_type: "client_credentials", client_id: clientId, client_secret: clientSecret }),
  });
  const body = (await res.json()) as { access_token?: string };
  if (res.status !== 200 || body.access_token === undefined) {
    throw new Error(`token request for ${clientId} failed: ${res.status} ${JSON.stringify(body)}`);
  }
  return body.access_token;
}

/** `{ authorization: "Bearer <token>" }` of the bootstrapped Super Admin client of the accessd at `url`. */
export async function bootstrapAuthorization(url: string): Promise<{ authorization: string }> {
  return { authorization: `Bearer ${await fetchTokenAt(url, testBootstrapClient.clientId, testBootstrapClient.clientSecret)}` };
}

/** An accessd (in-memory, bootstrapped) whose log lines the test reads. */
export interface LoggedAccessd {
  accessd: Accessd;
  /** Every line written so far, raw (for searches over the whole text). */
  text(): string;
  /** Every line written so far, parsed. */
  lines(): Record<string, unknown>[];
}

/** Starts accessd as startTestServer does, but logging at `level` into memory instead of nowhere. */
export async function startLoggedAccessd(level: Config["logLevel"] = "info", overrides: Partial<Config> = {}, options: StartOptions = {}): Promise<LoggedAccessd> {
  let logged = "";
  const sink = new PassThrough();
  sink.on("data", (chunk: Buffer) => (logged += chunk.toString()));
  const accessd = await startAccessd(
    { ...configDefaults, port: 0, database: ":memory:", logLevel: level, bootstrapClient: testBootstrapClient, ...overrides },
    createLogger(level, sink),
    options,
  );
  return {
    accessd,
    text: () => logged,
    lines: () =>
      logged
        .trim()
        .split("\n")
        .filter((line) => line !== "")
        .map((line) => JSON.parse(line) as Record<string, unknown>),
  };
}
