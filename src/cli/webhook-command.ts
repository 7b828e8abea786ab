import { createPrivateKey, type KeyObject } from "node:crypto";
import { readFileSync } from "node:fs";
import { Command, InvalidArgumentError, Option } from "commander";
import { checkEventId } from "../webhooks/event-id.js";
import { printResult } from "./print-result.js";
import { algorithmOfKey, allowedJwtAlgorithms, signHmacWebhook, signJwtWebhook, type JwtAlgorithm, type SignedHeaders } from "../webhooks/index.js";

interface SignFlags {
  url: string;
  data: string;
  secret?: string;
  secretFile?: string;
  key?: string;
  kid?: string;
  alg?: JwtAlgorithm;
  eventId?: string;
  timestamp?: number;
  baseUrl?: string;
  aud?: string;
}

interface SendFlags extends SignFlags {
  timeout: number;
}

/** How long `send` waits for the listener's answer by default, in seconds. */
const defaultSendTimeoutSeconds = 30;

/** `accessd webhook sign|send`: sign (and send) a webhook the way a sender must, to test an integration. */
export function webhookCommand(): Command {
  const webhook = new Command("webhook").description("sign or send a test webhook to a listener");
  withSigningOptions(webhook.command("sign"))
    .description("print the headers of a signed webhook request (one `Name: value` per line)")
    .action(async (flags: SignFlags) => {
      const { headers } = await signedRequest(flags);
      printResult(Object.entries(headers).map(([name, value]) => `${name}: ${value}`).join("\n"), "nothing was sent");
    });
  withSigningOptions(webhook.command("send"))
    .description("sign and POST a webhook; prints the status and the answer, exits 1 unless 2xx")
    .option("--timeout <seconds>", "how long to wait for the answer", parseTimeout, defaultSendTimeoutSeconds)
    .action(async (flags: SendFlags) => {
      const { headers, body } = await signedRequest(flags);
      const { status, text } = await post(flags.url, headers, body, flags.timeout);
      printResult(`${status} ${text}`, "the request was sent");
      if (status < 200 || status > 299) process.exitCode = 1;
    });
  return webhook;
}

/**
 * POSTs the request and reads the answer, within `timeoutSeconds` for both (a listener that
 * accepts the connection and never answers would otherwise hold the command for good). A failure
 * says why: fetch's own message is only "fetch failed", the reason (ECONNREFUSED, a DNS failure)
 * is in its cause.
 */
async function post(url: string, headers: SignedHeaders, body: Buffer, timeoutSeconds: number): Promise<{ status: number; text: string }> {
  try {
    // A redirect is reported, not followed: a 301 or 302 turned the POST into a GET (the listener
    // answered 405), and a 307 failed on the body already sent.
    const response = await fetch(url, { method: "POST", headers: { ...headers }, body, signal: AbortSignal.timeout(timeoutSeconds * 1000), redirect: "manual" });
    const location = response.headers.get("location");
    if (response.status >= 300 && response.status < 400 && location !== null) {
      await response.body?.cancel();
      return { status: response.status, text: `redirect to ${location}, not followed: a listener's URL is the one it names (endpointUrl)` };
    }
    return { status: response.status, text: await response.text() };
  } catch (e) {
    if (e instanceof DOMException && e.name === "TimeoutError") {
      throw new Error(`no answer from ${url} within ${timeoutSeconds} s (--timeout)`, { cause: e });
    }
    throw new Error(`cannot send to ${url}: ${reasonOf(e)}`, { cause: e });
  }
}

/**
 * A listener takes no credentials in its URL (fetch cannot send them either), and the message
 * that refused one quoted the URL, password and all, twice: refused here without showing it.
 */
function refuseCredentialsInUrl(url: string): void {
  let parsed: URL | undefined;
  try {
    parsed = new URL(url);
  } catch {
    parsed = undefined;
  }
  // One that is no http(s) URL is quoted by the refusal that follows: not with an `@` before its path.
  const carries =
    parsed !== undefined && /^https?:$/.test(parsed.protocol)
      ? parsed.username !== "" || parsed.password !== ""
      : /^(?:[a-z][\w+.-]*:\/\/)?[^/?#]*@/i.test(url);
  if (carries) throw new Error("--url carries user:password@, which a listener does not take (the signature authenticates the sender): leave it out");
}

/** The innermost useful message of a fetch failure: its cause's, or each attempt's when several addresses were tried. */
function reasonOf(e: unknown): string {
  const cause = e instanceof Error && e.cause !== undefined ? e.cause : e;
  if (cause instanceof AggregateError && cause.errors.length > 0) {
    return cause.errors.map((inner) => (inner instanceof Error ? inner.message : String(inner))).join("; ");
  }
  if (cause instanceof Error) return cause.message || String((cause as NodeJS.ErrnoException).code ?? cause.name);
  return String(cause);
}

/** --timestamp: a Unix time in whole seconds, any (one outside the server's window tests its refusal), never text that signs as "NaN". */
function parseTimestamp(value: string): number {
  const seconds = Number(value);
  if (!/^(0|[1-9]\d*)$/.test(value) || !Number.isSafeInteger(seconds)) {
    throw new InvalidArgumentError("Expected a Unix time in whole seconds, such as 1767225600.");
  }
  return seconds;
}

/**
 * --event-id: a UUID v4, the only kind the service accepts. The command signs requests the way a
 * sender must; the service refuses another id before it looks at the signature, so testing that
 * refusal needs no signing tool (curl).
 */
function parseEventId(value: string): string {
  if (typeof checkEventId(value) !== "string") {
    throw new InvalidArgumentError("Expected a UUID v4, the only event id the service accepts, such as 3b241101-e2bb-4255-8caf-4136c566a962.");
  }
  return value;
}

/** --timeout: seconds, at most a day (AbortSignal.timeout takes at most 2^32-1 ms). */
function parseTimeout(value: string): number {
  const seconds = Number(value);
  if (!/^\d+(\.\d+)?$/.test(value) || seconds <= 0 || seconds > 86_400) {
    throw new InvalidArgumentError("Expected a number of seconds above 0, at most 86400.");
  }
  return seconds;
}

function withSigningOptions(command: Command): Command {
  return command
    .requiredOption("--url <url>", "the listener endpoint URL ({base_url}/api/v1/webhooks/incoming/{listener_id})")
    .requiredOption("--data <json>", "the body: JSON text, or @file to read it from a file")
    .option("--secret <secret>", "HMAC listeners: the signing secret, as given by the service (visible to `ps`: see --secret-file)")
    .option("--secret-file <path>", "HMAC listeners: a file holding the signing secret (one trailing newline is ignored)")
    .option("--key <pem-file>", "JWT listeners: the PEM private key (RSA, EC P-256 or Ed25519)")
    .option("--kid <kid>", "JWT listeners: the key id, as in your JWKS")
    .addOption(new Option("--alg <alg>", "JWT algorithm (default: from the key)").choices(allowedJwtAlgorithms))
    .option("--event-id <uuid>", "Webhook-Event-Id, a UUID v4 (default: a new one)", parseEventId)
    .option("--timestamp <seconds>", "Webhook-Timestamp, Unix time in whole seconds (default: now)", parseTimestamp)
    .option("--aud <url>", "JWT aud: the endpoint URL the service shows, when --url differs (a proxy, a tunnel)")
    .option("--base-url <url>", "JWT sub (default: the aud up to /api/v1/webhooks/incoming/)");
}

async function signedRequest(flags: SignFlags): Promise<{ headers: SignedHeaders; body: Buffer }> {
  refuseCredentialsInUrl(flags.url);
  const body = flags.data.startsWith("@") ? readOptionFile(`--data ${flags.data}`, flags.data.slice(1)) : Buffer.from(flags.data, "utf8");
  const request = { url: flags.url, body, eventId: flags.eventId, timestamp: flags.timestamp };
  const secret = hmacSecret(flags);
  if (secret !== undefined && flags.key === undefined) {
    return { headers: signHmacWebhook(request, secret), body };
  }
  if (flags.key !== undefined && secret === undefined) {
    if (flags.kid === undefined) throw new Error("--kid is required with --key");
    const privateKey = privateKeyOf(flags.key);
    const headers = await signJwtWebhook(request, {
      privateKey,
      kid: flags.kid,
      alg: flags.alg ?? algorithmOfKey(privateKey),
      baseUrl: flags.baseUrl,
      audience: flags.aud,
    });
    return { headers, body };
  }
  throw new Error("give either --secret or --secret-file (HMAC), or --key and --kid (JWT)");
}

/** The HMAC secret from --secret or --secret-file; an empty one is refused (it would sign with an empty key). */
function hmacSecret(flags: SignFlags): string | undefined {
  if (flags.secret !== undefined && flags.secretFile !== undefined) throw new Error("give --secret or --secret-file, not both");
  if (flags.secret !== undefined) {
    if (flags.secret === "") throw new Error("--secret is empty: give the listener's signing secret");
    return flags.secret;
  }
  if (flags.secretFile === undefined) return undefined;
  const text = readOptionFile(`--secret-file ${flags.secretFile}`, flags.secretFile).toString("utf8");
  const secret = text.replace(/\r?\n$/, ""); // what `echo "$SECRET" > file` adds
  if (secret === "") throw new Error(`--secret-file ${flags.secretFile} is empty: it must hold the listener's signing secret`);
  return secret;
}

/** The file an option names (`given`: the option as given, e.g. `--key k.pem`), or an error naming it (not a bare ENOENT). */
function readOptionFile(given: string, path: string): Buffer {
  try {
    return readFileSync(path);
  } catch (e) {
    throw new Error(`cannot read ${given}: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
  }
}

/** The --key file's private key, or an error saying what it must be (not OpenSSL's "DECODER routines::unsupported"). */
function privateKeyOf(path: string): KeyObject {
  const pem = readOptionFile(`--key ${path}`, path);
  try {
    return createPrivateKey(pem);
  } catch (e) {
    throw new Error(`--key ${path} is not a PEM private key (RSA, EC P-256 or Ed25519): ${e instanceof Error ? e.message : String(e)}`, { cause: e });
  }
}
