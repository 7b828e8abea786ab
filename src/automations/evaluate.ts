import { isCelError, type CelError, type CelValue } from "@bufbuild/cel";
import type { CompiledExpression } from "./compiled-expression.js";
import type { StepContext } from "./step-context.js";
import { StepFailure } from "./step-failure.js";

/** Evaluates one input of a step; a CEL error becomes a StepFailure that names the field. */
export function evaluate(field: string, expression: CompiledExpression, context: StepContext): CelValue {
  const result = expression.evaluate(context.bindings);
  if (isCelError(result)) throw new StepFailure(`${field}: ${describeCelError(result, expression)}`);
  return result;
}

/** "field not found: x" says which expression lacked the field, e.g. ctx.trigger.user_id is missing. */
function describeCelError(error: CelError, expression: CompiledExpression): string {
  const missing = /^(?:field not found|no such key): (.*)$/.exec(error.message);
  if (missing !== null) {
    const field = missing[1] ?? "";
    const access =
      expression.accesses.find((a) => a.exprId === error.exprId && a.field === field) ??
      expression.accesses.find((a) => a.field === field);
    return access === undefined
      ? `field "${field}" is missing`
      : `${access.text} is missing (no field "${field}")`;
  }
  return error.message;
}
