import type { TriggerConfig, WebhookTriggerConfig, WebhookTriggerHooks } from "../automations/trigger-config.js";
import type { WebhookDeliveriesRepository } from "../store/webhook-deliveries-repository.js";
import type { WebhookSecretStore } from "./secret-store.js";
import { validateWebhookTrigger } from "./trigger-validation.js";

export interface WebhookHooksDeps {
  secrets: WebhookSecretStore;
  deliveries: WebhookDeliveriesRepository;
  jwksAllowHttp: boolean;
}

/**
 * What the automations service calls inside its save and delete transactions: validate a webhook
 * trigger's JWKS URL and CIDRs; issue an HMAC secret when a trigger becomes HMAC (shown once);
 * drop the secrets when the trigger stops being HMAC, and the delivery log with the automation.
 */
export function webhookTriggerHooks({ secrets, deliveries, jwksAllowHttp }: WebhookHooksDeps): WebhookTriggerHooks {
  return {
    validate(trigger: WebhookTriggerConfig, previous?: WebhookTriggerConfig): void {
      validateWebhookTrigger(trigger, { jwksAllowHttp, savedCidrs: previous?.allowedCidrs });
    },

    saved(automationId: string, trigger: TriggerConfig, previous: TriggerConfig | undefined): string | undefined {
      const wasHmac = previous?.kind === "webhook" && previous.authMethod === "HMAC";
      if (trigger.kind !== "webhook" || trigger.authMethod !== "HMAC") {
        // Only an HMAC trigger has secrets (migration 010 dropped those earlier builds kept):
        // other saves touch neither the store nor the secrets' cache.
        if (wasHmac) secrets.remove(automationId);
        return undefined;
      }
      if (wasHmac && secrets.hasCurrent(automationId)) return undefined;
      return secrets.replace(automationId);
    },

    deleted(automationId: string): void {
      secrets.remove(automationId);
      deliveries.deleteFor(automationId);
    },
  };
}
