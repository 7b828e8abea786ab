import type { ExecutionWorker } from "../automations/execution-worker.js";
import type { ProgramCache } from "../automations/program-cache.js";
import type { WebhookTriggerHooks } from "../automations/trigger-config.js";
import type { Clock } from "../clock.js";
import type { PageTokenCodec } from "../pagination/index.js";
import type { Store } from "../store/store.js";

/** What every API service implementation is built from. */
export interface ServiceContext {
  store: Store;
  clock: Clock;
  pageTokens: PageTokenCodec;
  automations: AutomationsContext;
}

/** What the automations services need beyond the store. */
export interface AutomationsContext {
  /** Woken after Execute enqueued an execution. */
  worker: ExecutionWorker;
  /** Compiled CEL programs, shared with the worker. */
  programs: ProgramCache;
  /** The webhooks module's part in saving and deleting an automation (its listener's secrets). */
  webhookHooks: WebhookTriggerHooks;
  /** config.baseUrl: the prefix of webhook endpoint URLs. */
  baseUrl: string;
}
