import type { WebhookListenerTarget } from "../automations/trigger-config.js";
import { checkActive } from "./activation.js";
import type { IpRestrictions } from "./ip-restriction.js";
import { Rejection, unauthenticated } from "./rejection.js";

/** The automations behind listener ids (the automations repository). */
export interface ListenerDirectory {
  find(listenerId: string): WebhookListenerTarget | undefined;
  /** A count of the writes to automations: unchanged since a `find`, that answer still holds. */
  writes(): number;
}

/** Stage 1: the automation behind the listener id of the path, or 404. */
export function lookUpListener(listeners: ListenerDirectory, listenerId: string): WebhookListenerTarget | Rejection {
  const target = /^[A-Za-z0-9_-]{1,128}$/.test(listenerId) ? listeners.find(listenerId) : undefined;
  return target ?? unknownListener();
}

const unknownListener = () => new Rejection(404, "listener_unknown", "no webhook listener has this id");

/** A request's listener as stage 1 found it, to be checked again where the event is recorded. */
export interface ListenerSnapshot {
  listenerId: string;
  target: WebhookListenerTarget;
  /** `ListenerDirectory.writes()` when `target` was found. */
  writes: number;
}

/**
 * Stage 9's first check, inside the transaction that would record the event: the automation may
 * have been deleted, disabled, unpublished, restricted to other addresses or given another way to
 * authenticate while the request was in flight (its body can take up to the request timeout, a JWKS
 * fetch seconds). Then what the earlier stages decided no longer holds, and the request is judged
 * again on what changed, in the stages' order: listener (404), source address (403),
 * authentication (401: it was verified against a method or JWKS that is no longer the listener's;
 * sent again, it is verified against the current one), published and enabled (404). Without a
 * write to automations since stage 1 (the common case) this is one comparison.
 */
export function recheckListener(
  listeners: ListenerDirectory,
  ipRestrictions: IpRestrictions,
  snapshot: ListenerSnapshot,
  sourceIp: string,
): Rejection | undefined {
  if (listeners.writes() === snapshot.writes) return undefined;
  const current = listeners.find(snapshot.listenerId);
  const before = snapshot.target;
  if (current === undefined || current.automationId !== before.automationId) return unknownListener();
  const ipRejection = ipRestrictions.check(current.trigger, sourceIp);
  if (ipRejection !== undefined) return ipRejection;
  if (current.trigger.authMethod !== before.trigger.authMethod || current.trigger.jwksUrl !== before.trigger.jwksUrl) {
    return unauthenticated(
      "listener_auth_changed",
      "the listener's authentication changed while this request was in flight; send it again to be verified against the current one",
    );
  }
  return checkActive(current);
}
