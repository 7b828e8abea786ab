import { create, fromJson, toJson, type JsonValue } from "@bufbuild/protobuf";
import { timestampFromMs, ValueSchema, type Value } from "@bufbuild/protobuf/wkt";
import { maxJsonDepth } from "../automations/json-depth.js";
import { loneSurrogate } from "../automations/lone-surrogate.js";
import { randomBytes } from "node:crypto";
import {
  AutomationSchema,
  AutomationStepSchema,
  AutomationTriggerSchema,
  EntitlementOwnerActionSchema,
  LogActionSchema,
  WebhookAuthMethod,
  type Automation,
  type AutomationStep,
  type AutomationTrigger,
} from "../../gen/svc/api/automations/v1/automation_pb.js";
import {
  AutomationExecution_State,
  AutomationExecutionSchema,
  StepExecution_State,
  StepExecutionSchema,
  type AutomationExecution,
  type StepExecution,
} from "../../gen/svc/api/automations/v1/execution_pb.js";
import type { StepDefinition } from "../automations/step-definition.js";
import type { TriggerConfig, WebhookAuthMethod as AuthMethod } from "../automations/trigger-config.js";
import type { Automation as AutomationRecord } from "../store/automations-repository.js";
import type { ExecutionState, ExecutionSummary, StepRecord } from "../store/executions-repository.js";
import { webhookEndpointUrl } from "../webhooks/endpoint-url.js";
import { invalidArgument } from "./errors.js";

/** Automations and executions: protobuf messages <-> store records. */

export function automationMessage(a: AutomationRecord, baseUrl: string): Automation {
  return create(AutomationSchema, {
    id: a.id,
    displayName: a.displayName,
    description: a.description,
    trigger: triggerMessage(a.trigger, baseUrl),
    steps: a.steps.map(stepMessage),
    published: a.published,
    triggerEnabled: a.triggerEnabled,
    version: a.version,
    createdAt: timestampFromMs(a.createdAt),
    updatedAt: timestampFromMs(a.updatedAt),
  });
}

function triggerMessage(trigger: TriggerConfig, baseUrl: string): AutomationTrigger {
  if (trigger.kind === "manual") return create(AutomationTriggerSchema, { trigger: { case: "manual", value: {} } });
  return create(AutomationTriggerSchema, {
    trigger: {
      case: "webhook",
      value: {
        authMethod: trigger.authMethod === "HMAC" ? WebhookAuthMethod.HMAC : WebhookAuthMethod.JWT,
        jwksUrl: trigger.jwksUrl,
        ipRestrictionEnabled: trigger.ipRestrictionEnabled,
        allowedCidrs: trigger.allowedCidrs,
        listenerId: trigger.listenerId,
        endpointUrl: webhookEndpointUrl(baseUrl, trigger.listenerId),
      },
    },
  });
}

function stepMessage(step: StepDefinition): AutomationStep {
  const message = create(AutomationStepSchema, { name: step.name, skipIfTrueCel: step.skipIfTrueCel });
  const action = step.action;
  if (action.kind === "log") {
    message.action = { case: "log", value: create(LogActionSchema, { messageCel: action.messageCel }) };
  } else {
    const { appIdCel, entitlementIdCel, userIdCel } = action;
    message.action = { case: action.kind, value: create(EntitlementOwnerActionSchema, { appIdCel, entitlementIdCel, userIdCel }) };
  }
  return message;
}

/**
 * The trigger a request asks for. A webhook trigger keeps the listener id it had (its endpoint
 * URL stays stable across updates); a new one gets a random, unguessable id (144 bits).
 */
export function triggerFromMessage(
  message: AutomationTrigger | undefined,
  previous: TriggerConfig | undefined,
  field = "trigger",
): TriggerConfig {
  const trigger = message?.trigger;
  if (trigger === undefined || trigger.case === undefined) {
    throw invalidArgument(`${field} is required: set ${field}.webhook or ${field}.manual`);
  }
  if (trigger.case === "manual") return { kind: "manual" };
  const webhook = trigger.value;
  const authMethod = authMethodOf(webhook.authMethod, `${field}.webhook.authMethod`);
  if (authMethod === "JWT" && webhook.jwksUrl.trim() === "") {
    throw invalidArgument(`${field}.webhook.jwksUrl is required for JWT listeners`);
  }
  if (authMethod === "HMAC" && webhook.jwksUrl !== "") {
    throw invalidArgument(`${field}.webhook.jwksUrl applies to JWT listeners only`);
  }
  return {
    kind: "webhook",
    listenerId: previous?.kind === "webhook" ? previous.listenerId : randomBytes(18).toString("base64url"),
    authMethod,
    jwksUrl: webhook.jwksUrl,
    ipRestrictionEnabled: webhook.ipRestrictionEnabled,
    allowedCidrs: [...webhook.allowedCidrs],
  };
}

function authMethodOf(method: WebhookAuthMethod, field: string): AuthMethod {
  if (method === WebhookAuthMethod.HMAC) return "HMAC";
  if (method === WebhookAuthMethod.JWT) return "JWT";
  throw invalidArgument(`${field} is required: HMAC or JWT`);
}

/** Step messages -> definitions; the CEL is checked by validateSteps. */
export function stepsFromMessages(steps: readonly AutomationStep[], field = "steps"): StepDefinition[] {
  return steps.map((step, index) => {
    const action = step.action;
    const where = `${field}[${index}]`;
    switch (action.case) {
      case "addEntitlementOwner":
      case "removeEntitlementOwner":
        return {
          name: step.name,
          skipIfTrueCel: step.skipIfTrueCel,
          action: {
            kind: action.case,
            appIdCel: action.value.appIdCel,
            entitlementIdCel: action.value.entitlementIdCel,
            userIdCel: action.value.userIdCel,
          },
        };
      case "log":
        return { name: step.name, skipIfTrueCel: step.skipIfTrueCel, action: { kind: "log", messageCel: action.value.messageCel } };
      default:
        throw invalidArgument(`${where} needs an action: addEntitlementOwner, removeEntitlementOwner or log`);
    }
  });
}

const executionStates: Record<ExecutionState, AutomationExecution_State> = {
  PENDING: AutomationExecution_State.PENDING,
  RUNNING: AutomationExecution_State.RUNNING,
  SUCCEEDED: AutomationExecution_State.SUCCEEDED,
  FAILED: AutomationExecution_State.FAILED,
};

export function executionStateFromMessage(state: AutomationExecution_State): ExecutionState | undefined {
  const found = Object.entries(executionStates).find(([, value]) => value === state);
  return found === undefined ? undefined : (found[0] as ExecutionState);
}

/**
 * A google.protobuf.Value given by a caller as JSON. A number that is not finite (NaN, ±Infinity,
 * or a JSON number beyond a double's range such as 1e400, which JSON.parse makes Infinity) has no
 * JSON form: invalid_argument, naming `field` (it was a 500).
 */
export function jsonFromValue(value: Value | undefined, field: string): JsonValue | undefined {
  if (value === undefined) return undefined;
  refuseUnstorable(value, field);
  return toJson(ValueSchema, value);
}

/**
 * Refuses a Value an execution cannot hold as it was given: one with no kind set, a lone
 * surrogate in a string or key (lone-surrogate.ts), a number that is not finite (JSON has none; stored, it would come back as null) or lists and structs nested deeper than
 * maxJsonDepth (its execution could not be read by protobuf clients; a webhook body is held to
 * the same limit).
 */
function refuseUnstorable(value: Value, field: string): void {
  const pending: [Value, number][] = [[value, 0]];
  for (let next = pending.pop(); next !== undefined; next = pending.pop()) {
    const [{ kind }, depth] = next;
    if (kind.case === undefined) {
      // A Value with no kind set, valid on the wire (binary) but with no JSON form: protobuf-es's
      // toJson threw, and Execute answered 500 with an error line.
      throw invalidArgument(`${field} holds a google.protobuf.Value with none of its kinds set (null_value, number_value, ...)`);
    }
    if (kind.case === "numberValue" && !Number.isFinite(kind.value)) {
      throw invalidArgument(`${field} holds a number that is not finite (NaN, Infinity, or beyond a double's range such as 1e400)`);
    }
    const text = kind.case === "stringValue" ? [kind.value] : kind.case === "structValue" ? Object.keys(kind.value.fields) : [];
    if (text.some((t) => loneSurrogate.test(t))) {
      throw invalidArgument(`${field} escapes half a character: a \\uD800-\\uDFFF escape that is not one of a pair`);
    }
    if (kind.case !== "listValue" && kind.case !== "structValue") continue;
    if (depth + 1 > maxJsonDepth) throw invalidArgument(`${field} nests lists and structs deeper than ${maxJsonDepth} levels`);
    // One push at a time: spreading 200,000 values into push() overflowed the stack (a 500).
    const items = kind.case === "listValue" ? kind.value.values : Object.values(kind.value.fields);
    for (const item of items) pending.push([item, depth + 1]);
  }
}

/**
 * An execution with one entry per step of the version it runs: the recorded ones as stored, the
 * step a RUNNING execution is at as RUNNING, and the ones not reached as PENDING. A listing's
 * executions come without their trigger and step outputs (ExecutionSummary, and records read
 * without outputs): the message leaves them unset.
 */
export function executionMessage(
  e: ExecutionSummary & { trigger?: JsonValue },
  stepNames: readonly string[],
  records: readonly StepRecord[],
): AutomationExecution {
  const byPosition = new Map(records.map((r) => [r.position, r]));
  const current = records.length;
  return create(AutomationExecutionSchema, {
    id: e.id,
    automationId: e.automationId,
    automationVersion: e.automationVersion,
    state: executionStates[e.state],
    trigger: e.trigger === undefined ? undefined : fromJson(ValueSchema, e.trigger),
    steps: stepNames.map((name, position) => {
      const record = byPosition.get(position);
      if (record !== undefined) return stepExecutionMessage(record);
      const state = e.state === "RUNNING" && position === current ? StepExecution_State.RUNNING : StepExecution_State.PENDING;
      return create(StepExecutionSchema, { name, state });
    }),
    error: e.error,
    eventId: e.eventId,
    createdAt: timestampFromMs(e.createdAt),
    startedAt: e.startedAt === undefined ? undefined : timestampFromMs(e.startedAt),
    finishedAt: e.finishedAt === undefined ? undefined : timestampFromMs(e.finishedAt),
  });
}

const stepStates = {
  SUCCEEDED: StepExecution_State.SUCCEEDED,
  FAILED: StepExecution_State.FAILED,
  SKIPPED: StepExecution_State.SKIPPED,
} as const;

function stepExecutionMessage(r: StepRecord): StepExecution {
  return create(StepExecutionSchema, {
    name: r.name,
    state: stepStates[r.state],
    output: r.output === undefined ? undefined : fromJson(ValueSchema, r.output),
    error: r.error,
    startedAt: timestampFromMs(r.startedAt),
    finishedAt: timestampFromMs(r.finishedAt),
  });
}
