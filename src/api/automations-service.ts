import type { JsonValue } from "@bufbuild/protobuf";
import type { Value } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import { Automations } from "../../gen/svc/api/automations/v1/automation_pb.js";
import { enqueueExecution } from "../automations/enqueue-execution.js";
import type { TriggerConfig } from "../automations/trigger-config.js";
import { validateSteps } from "../automations/validate-steps.js";
import { listingFingerprint, paginate } from "../pagination/index.js";
import type { Automation } from "../store/automations-repository.js";
import { newId } from "../store/ids.js";
import {
  automationMessage,
  executionMessage,
  jsonFromValue,
  stepsFromMessages,
  triggerFromMessage,
} from "./automation-messages.js";
import { limitText, maxDescriptionLength, notFound, requireField } from "./errors.js";
import type { ServiceContext } from "./service-context.js";
import { fieldsToWrite } from "./update-mask.js";

/**
 * Automations, except RotateWebhookSecret and ListWebhookDeliveries, which
 * automation-webhooks-service.ts implements (its impl object is merged with this one at registration).
 */
export type AutomationsImpl = Omit<ServiceImpl<typeof Automations>, "rotateWebhookSecret" | "listWebhookDeliveries">;


export function automationsService({ store, clock, pageTokens, automations }: ServiceContext): AutomationsImpl {
  const { programs, worker, webhookHooks: hooks, baseUrl } = automations;
  const message = (a: Automation) => automationMessage(a, baseUrl);
  const getOrThrow = (id: string) => {
    const automation = store.automations.get(id);
    if (automation === undefined) throw notFound("automation", id);
    return automation;
  };

  /** Lets the webhook module check a webhook trigger before anything is written. */
  const validateTrigger = (trigger: TriggerConfig, previous?: TriggerConfig) => {
    if (trigger.kind === "webhook") hooks.validate(trigger, previous?.kind === "webhook" ? previous : undefined);
  };

  const setFlags = (id: string, change: (a: Automation) => void) =>
    store.transaction(() => {
      const automation = getOrThrow(requireField(id, "id"));
      change(automation);
      automation.updatedAt = clock.now();
      store.automations.setFlags(automation);
      return { automation: message(automation) };
    });

  return {
    create(req) {
      const displayName = requireField(req.displayName, "displayName");
      const trigger = triggerFromMessage(req.trigger, undefined);
      const steps = stepsFromMessages(req.steps);
      validateSteps(steps, programs);
      validateTrigger(trigger);
      const now = clock.now();
      const automation: Automation = {
        id: newId(),
        displayName,
        description: limitText(req.description, "description", maxDescriptionLength),
        trigger,
        steps,
        published: false,
        triggerEnabled: false,
        version: 1,
        createdAt: now,
        updatedAt: now,
      };
      const secret = store.transaction(() => {
        store.automations.insert(automation);
        return hooks.saved(automation.id, trigger, undefined);
      });
      return { automation: message(automation), webhookSecret: secret ?? "" };
    },

    get(req) {
      return { automation: message(getOrThrow(requireField(req.id, "id"))) };
    },

    list(req) {
      const page = paginate(pageTokens, listingFingerprint("automations"), req, (after, limit) =>
        store.automations.listAfter(after, limit),
      );
      return { list: page.items.map(message), nextPageToken: page.nextPageToken };
    },

    update(req) {
      const given = req.automation;
      const id = requireField(given?.id, "automation.id");
      const write = fieldsToWrite(
        req.updateMask,
        { displayName: "display_name", description: "description", trigger: "trigger", steps: "steps" },
        {
          displayName: given?.displayName ?? "",
          description: given?.description ?? "",
          trigger: given?.trigger?.trigger.case ?? "",
          steps: (given?.steps.length ?? 0) > 0 ? "steps" : "",
        },
      );
      const steps = write.has("steps") ? stepsFromMessages(given?.steps ?? [], "automation.steps") : undefined;
      if (steps !== undefined) validateSteps(steps, programs, "automation.steps");
      return store.transaction(() => {
        const automation = getOrThrow(id);
        const previous = automation.trigger;
        if (write.has("displayName")) automation.displayName = requireField(given?.displayName, "automation.displayName");
        if (write.has("description")) automation.description = limitText(given?.description, "automation.description", maxDescriptionLength);
        if (write.has("trigger")) {
          automation.trigger = triggerFromMessage(given?.trigger, previous, "automation.trigger");
          validateTrigger(automation.trigger, previous);
        }
        if (steps !== undefined) automation.steps = steps;
        automation.version += 1;
        automation.updatedAt = clock.now();
        store.automations.update(automation);
        const secret = write.has("trigger") ? hooks.saved(id, automation.trigger, previous) : undefined;
        return { automation: message(automation), webhookSecret: secret ?? "" };
      });
    },

    delete(req) {
      const id = requireField(req.id, "id");
      store.transaction(() => {
        if (!store.automations.delete(id)) throw notFound("automation", id);
        hooks.deleted(id);
      });
      return {};
    },

    publish(req) {
      return setFlags(req.id, (a) => (a.published = true));
    },

    unpublish(req) {
      return setFlags(req.id, (a) => (a.published = false));
    },

    setTriggerEnabled(req) {
      return setFlags(req.id, (a) => (a.triggerEnabled = req.enabled));
    },

    execute(req) {
      const id = requireField(req.id, "id");
      // Manual runs ignore `published` and the trigger toggle: those gate the webhook only (spec 3).
      const execution = store.transaction(() => {
        const { id: executionId } = enqueueExecution(store, clock.now(), {
          automationId: id,
          trigger: contextAsTrigger(req.context),
        });
        // Read back as stored: the trigger as every later Get shows it (JSON text in the store).
        return store.executions.get(executionId);
      });
      worker.notify();
      if (execution === undefined) throw notFound("automation execution", id);
      const steps = store.automations.versionSteps(execution.automationId, execution.automationVersion) ?? [];
      return { execution: executionMessage(execution, steps.map((s) => s.name), []) };
    },
  };
}

/**
 * An Execute's context as the execution's trigger: no context is `{}`; a JSON null given as the
 * context stays null, as a webhook's `null` body does (`?? {}` made it `{}` as well).
 */
function contextAsTrigger(context: Value | undefined): JsonValue {
  const json = jsonFromValue(context, "context");
  return json === undefined ? {} : json;
}
