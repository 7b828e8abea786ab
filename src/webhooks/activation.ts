import type { WebhookListenerTarget } from "../automations/trigger-config.js";
import { Rejection } from "./rejection.js";

/**
 * Stage 8 (spec 3): only a published automation with its trigger enabled runs. The spec does not
 * show the status; 404 tells the sender the listener is not live without a run or a record, so the
 * same event id is accepted once the automation is enabled.
 */
export function checkActive(target: WebhookListenerTarget): Rejection | undefined {
  if (!target.published) {
    return new Rejection(404, "automation_unpublished", "the automation behind this listener is not published");
  }
  if (!target.triggerEnabled) {
    return new Rejection(404, "trigger_disabled", "the webhook trigger of this automation is disabled");
  }
  return undefined;
}
