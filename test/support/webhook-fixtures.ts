import { createPublicKey, generateKeyPairSync, randomUUID, type KeyObject } from "node:crypto";
import { once } from "node:events";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import { exportJWK } from "jose";
import { signHmacWebhook, type SignedHeaders } from "../../src/webhooks/index.js";
import type { Config } from "../../src/config.js";
import { startTestServer, type TestServer } from "./test-server.js";

export interface WebhookTriggerInput {
  authMethod: "HMAC" | "JWT";
  jwksUrl?: string;
  ipRestrictionEnabled?: boolean;
  allowedCidrs?: string[];
}

export interface WebhookAutomation {
  id: string;
  listenerId: string;
  endpointUrl: string;
  /** HMAC listeners: the secret Create returned. */
  secret: string;
  /** The endpoint on the test server's real address (endpointUrl uses ACCESSD_BASE_URL). */
  postUrl: string;
}

/** Creates an automation with a webhook trigger and one log step echoing ctx.trigger; publishes and enables it unless told not to. */
export async function createWebhookAutomation(
  server: TestServer,
  trigger: WebhookTriggerInput,
  { active = true }: { active?: boolean } = {},
): Promise<WebhookAutomation> {
  const res = await server.call("POST", "/api/v1/automations", {
    displayName: `webhook ${randomUUID()}`,
    trigger: { webhook: trigger },
    steps: [{ name: "echo", log: { messageCel: "ctx.trigger" } }],
  });
  const body = (await res.json()) as {
    automation?: { id: string; trigger: { webhook: { listenerId: string; endpointUrl: string } } };
    webhookSecret?: string;
  };
  if (res.status !== 200 || body.automation === undefined) {
    throw new Error(`creating the automation failed: ${res.status} ${JSON.stringify(body)}`);
  }
  const { id, trigger: saved } = body.automation;
  if (active) await activate(server, id);
  return {
    id,
    listenerId: saved.webhook.listenerId,
    endpointUrl: saved.webhook.endpointUrl,
    secret: body.webhookSecret ?? "",
    postUrl: `${server.url}/api/v1/webhooks/incoming/${saved.webhook.listenerId}`,
  };
}

export async function activate(server: TestServer, automationId: string): Promise<void> {
  for (const [path, json] of [
    [`/api/v1/automations/${automationId}/publish`, {}],
    [`/api/v1/automations/${automationId}/trigger`, { enabled: true }],
  ] as const) {
    const res = await server.call("POST", path, json);
    if (res.status !== 200) throw new Error(`${path} failed: ${res.status} ${await res.text()}`);
  }
}

export interface WebhookAnswer {
  status: number;
  body: Record<string, unknown>;
}

/** POSTs to a webhook endpoint. No bearer token: the route authenticates by HMAC or JWT only. */
export async function postWebhook(url: string, headers: Record<string, string>, body: string | Buffer): Promise<WebhookAnswer> {
  const res = await fetch(url, { method: "POST", headers, body });
  const text = await res.text();
  return { status: res.status, body: text === "" ? {} : (JSON.parse(text) as Record<string, unknown>) };
}

export function hmacHeaders(
  automation: WebhookAutomation,
  body: string | Buffer,
  options: { secret?: string; eventId?: string; timestamp?: number } = {},
): Record<string, string> {
  const headers: SignedHeaders = signHmacWebhook(
    {
      url: automation.endpointUrl,
      body: Buffer.from(body),
      ...(options.eventId === undefined ? {} : { eventId: options.eventId }),
      ...(options.timestamp === undefined ? {} : { timestamp: options.timestamp }),
    },
    options.secret ?? automation.secret,
  );
  return { ...headers };
}

export interface JwksKeys {
  rs256: KeyObject;
  es256: KeyObject;
  eddsa: KeyObject;
}

export interface JwksServer {
  url: string;
  keys: JwksKeys;
  /** A URL on which the server accepts the connection and never answers. */
  hangingUrl: string;
  requests: number;
  close(): Promise<void>;
}

/** A JWKS document on 127.0.0.1 with an RS256 (kid rs1), an ES256 (es1) and an EdDSA (ed1) key. */
export async function startJwksServer(): Promise<JwksServer> {
  const keys: JwksKeys = {
    rs256: generateKeyPairSync("rsa", { modulusLength: 2048 }).privateKey,
    es256: generateKeyPairSync("ec", { namedCurve: "P-256" }).privateKey,
    eddsa: generateKeyPairSync("ed25519").privateKey,
  };
  const publicJwk = async (key: KeyObject, kid: string, alg: string) => ({
    ...(await exportJWK(createPublicKey(key))),
    kid,
    alg,
    use: "sig",
  });
  const document = JSON.stringify({
    keys: [
      await publicJwk(keys.rs256, "rs1", "RS256"),
      await publicJwk(keys.es256, "es1", "ES256"),
      await publicJwk(keys.eddsa, "ed1", "EdDSA"),
    ],
  });
  const hanging: ServerResponse[] = [];
  const state = { requests: 0 };
  const server = await startLoopbackServer((req, res) => {
    state.requests++;
    if (req.url === "/hang") {
      hanging.push(res);
      return;
    }
    res.writeHead(200, { "content-type": "application/json" }).end(document);
  });
  return {
    url: `${server.url}/jwks.json`,
    hangingUrl: `${server.url}/hang`,
    keys,
    get requests() {
      return state.requests;
    },
    close: () => server.close(),
  };
}

/** A test server (with `overrides`) and a published, enabled automation with an HMAC listener. */
export async function startHmacListener(overrides: Partial<Config> = {}): Promise<{ server: TestServer; hook: WebhookAutomation }> {
  const server = await startTestServer(overrides);
  return { server, hook: await createWebhookAutomation(server, { authMethod: "HMAC" }) };
}

export interface JwtListener {
  server: TestServer;
  jwks: JwksServer;
  /** A published, enabled automation whose JWT listener reads `jwks`. */
  hook: WebhookAutomation;
  close(): Promise<void>;
}

/** A test server (with `overrides`, http:// JWKS allowed) and a JWT listener whose keys a local JWKS server hosts. */
export async function startJwtListener(overrides: Partial<Config> = {}): Promise<JwtListener> {
  const jwks = await startJwksServer();
  const server = await startTestServer({ jwksAllowHttp: true, ...overrides });
  const hook = await createWebhookAutomation(server, { authMethod: "JWT", jwksUrl: jwks.url });
  return {
    server,
    jwks,
    hook,
    async close() {
      await server.close();
      await jwks.close();
    },
  };
}

export interface LoopbackServer {
  /** `http://127.0.0.1:<port>` */
  url: string;
  /** Destroys open connections (a hanging answer too) and stops listening. */
  close(): Promise<void>;
}

/** A node:http server on an ephemeral port of 127.0.0.1 whose close() does not wait for clients. */
export async function startLoopbackServer(handle: (req: IncomingMessage, res: ServerResponse) => void): Promise<LoopbackServer> {
  const sockets = new Set<Socket>();
  const server: Server = createServer(handle);
  server.on("connection", (s: Socket) => {
    sockets.add(s);
    s.on("close", () => sockets.delete(s));
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** A loopback URL where nothing listens. */
export async function unreachableUrl(): Promise<string> {
  const server = createServer();
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return `http://127.0.0.1:${port}/jwks.json`;
}
