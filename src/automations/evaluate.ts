import { isCelError, type CelError, type CelResult, type CelValue } from "@bufbuild/cel";
import { CelSyntaxError, type CompiledExpression } from "./compiled-expression.js";
import type { ProgramCache } from "./program-cache.js";
import type { StepContext } from "./step-context.js";
import { StepFailure } from "./step-failure.js";

/**
 * Evaluates one input of a step (compiling `source` unless `programs` has it); a CEL error
 * becomes a StepFailure that names the field. So does anything else compiling or evaluating
 * throws (an expression saved by an earlier version that this one refuses, a stack overflow
 * inside cel-es): it is this step's failure, recorded, never an error of the worker's batch, which
 * would be rolled back and tried again for good, holding every execution queued behind it.
 */
export function evaluate(field: string, source: string, programs: ProgramCache, context: StepContext): CelValue {
  let expression: CompiledExpression;
  let result: CelResult;
  try {
    expression = programs.get(source);
    result = expression.evaluate(context.bindings);
  } catch (e) {
    const reason = e instanceof CelSyntaxError ? `cannot be compiled: ${e.message}` : `evaluation failed: ${e instanceof Error ? e.message : String(e)}`;
    throw new StepFailure(`${field}: ${reason}`);
  }
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
