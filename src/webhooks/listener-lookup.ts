import type { WebhookListenerTarget } from "../automations/trigger-config.js";
import { Rejection } from "./rejection.js";

export type FindListener = (listenerId: string) => WebhookListenerTarget | undefined;

/** Stage 1: the automation behind the listener id of the path, or 404. */
export function lookUpListener(find: FindListener, listenerId: string): WebhookListenerTarget | Rejection {
  const target = /^[A-Za-z0-9_-]{1,128}$/.test(listenerId) ? find(listenerId) : undefined;
  return target ?? new Rejection(404, "listener_unknown", "no webhook listener has this id");
}
