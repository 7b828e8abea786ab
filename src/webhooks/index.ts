import type { WebhookTriggerHooks } from "../automations/trigger-config.js";
import type { Clock } from "../clock.js";
import type { Logger } from "../logger.js";
import type { RawRoute } from "../server/http-server.js";
import type { Execution } from "../store/executions-repository.js";
import type { SecretCipher } from "../store/secret-cipher.js";
import type { Store } from "../store/store.js";
import { DeliveryLog, defaultRefusalsPerSecond } from "./delivery-log.js";
import { EventAcceptance, type EnqueueExecution } from "./event-acceptance.js";
import { GroupCommit } from "./group-commit.js";
import { webhookTriggerHooks } from "./webhook-trigger-hooks.js";
import { IpRestrictions } from "./ip-restriction.js";
import { JwksCache } from "./jwks-cache.js";
import type { ListenerDirectory } from "./listener-lookup.js";
import { WebhookPipeline } from "./pipeline.js";
import { WebhookSecretStore } from "./secret-store.js";
import { SourceIpResolver } from "../server/source-ip.js";
import { type VerdictObserver, webhookRoute } from "./webhook-route.js";

export { defaultRotationGraceMs, WebhookSecretStore } from "./secret-store.js";
export { webhookEndpointUrl, webhookPathPrefix } from "./endpoint-url.js";
export { allowedJwtAlgorithms, type JwtAlgorithm } from "./jwt-verification.js";
export { signHmacWebhook, signJwtWebhook, algorithmOfKey, type SignedHeaders } from "./sign-request.js";
export type { EnqueueExecution } from "./event-acceptance.js";
export type { ListenerDirectory } from "./listener-lookup.js";

export interface WebhooksOptions {
  store: Store;
  clock: Clock;
  log: Logger;
  baseUrl: string;
  trustedProxies: readonly string[];
  jwksAllowHttp: boolean;
  /** Seals HMAC secrets at rest under the data key (see resolveDataKey). */
  cipher: SecretCipher;
  /** The automations behind listener ids (the automations repository). */
  listeners: ListenerDirectory;
  /** Creates a PENDING execution inside the caller's transaction (the automations queue). */
  enqueueExecution: EnqueueExecution;
  /** Hands a committed execution to the worker (and wakes it), with the size of the body it was made from. */
  handOffExecution: (execution: Execution, triggerBytes: number) => void;
  /** Told every request's verdict reason and status (the /metrics counter). */
  onVerdict?: VerdictObserver;
}

export interface Webhooks {
  route: RawRoute;
  hooks: WebhookTriggerHooks;
  secrets: WebhookSecretStore;
}

/** The inbound-webhook module, built once: its raw route, the trigger hooks and the secret store. */
export function createWebhooks(options: WebhooksOptions): Webhooks {
  const { store, clock } = options;
  const secrets = new WebhookSecretStore(store.webhooks.secrets, options.cipher, clock);
  const acceptance = new EventAcceptance(store, new GroupCommit(store), options.enqueueExecution, options.handOffExecution);
  const pipeline = new WebhookPipeline({
    clock,
    baseUrl: options.baseUrl,
    listeners: options.listeners,
    sourceIp: new SourceIpResolver(options.trustedProxies),
    ipRestrictions: new IpRestrictions(),
    hmacKeys: (automationId) => secrets.validKeys(automationId),
    hmacKeyWrites: () => secrets.writes,
    jwks: new JwksCache({ allowHttp: options.jwksAllowHttp }, { clock, log: options.log }),
    accept: (event, inTransaction, stillAcceptable) => acceptance.accept(event, inTransaction, stillAcceptable),
    deliveries: new DeliveryLog(store.webhooks.deliveries, {
      clock,
      refusalsPerSecond: defaultRefusalsPerSecond,
    }),
    log: options.log,
  });
  return {
    route: webhookRoute(pipeline, options.log, options.onVerdict),
    hooks: webhookTriggerHooks({
      secrets,
      deliveries: store.webhooks.deliveries,
      jwksAllowHttp: options.jwksAllowHttp,
    }),
    secrets,
  };
}
