import { invalidArgument } from "../connect-errors.js";
import { findReferenceProblem } from "./check-references.js";
import { CelSyntaxError, offsetOf, positionOf } from "./compiled-expression.js";
import type { ProgramCache } from "./program-cache.js";
import { stepExpressions, type StepDefinition } from "./step-definition.js";

export const maxSteps = 100;
export const maxExpressionLength = 4096;
/**
 * All the expressions of an automation together, in characters. Compiling costs the server's
 * thread about 5 ms a KB of dense expression (a 4 KB list literal: 24 ms), so 100 steps of five
 * 4 KB expressions held it for seconds on each save (57 steps: 5.2 s); 64 KiB is about 0.3 s.
 */
export const maxExpressionCharsPerAutomation = 65_536;
export const maxStepNameLength = 64;

/** Names later steps can write as ctx.<name>; "trigger" and "steps" are ctx's own keys. */
const stepNamePattern = /^[A-Za-z_][A-Za-z0-9_]*$/;
const reservedStepNames = new Set(["trigger", "steps"]);

/**
 * CEL's keywords and reserved words (the CEL spec's lexis): a step so named could not be read as
 * ctx.<name> (`ctx.in` and `ctx.null` are syntax errors in cel-es; cel-go refuses them all).
 */
const celReservedWords = new Set(
  "in as break const continue else false for function if import let loop package namespace null return true var void while".split(" "),
);

/**
 * Checks the steps of an automation being saved and compiles every expression into `programs`,
 * so that runs find them compiled. Throws invalid_argument naming the step, the field and, for an
 * expression, the line:column of the problem.
 */
export function validateSteps(steps: readonly StepDefinition[], programs: ProgramCache, field = "steps"): void {
  if (steps.length > maxSteps) throw invalidArgument(`an automation has at most ${maxSteps} steps, not ${steps.length}`);
  const expressionChars = steps.reduce((sum, step) => sum + stepExpressions(step).reduce((n, e) => n + e.source.length, 0), 0);
  if (expressionChars > maxExpressionCharsPerAutomation) {
    throw invalidArgument(`the steps' expressions hold ${expressionChars} characters in all: at most ${maxExpressionCharsPerAutomation}`);
  }
  const names = steps.map((s) => s.name);
  steps.forEach((step, index) => {
    const where = `${field}[${index}]`;
    if (step.name === "") throw invalidArgument(`${where}.name is required`);
    if (step.name.length > maxStepNameLength) throw invalidArgument(`${where}.name is longer than ${maxStepNameLength} characters`);
    if (!stepNamePattern.test(step.name)) {
      throw invalidArgument(`${where}.name "${step.name}" must be letters, digits and _ (not starting with a digit)`);
    }
    if (reservedStepNames.has(step.name)) throw invalidArgument(`${where}.name "${step.name}" is reserved (ctx.${step.name})`);
    if (celReservedWords.has(step.name)) {
      throw invalidArgument(`${where}.name "${step.name}" is a CEL reserved word: ctx.${step.name} could not be written`);
    }
    if (names.indexOf(step.name) !== index) throw invalidArgument(`${where}.name "${step.name}" is used by an earlier step`);

    const scope = {
      earlier: new Set(names.slice(0, index)),
      self: step.name,
      later: new Set(names.slice(index + 1)),
    };
    for (const { field, source } of stepExpressions(step)) {
      const at = `${where} ("${step.name}").${field}`;
      if (source.trim() === "") {
        // An empty skipIfTrueCel is no condition (stepExpressions leaves it out); a blank one is a mistake.
        throw invalidArgument(field === "skipIfTrueCel" ? `${at} is blank: leave it out (or empty) to run the step always` : `${at} is required`);
      }
      if (source.length > maxExpressionLength) throw invalidArgument(`${at} is longer than ${maxExpressionLength} characters`);
      let compiled;
      try {
        compiled = programs.get(source);
      } catch (e) {
        if (e instanceof CelSyntaxError) {
          throw invalidArgument(`${at}: syntax error at ${positionOf(source, e.offset)}: ${e.reason}`);
        }
        throw e;
      }
      const problem = findReferenceProblem(compiled.parsed.expr, scope);
      if (problem !== undefined) {
        throw invalidArgument(`${at}: ${problem.message} at ${positionOf(source, offsetOf(compiled.parsed, problem.exprId))}`);
      }
    }
  });
}
