import { createPrivateKey } from "node:crypto";
import { readFileSync } from "node:fs";
import { Command, Option } from "commander";
import { algorithmOf, signHmacWebhook, signJwtWebhook, type JwtAlgorithm, type SignedHeaders } from "../webhooks/index.js";

interface SignFlags {
  url: string;
  data: string;
  secret?: string;
  key?: string;
  kid?: string;
  alg?: JwtAlgorithm;
  eventId?: string;
  timestamp?: string;
  baseUrl?: string;
  aud?: string;
}

/** `accessd webhook sign|send`: sign (and send) a webhook the way a sender must, to test an integration. */
export function webhookCommand(): Command {
  const webhook = new Command("webhook").description("sign or send a test webhook to a listener");
  withSigningOptions(webhook.command("sign"))
    .description("print the headers of a signed webhook request (one `Name: value` per line)")
    .action(async (flags: SignFlags) => {
      const { headers } = await signedRequest(flags);
      for (const [name, value] of Object.entries(headers)) process.stdout.write(`${name}: ${value}\n`);
    });
  withSigningOptions(webhook.command("send"))
    .description("sign and POST a webhook; prints the status and the answer, exits 1 unless 2xx")
    .action(async (flags: SignFlags) => {
      const { headers, body } = await signedRequest(flags);
      const response = await fetch(flags.url, { method: "POST", headers: { ...headers }, body });
      process.stdout.write(`${response.status} ${await response.text()}\n`);
      if (!response.ok) process.exitCode = 1;
    });
  return webhook;
}

function withSigningOptions(command: Command): Command {
  return command
    .requiredOption("--url <url>", "the listener endpoint URL ({base_url}/api/v1/webhooks/incoming/{listener_id})")
    .requiredOption("--data <json>", "the body: JSON text, or @file to read it from a file")
    .option("--secret <secret>", "HMAC listeners: the signing secret, as given by the service")
    .option("--key <pem-file>", "JWT listeners: the PEM private key (RSA, EC P-256 or Ed25519)")
    .option("--kid <kid>", "JWT listeners: the key id, as in your JWKS")
    .addOption(new Option("--alg <alg>", "JWT algorithm (default: from the key)").choices(["RS256", "ES256", "EdDSA"]))
    .option("--event-id <uuid>", "Webhook-Event-Id (default: a new UUID v4)")
    .option("--timestamp <seconds>", "Webhook-Timestamp (default: now)")
    .option("--aud <url>", "JWT aud: the endpoint URL the service shows, when --url differs (a proxy, a tunnel)")
    .option("--base-url <url>", "JWT sub (default: the aud up to /api/v1/webhooks/incoming/)");
}

async function signedRequest(flags: SignFlags): Promise<{ headers: SignedHeaders; body: Buffer }> {
  const body = flags.data.startsWith("@") ? readFileSync(flags.data.slice(1)) : Buffer.from(flags.data, "utf8");
  const request = {
    url: flags.url,
    body,
    eventId: flags.eventId,
    timestamp: flags.timestamp === undefined ? undefined : Number(flags.timestamp),
  };
  if (flags.secret !== undefined && flags.key === undefined) {
    return { headers: signHmacWebhook(request, flags.secret), body };
  }
  if (flags.key !== undefined && flags.secret === undefined) {
    if (flags.kid === undefined) throw new Error("--kid is required with --key");
    const privateKey = createPrivateKey(readFileSync(flags.key));
    const headers = await signJwtWebhook(request, {
      privateKey,
      kid: flags.kid,
      alg: flags.alg ?? algorithmOf(privateKey),
      baseUrl: flags.baseUrl,
      audience: flags.aud,
    });
    return { headers, body };
  }
  throw new Error("give either --secret (HMAC) or --key and --kid (JWT)");
}
