import { isCelError, isCelList, isCelMap, type CelError, type CelResult, type CelValue } from "@bufbuild/cel";
import { CelSyntaxError, compileExpression, forEachExpr, positionOf, sourceText, type CompiledExpression, type Expr } from "./compiled-expression.js";
import { aValueOf } from "./json-cel.js";
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
    const reason =
      e instanceof CelSyntaxError
        ? `cannot be compiled: syntax error at ${positionOf(source, e.offset)}: ${e.reason}`
        : `evaluation failed: ${e instanceof Error ? e.message : String(e)}`;
    throw new StepFailure(`${field}: ${reason}`);
  }
  if (isCelError(result)) throw new StepFailure(`${field}: ${describeCelError(result, expression, context)}`);
  return result;
}

/**
 * cel-es's messages name neither the expression nor why: "field not found: y" also for a field
 * read on a string, and "index 5 out of bounds [0, -1)" for every failed index, of a list too
 * short, a map without the key or a string (which cannot be indexed). On that error path the
 * operand is evaluated once more on its own (when it stands alone: not a comprehension's
 * variable) to say what it was.
 */
function describeCelError(error: CelError, expression: CompiledExpression, context: StepContext): string {
  const missing = /^(?:field not found|no such key): (.*)$/.exec(error.message);
  if (missing !== null) {
    const field = missing[1] ?? "";
    const access =
      expression.accesses.find((a) => a.exprId === error.exprId && a.field === field) ??
      expression.accesses.find((a) => a.field === field);
    if (access === undefined) return `field "${field}" is missing`;
    const read = findExpr(expression.parsed.expr, access.exprId);
    const operand = read === undefined ? unknown : operandValue(read, context);
    if (operand.known && !isCelMap(operand.value)) {
      return `${access.text} cannot be read: ${operand.text} is ${aValueOf(operand.value)}, not a map`;
    }
    return `${access.text} is missing (no field "${field}")`;
  }
  const index = /^index (.*) out of bounds \[0, -1\)$/.exec(error.message);
  if (index !== null) {
    const key = index[1] ?? "";
    const failing = failingIndex(expression, key, context);
    if (failing === undefined) return `index ${key} is out of range, or not a key`;
    const { text, operand } = failing;
    if (isCelList(operand.value)) return `${text}: index ${key} is out of range (a list of ${operand.value.size} elements)`;
    if (isCelMap(operand.value)) {
      // Only where the key written as a string is there is writing it so the fix ({'a': 1}[1] was told to write {'a': 1}["1"]).
      return operand.value.has(key)
        ? `${text}: no key ${key} (a JSON object's keys are strings: write ${operand.text}["${key}"])`
        : `${text}: no key ${key}`;
    }
    return `${text} cannot be read: ${operand.text} is ${aValueOf(operand.value)}, which has no index`;
  }
  // cel-es's list read with an index that is no whole number (1.5) returns nothing, which it then
  // cannot convert.
  if (error.message === "unsupported input undefined") {
    return "a list index is not a whole number (a list is indexed by an int, or a double or uint holding one, such as 1.0)";
  }
  return error.message;
}

interface KnownValue {
  known: true;
  value: CelValue;
  text: string;
}

const unknown = { known: false } as const;

/** The value of the operand of a select or an index (`read`), evaluated on its own; unknown when it cannot stand alone or fails. */
function operandValue(read: Expr, context: StepContext): KnownValue | typeof unknown {
  const kind = read.exprKind;
  const operand = kind.case === "selectExpr" ? kind.value.operand : kind.case === "callExpr" && kind.value.function === "_[_]" ? kind.value.args[0] : undefined;
  if (operand === undefined) return unknown;
  const text = sourceText(operand);
  if (text === undefined) return unknown;
  const value = evaluateAlone(text, context);
  return value === undefined || isCelError(value) ? unknown : { known: true, value, text };
}

/** `source` compiled and evaluated apart, with the step's context; undefined when it cannot stand alone (a comprehension's variable). */
function evaluateAlone(source: string, context: StepContext): CelResult | undefined {
  try {
    return compileExpression(source).evaluate(context.bindings);
  } catch {
    return undefined;
  }
}

function findExpr(root: Expr | undefined, id: bigint): Expr | undefined {
  let found: Expr | undefined;
  forEachExpr(root, (expr) => {
    if (found === undefined && expr.id === id) found = expr;
  });
  return found;
}

/** How many of an expression's indexes an error is looked for in (innermost first). */
const maxIndexesExplained = 3;

/**
 * The index (`_[_]`) that fails with "index `key` out of bounds", found by evaluating each one
 * whose operand stands alone (cel-es places the error on a part of the operand, `ctx` of
 * `ctx.trigger.l[5]`, which does not say which index of several it was).
 */
function failingIndex(expression: CompiledExpression, key: string, context: StepContext): { text: string; operand: KnownValue } | undefined {
  const indexes: Expr[] = [];
  forEachExpr(expression.parsed.expr, (expr) => {
    if (expr.exprKind.case === "callExpr" && expr.exprKind.value.function === "_[_]") indexes.push(expr);
  });
  // Each evaluation has the whole budget (about 0.2 s at worst): a few indexes are looked at, no more.
  for (const indexing of indexes.reverse().slice(0, maxIndexesExplained)) {
    const operand = operandValue(indexing, context);
    if (!operand.known) continue;
    const text = sourceText(indexing);
    if (text === undefined) continue;
    const whole = evaluateAlone(text, context);
    if (whole !== undefined && isCelError(whole) && whole.message === `index ${key} out of bounds [0, -1)`) return { text, operand };
  }
  return undefined;
}
