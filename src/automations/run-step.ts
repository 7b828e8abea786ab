import type { JsonValue } from "@bufbuild/protobuf";
import { ConnectError } from "@connectrpc/connect";
import { addEntitlementOwner, removeEntitlementOwner } from "../entitlements/entitlement-owners.js";
import type { Store } from "../store/store.js";
import type { StepState } from "../store/executions-repository.js";
import { boundedStepErrorText } from "./error-text.js";
import { evaluate } from "./evaluate.js";
import { celToJson, celTypeName, OutputError } from "./json-cel.js";
import type { ProgramCache } from "./program-cache.js";
import type { StepContext } from "./step-context.js";
import type { EntitlementOwnerStepAction, StepDefinition } from "./step-definition.js";
import { StepFailure } from "./step-failure.js";

export interface StepOutcome {
  state: StepState;
  /** Undefined for a skipped or failed step. */
  output: JsonValue | undefined;
  error: string;
}

/**
 * Runs one step: its skip condition, its inputs, its action. Call it inside the transaction that
 * records the outcome, so the action's writes commit together with the step record or not at all.
 * Failures of the step's own making (CEL errors, wrong types, unknown ids) are an outcome;
 * anything else (the store failing) throws.
 */
export function runStep(
  store: Store,
  now: number,
  step: StepDefinition,
  programs: ProgramCache,
  context: StepContext,
): StepOutcome {
  try {
    if (step.skipIfTrueCel !== "") {
      const skip = evaluate("skipIfTrueCel", step.skipIfTrueCel, programs, context);
      if (typeof skip !== "boolean") {
        throw new StepFailure(`skipIfTrueCel must evaluate to a bool, got ${celTypeName(skip)}`);
      }
      if (skip) return { state: "SKIPPED", output: undefined, error: "" };
    }
    return { state: "SUCCEEDED", output: act(store, now, step, programs, context), error: "" };
  } catch (e) {
    if (e instanceof StepFailure) return { state: "FAILED", output: undefined, error: boundedStepErrorText(e.message) };
    if (e instanceof ConnectError) return { state: "FAILED", output: undefined, error: boundedStepErrorText(e.rawMessage) };
    throw e;
  }
}

function act(store: Store, now: number, step: StepDefinition, programs: ProgramCache, context: StepContext): JsonValue {
  const action = step.action;
  switch (action.kind) {
    case "addEntitlementOwner": {
      const target = ownerTarget(action, programs, context);
      addEntitlementOwner(store, now, target);
      return { ...target };
    }
    case "removeEntitlementOwner": {
      const target = ownerTarget(action, programs, context);
      removeEntitlementOwner(store, target);
      return { ...target };
    }
    case "log":
      try {
        return celToJson(evaluate("messageCel", action.messageCel, programs, context), context.outputCharsLeft);
      } catch (e) {
        if (e instanceof OutputError) throw new StepFailure(`messageCel: ${e.message}`);
        throw e;
      }
  }
}

function ownerTarget(action: EntitlementOwnerStepAction, programs: ProgramCache, context: StepContext) {
  const id = (field: string, source: string): string => {
    const value = evaluate(field, source, programs, context);
    if (typeof value !== "string") {
      const shown = typeof value === "number" || typeof value === "boolean" || typeof value === "bigint" ? ` ${String(value)}` : "";
      throw new StepFailure(`${field} must evaluate to a string id, got ${celTypeName(value)}${shown}`);
    }
    if (value.trim() === "") throw new StepFailure(`${field} evaluated to an empty id`);
    return value;
  };
  return {
    appId: id("appIdCel", action.appIdCel),
    entitlementId: id("entitlementIdCel", action.entitlementIdCel),
    userId: id("userIdCel", action.userIdCel),
  };
}
