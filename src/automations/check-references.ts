import { celEnvironment, childrenOf, type Expr } from "./compiled-expression.js";

/** What an expression of one step may read. */
export interface StepScope {
  /** Names of the steps before this one. */
  earlier: ReadonlySet<string>;
  /** This step's name. */
  self: string;
  /** Names of the steps after this one. */
  later: ReadonlySet<string>;
}

export interface ReferenceProblem {
  message: string;
  exprId: bigint;
}

/** Type names an expression may write as bare identifiers, e.g. `type(x) == string`. */
const typeIdentifiers = new Set(["bool", "int", "uint", "double", "string", "bytes", "list", "map", "null_type", "type", "dyn"]);

/** Operators the evaluator implements itself rather than through its function registry. */
const builtinOperators = new Set(["_&&_", "_||_", "_?_:_", "_[_]", "@not_strictly_false"]);

/**
 * The first reference the expression makes that cannot resolve when it runs: a variable other
 * than `ctx`, a function that does not exist, or a step that is unknown, is this one or runs
 * later. The parser does the syntax; this is the rest of what "compiles" means here.
 */
export function findReferenceProblem(root: Expr, scope: StepScope): ReferenceProblem | undefined {
  return visit(root, new Set(), scope);
}

function visit(expr: Expr, locals: ReadonlySet<string>, scope: StepScope): ReferenceProblem | undefined {
  const kind = expr.exprKind;
  if (kind.case === "identExpr") {
    const name = kind.value.name;
    if (name === "ctx" || locals.has(name) || typeIdentifiers.has(name)) return undefined;
    return { message: `unknown variable "${name}" (expressions read ctx.trigger and ctx.steps.<name>)`, exprId: expr.id };
  }
  if (!locals.has("ctx")) {
    const step = stepRead(expr);
    if (step !== undefined) {
      const problem = stepProblem(step, scope);
      if (problem !== undefined) return { message: problem, exprId: expr.id };
    }
  }
  if (kind.case === "callExpr") {
    const name = kind.value.function;
    if (!builtinOperators.has(name) && celEnvironment.funcs.find(name) === undefined) {
      // has() is a macro only over a field selection; otherwise it parses as a call of nothing.
      if (name === "has" && kind.value.target === undefined) {
        return { message: "has() takes a field selection, such as has(ctx.trigger.a.b); for a key that is no name, write 'b-c' in ctx.trigger.a", exprId: expr.id };
      }
      return { message: `unknown function "${name}"`, exprId: expr.id };
    }
  }
  if (kind.case === "comprehensionExpr") {
    const c = kind.value;
    const inner = new Set([...locals, c.iterVar, c.iterVar2, c.accuVar].filter((n) => n !== ""));
    const outerParts = [c.iterRange, c.accuInit];
    for (const part of outerParts) {
      const problem = part === undefined ? undefined : visit(part, locals, scope);
      if (problem !== undefined) return problem;
    }
    for (const part of [c.loopCondition, c.loopStep, c.result]) {
      const problem = part === undefined ? undefined : visit(part, inner, scope);
      if (problem !== undefined) return problem;
    }
    return undefined;
  }
  for (const child of childrenOf(expr)) {
    const problem = visit(child, locals, scope);
    if (problem !== undefined) return problem;
  }
  return undefined;
}

function stepProblem(name: string, scope: StepScope): string | undefined {
  if (scope.earlier.has(name)) return undefined;
  if (name === scope.self) return `step "${name}" cannot read its own output`;
  if (scope.later.has(name)) return `step "${name}" runs later; a step reads only the outputs of earlier steps`;
  return `unknown step "${name}"`;
}

/**
 * The step name `expr` reads, when it is `ctx.<name>`, `ctx.steps.<name>` or the same written
 * with ["..."]; undefined for anything else (including ctx.trigger and ctx.steps themselves).
 */
function stepRead(expr: Expr): string | undefined {
  const path = ctxPath(expr);
  if (path === undefined) return undefined;
  if (path.length === 1 && path[0] !== "trigger" && path[0] !== "steps") return path[0];
  if (path.length === 2 && path[0] === "steps") return path[1];
  return undefined;
}

/** The constant path below `ctx` that `expr` reads (["steps", "a"] for ctx.steps["a"]). */
function ctxPath(expr: Expr): string[] | undefined {
  const kind = expr.exprKind;
  if (kind.case === "identExpr") return kind.value.name === "ctx" ? [] : undefined;
  // Also has(ctx.steps.x), which asks whether x ran: x must still be an earlier step.
  if (kind.case === "selectExpr" && kind.value.operand !== undefined) {
    const parent = ctxPath(kind.value.operand);
    return parent === undefined ? undefined : [...parent, kind.value.field];
  }
  if (kind.case === "callExpr" && kind.value.function === "_[_]" && kind.value.args.length === 2) {
    const [operand, key] = kind.value.args;
    const keyKind = key?.exprKind;
    if (operand === undefined || keyKind?.case !== "constExpr" || keyKind.value.constantKind.case !== "stringValue") {
      return undefined;
    }
    const parent = ctxPath(operand);
    return parent === undefined ? undefined : [...parent, keyKind.value.constantKind.value];
  }
  return undefined;
}
