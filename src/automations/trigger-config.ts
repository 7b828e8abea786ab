/**
 * An automation's trigger as the store keeps it. Shared by the automations module (which saves
 * automations) and the webhooks module (which verifies requests against the listener).
 */
export type TriggerConfig = ManualTriggerConfig | WebhookTriggerConfig;

export interface ManualTriggerConfig {
  kind: "manual";
}

export type WebhookAuthMethod = "HMAC" | "JWT";

export interface WebhookTriggerConfig {
  kind: "webhook";
  /** Random and unguessable (>= 128 bits, base64url); the last path segment of the endpoint. */
  listenerId: string;
  authMethod: WebhookAuthMethod;
  /** JWT listeners: the sender's JWKS URL. "" for HMAC. */
  jwksUrl: string;
  ipRestrictionEnabled: boolean;
  allowedCidrs: string[];
}

/** What the webhook pipeline needs to know about the automation behind a listener. */
export interface WebhookListenerTarget {
  automationId: string;
  published: boolean;
  triggerEnabled: boolean;
  trigger: WebhookTriggerConfig;
}

/**
 * Hooks the automations service calls, inside the same store transaction, while it saves or
 * deletes an automation. The webhooks module implements them (secrets, validation of JWKS URLs
 * and CIDRs).
 */
export interface WebhookTriggerHooks {
  /** Throws ConnectError(invalid_argument) for a bad JWKS URL or CIDR. */
  /** `previous`: the trigger it replaces, whose ranges saved by an older build stay accepted as they are. */
  validate(trigger: WebhookTriggerConfig, previous?: WebhookTriggerConfig): void;
  /**
   * Called after the automation row is written, whatever its trigger. `previous` is the trigger
   * before an update (undefined on create). Returns a newly issued HMAC secret to show once, if
   * one was issued.
   */
  saved(automationId: string, trigger: TriggerConfig, previous: TriggerConfig | undefined): string | undefined;
  /** Called when the automation is deleted. */
  deleted(automationId: string): void;
}
