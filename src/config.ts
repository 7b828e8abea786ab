import { isIP } from "node:net";
import { defaultLogBufferBytes } from "./log-output.js";
import { parseCidr } from "./server/cidr.js";
import { timestampToleranceSeconds } from "./webhooks/timestamp-window.js";

/** Every ACCESSD_* variable, parsed and validated once at start. */
export interface Config {
  host: string;
  port: number;
  /** SQLite file path, or ":memory:". */
  database: string;
  /** The tenant base URL: JWT `sub` of webhook tokens, prefix of endpoint URLs, token issuer. */
  baseUrl: string;
  logLevel: LogLevel;
  /** Most log text held in memory while stdout is not read (bytes; ACCESSD_LOG_BUFFER_MIB); past it lines are dropped and counted. */
  logBufferBytes: number;
  /** Largest request body accepted by API operations (not webhooks, which have their own 64 KB cap). */
  apiMaxBodyBytes: number;
  /** Connections idle or still sending a request after this long are cut. */
  requestTimeoutMs: number;
  /** Test knob (ACCESSD_TEST_STEP_DELAY_MS): the automation worker waits this long before each step. */
  testStepDelayMs: number;
  /** ACCESSD_BOOTSTRAP_CLIENT_ID/_SECRET: a Super Admin client created at start when absent. */
  bootstrapClient: { clientId: string; clientSecret: string } | undefined;
  /** Lifetime of issued access tokens, in milliseconds. */
  tokenTtlMs: number;
  /** CIDRs of reverse proxies whose `X-Forwarded-For` is believed (webhook IP checks). */
  trustedProxies: string[];
  /** Allow `http://` JWKS URLs on loopback hosts (development and tests only). */
  jwksAllowHttp: boolean;
  /** How long webhook event records (idempotency) are kept, in milliseconds. */
  eventRetentionMs: number;
  /** How long finished executions (and their step records) are kept after they were created and finished, in milliseconds; undefined: for good. */
  executionRetentionMs: number | undefined;
  /** 32-byte key encrypting webhook secrets at rest; undefined: a key file beside the database. */
  dataKey: Buffer | undefined;
}

export type LogLevel = "fatal" | "error" | "warn" | "info" | "debug" | "trace" | "silent";

/** A bad value: the message names the variable, and `main` prints it as one line. */
export class ConfigError extends Error {
  constructor(
    readonly variable: string,
    reason: string,
  ) {
    super(`${variable}: ${reason}`);
    this.name = "ConfigError";
  }
}

export const configDefaults: Config = {
  host: "127.0.0.1",
  port: 8080,
  database: "./data/accessd.db",
  baseUrl: "http://localhost:8080",
  logLevel: "info",
  logBufferBytes: defaultLogBufferBytes,
  apiMaxBodyBytes: 1024 * 1024,
  requestTimeoutMs: 30_000,
  testStepDelayMs: 0,
  bootstrapClient: undefined,
  tokenTtlMs: 3_600_000,
  trustedProxies: [],
  jwksAllowHttp: false,
  eventRetentionMs: 7 * 86_400_000,
  executionRetentionMs: 30 * 86_400_000,
  dataKey: undefined,
};

type Env = Record<string, string | undefined>;

export function loadConfig(env: Env = process.env): Config {
  const port = parseInteger(env, "ACCESSD_PORT", 0, 65535) ?? configDefaults.port;
  return {
    host: parseHost(env, "ACCESSD_HOST") ?? configDefaults.host,
    port,
    database: parseNonEmpty(env, "ACCESSD_DATABASE") ?? configDefaults.database,
    baseUrl: parseBaseUrl(env, "ACCESSD_BASE_URL") ?? defaultBaseUrl(port),
    logLevel: parseLogLevel(env, "ACCESSD_LOG_LEVEL") ?? configDefaults.logLevel,
    logBufferBytes: mebibytes(parseInteger(env, "ACCESSD_LOG_BUFFER_MIB", 1, 4096)) ?? configDefaults.logBufferBytes,
    apiMaxBodyBytes: configDefaults.apiMaxBodyBytes,
    requestTimeoutMs: parseRequestTimeout(env, "ACCESSD_REQUEST_TIMEOUT") ?? configDefaults.requestTimeoutMs,
    testStepDelayMs: parseInteger(env, "ACCESSD_TEST_STEP_DELAY_MS", 0, 60_000) ?? configDefaults.testStepDelayMs,
    bootstrapClient: parseBootstrapClient(env) ?? configDefaults.bootstrapClient,
    tokenTtlMs: parseTokenTtl(env, "ACCESSD_TOKEN_TTL") ?? configDefaults.tokenTtlMs,
    trustedProxies: parseCidrList(env, "ACCESSD_TRUSTED_PROXIES") ?? configDefaults.trustedProxies,
    jwksAllowHttp: parseBoolean(env, "ACCESSD_JWKS_ALLOW_HTTP") ?? configDefaults.jwksAllowHttp,
    eventRetentionMs: parseEventRetention(env, "ACCESSD_EVENT_RETENTION") ?? configDefaults.eventRetentionMs,
    executionRetentionMs: parseExecutionRetention(env, "ACCESSD_EXECUTION_RETENTION"),
    dataKey: parseDataKey(env, "ACCESSD_DATA_KEY") ?? configDefaults.dataKey,
  };
}

/** Every variable accessd reads; another `ACCESSD_*` name in the environment is most likely a typo. */
export const configVariables: readonly string[] = [
  "ACCESSD_HOST",
  "ACCESSD_PORT",
  "ACCESSD_DATABASE",
  "ACCESSD_BASE_URL",
  "ACCESSD_LOG_LEVEL",
  "ACCESSD_LOG_BUFFER_MIB",
  "ACCESSD_REQUEST_TIMEOUT",
  "ACCESSD_TEST_STEP_DELAY_MS",
  "ACCESSD_BOOTSTRAP_CLIENT_ID",
  "ACCESSD_BOOTSTRAP_CLIENT_SECRET",
  "ACCESSD_TOKEN_TTL",
  "ACCESSD_TRUSTED_PROXIES",
  "ACCESSD_JWKS_ALLOW_HTTP",
  "ACCESSD_EVENT_RETENTION",
  "ACCESSD_EXECUTION_RETENTION",
  "ACCESSD_DATA_KEY",
  "ACCESSD_NEW_DATA_KEY",
];

/** The `ACCESSD_*` names in `env` that accessd does not read (`ACCESSD_DATA_KYE`): each is warned about at start. */
export function unknownConfigVariables(env: Env = process.env): string[] {
  return Object.keys(env)
    .filter((name) => name.startsWith("ACCESSD_") && !configVariables.includes(name) && !isKubernetesServiceLink(name, env[name]))
    .sort();
}

/**
 * A variable Kubernetes sets for a Service named accessd (ACCESSD_SERVICE_HOST, ACCESSD_PORT_8080_TCP
 * and the like): not a typo of the operator's, so not warned of as one at every start.
 */
function isKubernetesServiceLink(name: string, value: string | undefined): boolean {
  return /^ACCESSD_(SERVICE_(HOST|PORT)(_\w+)?|PORT_\d+_(TCP|UDP|SCTP)(_(PROTO|PORT|ADDR))?)$/.test(name) && value !== undefined;
}

/** An empty value means unset (an `ACCESSD_PORT=` line in an environment file), except for the data keys. */
function read(env: Env, name: string): string | undefined {
  const value = env[name];
  return value === undefined || value === "" ? undefined : value;
}

function parseNonEmpty(env: Env, name: string): string | undefined {
  const value = read(env, name);
  if (value !== undefined && value.trim() === "") throw new ConfigError(name, "must not be blank");
  return value;
}

function parseHost(env: Env, name: string): string | undefined {
  const value = read(env, name);
  if (value === undefined) return undefined;
  if (isIP(value) === 0 && !/^[a-zA-Z0-9.-]+$/.test(value)) {
    throw new ConfigError(name, `"${value}" is not an IP address or host name`);
  }
  return value;
}

function mebibytes(n: number | undefined): number | undefined {
  return n === undefined ? undefined : n * 1024 * 1024;
}

function parseInteger(env: Env, name: string, min: number, max: number): number | undefined {
  const value = read(env, name);
  if (value === undefined) return undefined;
  if (/^tcp:\/\//.test(value)) {
    // Kubernetes sets <SERVICE>_PORT=tcp://<ip>:<port> in every pod of a namespace with a Service named accessd.
    throw new ConfigError(name, `"${value}" is not a whole number: Kubernetes sets it for a Service named accessd; set enableServiceLinks: false in the pod spec, or ${name} yourself`);
  }
  if (!/^\d+$/.test(value)) throw new ConfigError(name, `"${value}" is not a whole number`);
  const n = Number(value);
  if (n < min || n > max) throw new ConfigError(name, `${n} is outside ${min}..${max}`);
  return n;
}

function parseBaseUrl(env: Env, name: string): string | undefined {
  const value = read(env, name);
  if (value === undefined) return undefined;
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    // Not echoed here or below: `user:password@host` parses as a URL with the scheme `user:`.
    throw new ConfigError(name, "is not an absolute URL (http://host[:port][/path])");
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw new ConfigError(name, `must be an http or https URL, not ${url.protocol}`);
  }
  if (url.username !== "" || url.password !== "") {
    // Not echoed: it names a credential, and the base URL is in every token and endpoint URL.
    throw new ConfigError(name, "must not carry a user name or password (user:password@)");
  }
  if (url.search !== "" || url.hash !== "") {
    throw new ConfigError(name, `"${url.origin}${url.pathname}" must not carry a query or fragment`);
  }
  return value.replace(/\/+$/, "");
}

/**
 * Without ACCESSD_BASE_URL, the URL a client on this machine reaches the server at: localhost and
 * ACCESSD_PORT (8080 unless set; an ephemeral port 0 cannot be known before listening). Endpoint
 * URLs and the tokens' issuer come from it, so a server moved to another port names itself right.
 */
function defaultBaseUrl(port: number): string {
  return port === 0 ? configDefaults.baseUrl : `http://localhost:${port}`;
}

const logLevels: readonly LogLevel[] = ["fatal", "error", "warn", "info", "debug", "trace", "silent"];

function parseLogLevel(env: Env, name: string): LogLevel | undefined {
  const value = read(env, name);
  if (value === undefined) return undefined;
  const level = logLevels.find((l) => l === value);
  if (level === undefined) throw new ConfigError(name, `"${value}" is not one of ${logLevels.join(", ")}`);
  return level;
}

const durationUnits: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** `30s`, `15m`, `1h`, `7d`, `500ms`: a whole number and a unit. */
const durationPattern = /^(\d+)(ms|s|m|h|d)$/;

/** Durations are written `500ms`, `30s`, `15m`, `1h`, `7d`; the result is in milliseconds. */
function parseDuration(env: Env, name: string): number | undefined {
  const value = read(env, name);
  if (value === undefined) return undefined;
  const match = durationPattern.exec(value);
  const unit = match?.[2];
  if (match === null || unit === undefined) {
    throw new ConfigError(name, `"${value}" is not a duration such as 30s, 15m, 1h or 7d`);
  }
  const ms = Number(match[1]) * (durationUnits[unit] ?? 1);
  if (ms <= 0) throw new ConfigError(name, "must be longer than zero");
  if (ms > maxDurationMs) throw new ConfigError(name, `"${value}" is longer than 3650d`);
  return ms;
}

/** Ten years: anything longer is a typo (and `99999999999999999999d` would be Infinity). */
const maxDurationMs = 3650 * 86_400_000;

/**
 * From 1 second to 24 hours. Shorter cuts ordinary request bodies; longer does not fit Node's
 * timers (past 2^31-1 ms, about 24.8 days, a timer fires after 1 ms: every body would be cut at once).
 */
function parseRequestTimeout(env: Env, name: string): number | undefined {
  const ms = parseDuration(env, name);
  if (ms !== undefined && (ms < 1000 || ms > 86_400_000)) throw new ConfigError(name, "must be between 1s and 24h");
  return ms;
}

/** Comma- or space-separated CIDRs (`10.0.0.0/8, 2001:db8::/32`). */
function parseCidrList(env: Env, name: string): string[] | undefined {
  const value = read(env, name);
  if (value === undefined) return undefined;
  const cidrs = value.split(/[\s,]+/).filter((c) => c !== "");
  for (const cidr of cidrs) {
    if (parseCidr(cidr) === undefined) throw new ConfigError(name, `"${cidr}" is not a CIDR such as 10.0.0.0/8`);
  }
  return cidrs;
}

function parseBoolean(env: Env, name: string): boolean | undefined {
  const value = read(env, name);
  if (value === undefined) return undefined;
  if (value === "true" || value === "1") return true;
  if (value === "false" || value === "0") return false;
  throw new ConfigError(name, `"${value}" is not true or false`);
}

/** A 32-byte key written as 64 hex digits or base64url (ACCESSD_DATA_KEY, and rotate-data-key's ACCESSD_NEW_DATA_KEY). */
export function parseDataKey(env: Env, name: string): Buffer | undefined {
  const value = env[name];
  if (value === undefined) return undefined;
  if (value.trim() === "") {
    // `ACCESSD_DATA_KEY=$KEY` with KEY unset: taken as unset, a new database would get a key file
    // of its own, and the key meant for it would not open it later.
    throw new ConfigError(name, "is set but empty: give the key, or unset the variable to use the key file");
  }
  const key = /^[0-9a-fA-F]{64}$/.test(value)
    ? Buffer.from(value, "hex")
    : /^[A-Za-z0-9_+/-]{43}=?$/.test(value)
      ? Buffer.from(value, "base64url")
      : undefined;
  if (key === undefined || key.length !== 32) {
    throw new ConfigError(name, "must be 32 bytes written as 64 hex digits or base64url (e.g. `openssl rand -hex 32`)");
  }
  return key;
}

/** Both variables or neither; the id as a URL-safe name, the secret long enough to resist guessing. */
function parseBootstrapClient(env: Env): Config["bootstrapClient"] {
  const clientId = read(env, "ACCESSD_BOOTSTRAP_CLIENT_ID");
  const clientSecret = read(env, "ACCESSD_BOOTSTRAP_CLIENT_SECRET");
  if (clientId === undefined && clientSecret === undefined) return undefined;
  if (clientId === undefined) throw new ConfigError("ACCESSD_BOOTSTRAP_CLIENT_ID", "must be set with ACCESSD_BOOTSTRAP_CLIENT_SECRET");
  if (clientSecret === undefined) throw new ConfigError("ACCESSD_BOOTSTRAP_CLIENT_SECRET", "must be set with ACCESSD_BOOTSTRAP_CLIENT_ID");
  if (!/^[A-Za-z0-9._~-]{1,128}$/.test(clientId)) {
    throw new ConfigError("ACCESSD_BOOTSTRAP_CLIENT_ID", "must be 1 to 128 characters of A-Z a-z 0-9 . _ ~ -");
  }
  // Never echo the secret in the error.
  // White space counts for nothing: 20 spaces (a variable templated from nothing) passed as a secret.
  if (clientSecret.replace(/\s/g, "").length < 16) {
    throw new ConfigError("ACCESSD_BOOTSTRAP_CLIENT_SECRET", "must be at least 16 characters, not counting white space");
  }
  return { clientId, clientSecret };
}

/**
 * The shortest event-record retention that still refuses every replay: a request stays acceptable
 * up to 10 minutes after its first arrival (an HMAC request's signed timestamp may be 5 minutes
 * ahead of the server and is accepted until 5 minutes behind it; a JWT's `exp` may be 10 minutes
 * ahead, and its Webhook-Timestamp is not signed). A shorter retention would forget the event while
 * a replay of it still passes, and run it again.
 */
export const minEventRetentionMs = 2 * timestampToleranceSeconds * 1000; // 10 minutes

function parseEventRetention(env: Env, name: string): number | undefined {
  const ms = parseDuration(env, name);
  if (ms !== undefined && ms < minEventRetentionMs) {
    throw new ConfigError(
      name,
      "must be at least 10m: a webhook can be replayed for up to 10 minutes after it arrives, and its record is what refuses the replay",
    );
  }
  return ms;
}

/** A duration of at least 1h, or `forever` (undefined: executions are never deleted); unset, the default. */
function parseExecutionRetention(env: Env, name: string): number | undefined {
  const value = read(env, name);
  if (value?.toLowerCase() === "forever") return undefined;
  if (value !== undefined && !durationPattern.test(value)) {
    throw new ConfigError(name, `"${value}" is neither a duration of at least 1h (such as 30d or 90d) nor forever`);
  }
  const ms = parseDuration(env, name) ?? configDefaults.executionRetentionMs;
  if (ms !== undefined && ms < 3_600_000) throw new ConfigError(name, "must be at least 1h, or forever");
  return ms;
}

/** ACCESSD_TOKEN_TTL's upper bound: no access token lives longer (a retired signing key verifies this long). */
export const maxTokenTtlMs = 86_400_000;

/** A token lifetime from 1 minute to 24 hours. */
function parseTokenTtl(env: Env, name: string): number | undefined {
  const ms = parseDuration(env, name);
  if (ms !== undefined && (ms < 60_000 || ms > maxTokenTtlMs)) throw new ConfigError(name, "must be between 1m and 24h");
  return ms;
}
