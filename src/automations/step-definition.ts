/**
 * A step of an automation as the store keeps it: a name, an optional skip condition and one
 * action whose inputs are CEL expression sources (compiled and cached by `ProgramCache`, program-cache.ts).
 */
export interface StepDefinition {
  /** Unique within the automation; later steps read the output as ctx.<name> and ctx.steps.<name>. */
  name: string;
  /** "" when the step always runs. */
  skipIfTrueCel: string;
  action: StepAction;
}

export type StepAction = EntitlementOwnerStepAction | LogStepAction;

export interface EntitlementOwnerStepAction {
  kind: "addEntitlementOwner" | "removeEntitlementOwner";
  appIdCel: string;
  entitlementIdCel: string;
  userIdCel: string;
}

export interface LogStepAction {
  kind: "log";
  messageCel: string;
}

/** Every CEL input of a step, named by the JSON field that holds it. */
export function stepExpressions(step: StepDefinition): { field: string; source: string }[] {
  const inputs: { field: string; source: string }[] = [];
  if (step.skipIfTrueCel !== "") inputs.push({ field: "skipIfTrueCel", source: step.skipIfTrueCel });
  switch (step.action.kind) {
    case "addEntitlementOwner":
    case "removeEntitlementOwner":
      inputs.push(
        { field: "appIdCel", source: step.action.appIdCel },
        { field: "entitlementIdCel", source: step.action.entitlementIdCel },
        { field: "userIdCel", source: step.action.userIdCel },
      );
      break;
    case "log":
      inputs.push({ field: "messageCel", source: step.action.messageCel });
      break;
  }
  return inputs;
}
