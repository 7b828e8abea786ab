import type { WebhookTriggerConfig } from "../automations/trigger-config.js";
import { invalidArgument } from "../connect-errors.js";
import { networkOfHostBits, parseCidr } from "../server/cidr.js";
import { jwksTransportAllowed } from "./jwks-cache.js";

export interface TriggerValidationOptions {
  /** ACCESSD_JWKS_ALLOW_HTTP: `http://` JWKS URLs on loopback hosts. */
  jwksAllowHttp: boolean;
  /** The ranges of the trigger this one replaces: one with host bits set among them stays accepted. */
  savedCidrs?: readonly string[] | undefined;
}

const maxCidrs = 256;
const maxUrlLength = 2048;

/**
 * Refuses a webhook trigger the pipeline could not serve safely; the message names the field.
 * Whether a JWKS URL is there at all (required for JWT, refused for HMAC) was decided when the
 * trigger was read from its message (`triggerFromMessage`).
 */
export function validateWebhookTrigger(trigger: WebhookTriggerConfig, options: TriggerValidationOptions): void {
  if (trigger.authMethod === "JWT") validateJwksUrl(trigger.jwksUrl, options);
  validateCidrs(trigger.ipRestrictionEnabled, trigger.allowedCidrs, new Set(options.savedCidrs ?? []));
}

function validateJwksUrl(text: string, options: TriggerValidationOptions): void {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw invalidArgument(`trigger.webhook.jwksUrl ${JSON.stringify(text)} is not an absolute URL`);
  }
  if (text.length > maxUrlLength) throw invalidArgument(`trigger.webhook.jwksUrl is longer than ${maxUrlLength} characters`);
  if (url.username !== "" || url.password !== "") throw invalidArgument("trigger.webhook.jwksUrl must not carry credentials");
  if (jwksTransportAllowed(url, options.jwksAllowHttp)) return;
  throw invalidArgument(
    options.jwksAllowHttp
      ? "trigger.webhook.jwksUrl must be https (http only on a loopback host)"
      : "trigger.webhook.jwksUrl must be an https URL",
  );
}

function validateCidrs(enabled: boolean, cidrs: readonly string[], saved: ReadonlySet<string>): void {
  if (cidrs.length > maxCidrs) throw invalidArgument(`trigger.webhook.allowedCidrs holds more than ${maxCidrs} ranges`);
  cidrs.forEach((cidr, i) => {
    const parsed = parseCidr(cidr);
    if (parsed === undefined) {
      throw invalidArgument(`trigger.webhook.allowedCidrs[${i}] ${JSON.stringify(cidr)} is not a CIDR such as 203.0.113.0/24`);
    }
    const network = networkOfHostBits(cidr);
    // One the automation holds already (saved by a build before this check) is taken as it is:
    // a client that reads the automation and writes it back could not save it.
    if (network !== undefined && !saved.has(cidr)) {
      // Matched as its network, a typo of one address (`/8` for `/32`) would allow the whole network.
      const single = `${parsed.address}/${parsed.family === "ipv4" ? 32 : 128}`;
      throw invalidArgument(`trigger.webhook.allowedCidrs[${i}] ${JSON.stringify(cidr)} has host bits set: write ${network} for the network, or ${single} for the one address`);
    }
  });
  if (enabled && cidrs.length === 0) {
    throw invalidArgument("trigger.webhook.allowedCidrs must name at least one range when ipRestrictionEnabled is true");
  }
}

