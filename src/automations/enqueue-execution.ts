import type { JsonValue } from "@bufbuild/protobuf";
import { notFound } from "../connect-errors.js";
import { newId } from "../store/ids.js";
import type { Execution } from "../store/executions-repository.js";
import type { Store } from "../store/store.js";

export interface EnqueueRequest {
  automationId: string;
  /** Becomes ctx.trigger: the webhook body or the Execute context. */
  trigger: JsonValue;
  /** The Webhook-Event-Id that started it, for webhook-triggered executions. */
  eventId?: string;
  /** Its id, when the caller recorded it elsewhere first (a new id by default). */
  executionId?: string;
}

/**
 * Creates a PENDING execution of the automation's current version (its steps as of now; later
 * updates do not change it) and returns it as stored. Synchronous and a single statement, so call
 * it inside the transaction you opened to record it atomically with your own writes:
 *
 *   const execution = store.transaction(() => {
 *     // ... your own writes ...
 *     return enqueueExecution(store, clock.now(), { automationId, trigger });
 *   });
 *   worker.handOff(execution); // after the commit (or worker.notify(): it reads the queue)
 *
 * Throws not_found when the automation does not exist (rolling your transaction back).
 */
export function enqueueExecution(store: Store, now: number, request: EnqueueRequest): Execution {
  const execution = store.executions.insertPending({
    id: request.executionId ?? newId(),
    automationId: request.automationId,
    trigger: request.trigger,
    eventId: request.eventId ?? "",
    now,
  });
  if (execution === undefined) throw notFound("automation", request.automationId);
  return execution;
}
