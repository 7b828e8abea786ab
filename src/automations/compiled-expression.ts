import { clone, create } from "@bufbuild/protobuf";
import { celEnv, celError, celFunc, CelScalar, isCelMap, listType, mapType, parse, plan, unparse, type CelResult, type CelInput } from "@bufbuild/cel";
import { isReflectMessage } from "@bufbuild/protobuf/reflect";
import { strings } from "@bufbuild/cel/ext";
import { Expr_CallSchema as CallSchema, ExprSchema, ParsedExprSchema } from "@bufbuild/cel-spec/cel/expr/syntax_pb.js";
import { conformingCasts, maxInt64, maxUint64, minInt64 } from "./conforming-casts.js";
import { conformingMaps } from "./conforming-maps.js";
import { conformingStrings } from "./conforming-strings.js";
import { conformingTime } from "./conforming-time.js";
import { aValueOf } from "./json-cel.js";
import {
  appendToAccumulator,
  appendToAccumulatorFunction,
  budgetExhausted,
  chargeLiteral,
  countIteration,
  meteredCalls,
  resetBudget,
  withLinearReplace,
} from "./evaluation-budget.js";

export { maxComprehensionIterations, maxEvaluationCost } from "./evaluation-budget.js";

/** A parsed expression: the AST (cel.expr.Expr) with its source positions. */
export type ParsedCel = ReturnType<typeof parse>;
export type Expr = ParsedCel["expr"];

/** The one variable expressions see: `ctx` (ctx.trigger, ctx.steps.<name>, ctx.<name>). */
const variables = { ctx: mapType(CelScalar.STRING, CelScalar.DYN) };

export const celEnvironment = celEnv({ variables, funcs: [...strings, ...conformingCasts, ...conformingStrings, ...conformingTime, ...conformingMaps] });

/** Called (by the rewritten plan) before every comprehension iteration; its argument is the loop condition. */
const iterationBudgetFunction = "accessd.comprehensionIteration";

/** Wraps each list and map literal (by the rewritten plan): charges what the literal built, returns it. */
const literalFunction = "accessd.literal";

/** Takes the place of each `has(e.f)` (by the rewritten plan): `e`, the field's name and `e`'s text, for its message. */
const presenceTestFunction = "accessd.has";

/**
 * What expressions are planned with: celEnvironment's functions with a linear `replace`, every
 * call metered, and the two functions the rewrite inserts (not in celEnvironment, so an
 * expression cannot name them: check-references refuses unknown functions). See
 * evaluation-budget.ts.
 */
const plannedEnvironment = meteredCalls(
  celEnv({
    variables,
    funcs: [
      ...withLinearReplace(strings),
      ...conformingCasts,
      ...conformingStrings,
      ...conformingTime,
      ...conformingMaps,
      celFunc(iterationBudgetFunction, [CelScalar.BOOL], CelScalar.BOOL, (condition) => {
        countIteration();
        return condition;
      }),
      celFunc(appendToAccumulatorFunction, [listType(CelScalar.DYN), listType(CelScalar.DYN)], listType(CelScalar.DYN), appendToAccumulator),
      celFunc(literalFunction, [listType(CelScalar.DYN)], listType(CelScalar.DYN), chargeLiteral),
      celFunc(literalFunction, [mapType(CelScalar.DYN, CelScalar.DYN)], mapType(CelScalar.DYN, CelScalar.DYN), chargeLiteral),
      celFunc(presenceTestFunction, [CelScalar.DYN, CelScalar.STRING, CelScalar.STRING], CelScalar.BOOL, (operand, field, text) => {
        if (isCelMap(operand)) return operand.get(field) !== undefined; // present with a null value too
        if (isReflectMessage(operand)) {
          const declared = operand.desc.fields.find((f) => f.name === field);
          if (declared === undefined) throw new Error(`no_such_field: ${operand.desc.typeName} has no field ${field}`);
          return operand.isSet(declared);
        }
        throw new Error(`has() tests a field of a map or a message: ${text} is ${aValueOf(operand)}`);
      }),
    ],
  }),
  new Set([iterationBudgetFunction, appendToAccumulatorFunction, literalFunction, presenceTestFunction, "replace"]),
);

/** A read of a field or key, kept to name a missing field in run-time errors. */
export interface FieldAccess {
  exprId: bigint;
  field: string;
  /** The expression read, e.g. ctx.trigger["entitlement-id"]. */
  text: string;
}

/** An expression parsed and planned once; evaluating it does not parse again. */
export interface CompiledExpression {
  source: string;
  parsed: ParsedCel;
  evaluate(ctx: ReadonlyMap<string, CelInput>): CelResult;
  accesses: FieldAccess[];
}

/** A syntax error, with its 0-based offset into the source. */
export class CelSyntaxError extends Error {
  constructor(
    readonly reason: string,
    readonly offset: number,
  ) {
    super(reason);
    this.name = "CelSyntaxError";
  }
}

/**
 * The deepest nesting of sub-expressions an expression may have (cel-go's parser allows 250 too).
 * cel-es plans and evaluates recursively: `1 + 1 + ... + 1` with 2,000 terms (4 KB) overflowed
 * the stack while the API saved it (answered 500), and deep nesting that plans could still
 * overflow when evaluated further down the worker's stack.
 */
export const maxExpressionDepth = 250;

/**
 * The deepest nesting of brackets (`(`, `[`, `{`) an expression may have, checked before it is
 * parsed. cel-es's parser backtracks through every open bracket when a deep expression fails to
 * parse: 100 levels of `(!` took up to 170 ms to refuse, 200 levels half a second, 420 levels
 * 3.2 s (or overflowed the stack, depending on how deep the caller's stack already was); 32
 * levels take under 1 ms.
 */
export const maxBracketDepth = 32;

/** Parses and plans `source`; throws CelSyntaxError (also for an expression nested too deeply). */
export function compileExpression(source: string): CompiledExpression {
  const tooDeepBracket = firstBracketDeeperThan(source, maxBracketDepth);
  if (tooDeepBracket !== undefined) {
    throw new CelSyntaxError(`brackets nested more than ${maxBracketDepth} deep`, tooDeepBracket);
  }
  const invalidEscape = firstInvalidEscape(source);
  if (invalidEscape !== undefined) throw new CelSyntaxError(invalidEscape.message, invalidEscape.offset);
  let parsed: ParsedCel;
  try {
    parsed = parse(commentsBlanked(source));
  } catch (e) {
    throw syntaxError(e);
  }
  const tooDeep = firstExprDeeperThan(parsed.expr, maxExpressionDepth);
  if (tooDeep !== undefined) {
    throw new CelSyntaxError(`nested more than ${maxExpressionDepth} levels deep`, offsetOf(parsed, tooDeep.id));
  }
  const outOfRange = firstLiteralOutOfRange(parsed.expr);
  if (outOfRange !== undefined) throw new CelSyntaxError(outOfRange.message, offsetOf(parsed, outOfRange.id));
  // Planning rewrites its own copy; `parsed` stays as written, for messages and reference checks.
  const program = plan(plannedEnvironment, forBudgetedPlanning(clone(ParsedExprSchema, parsed) as ParsedCel));
  return {
    source,
    parsed,
    evaluate: (ctx) => {
      resetBudget();
      const result = program({ ctx });
      // A bound reached is the result even where `||`, `&&` or `?:` absorbed the error.
      const exhausted = budgetExhausted();
      return exhausted === undefined ? result : celError(exhausted);
    },
    accesses: collectAccesses(parsed.expr),
  };
}

/**
 * Rewrites a parse of its own for planning (`parsed`, kept for messages and reference checks,
 * stays as written):
 * - every comprehension's loop condition is wrapped in the iteration budget's check. A fold
 *   whose condition is an error ends with that error, and so does every enclosing one at its
 *   next iteration;
 * - a `map` or `filter` appends to its accumulator with appendToAccumulator, in place: only the
 *   comprehension sees its accumulator (cel-es binds `__result__` for the macro's own loop step,
 *   not for the expression inside it: evaluation-budget.test.ts checks that it stays so);
 * - every `has(e.f)` is a call of presenceTestFunction: the spec makes `has()` of anything but a
 *   map or a message an error, where cel-es answered false (`has(ctx.trigger.user.email)` with
 *   `user` a string, a list or null), and a key whose value is null present, where cel-es's maps
 *   said absent (`has({'a': null}.a)` was false).
 */
function forBudgetedPlanning(parsed: ParsedCel): ParsedCel {
  let nextId = 0n;
  forEachExpr(parsed.expr, (expr) => {
    if (expr.id >= nextId) nextId = expr.id + 1n;
  });
  forEachExpr(parsed.expr, (expr) => {
    if (expr.exprKind.case !== "comprehensionExpr") return;
    const comprehension = expr.exprKind.value;
    const condition = comprehension.loopCondition;
    if (condition !== undefined) {
      comprehension.loopCondition = create(ExprSchema, {
        id: nextId++,
        exprKind: { case: "callExpr", value: { function: iterationBudgetFunction, args: [condition] } },
      });
    }
    const append = accumulatorAppend(comprehension);
    if (append !== undefined) append.function = appendToAccumulatorFunction;
  });
  rewritePresenceTests(parsed, () => nextId++);
  chargeLiterals(parsed, () => nextId++);
  return parsed;
}

/** Puts a call of presenceTestFunction in place of every `has(e.f)`: `e`, the field's name and `e`'s text. */
function rewritePresenceTests(parsed: ParsedCel, newId: () => bigint): void {
  const text = (value: string) => create(ExprSchema, { id: newId(), exprKind: { case: "constExpr", value: { constantKind: { case: "stringValue", value } } } });
  forEachExpr(parsed.expr, (expr) => {
    const kind = expr.exprKind;
    if (kind.case !== "selectExpr" || !kind.value.testOnly || kind.value.operand === undefined) return;
    const operand = kind.value.operand;
    const args = [operand, text(kind.value.field), text(sourceText(operand) ?? "its operand")];
    expr.exprKind = { case: "callExpr", value: create(CallSchema, { function: presenceTestFunction, args }) };
  });
}

/**
 * Wraps every list and map literal (`[a, b]`, `{"k": v}`) in a call of literalFunction, which
 * charges what it built: a literal is not a call, so inside a comprehension one of 1,300
 * elements was built 10,000 times for nothing (0.6 s). Empty literals (a comprehension's initial
 * accumulator) and the one-element tail a `map` or `filter` appends (charged by
 * appendToAccumulator) are left as they are.
 */
function chargeLiterals(parsed: ParsedCel, newId: () => bigint): void {
  const wrapped = new Set<Expr>();
  forEachExpr(parsed.expr, (expr) => {
    const kind = expr.exprKind;
    if (wrapped.has(expr)) return;
    if (kind.case === "callExpr" && kind.value.function === appendToAccumulatorFunction) {
      const tail = kind.value.args[1];
      if (tail !== undefined) wrapped.add(tail);
      return;
    }
    const isLiteral =
      (kind.case === "listExpr" && kind.value.elements.length > 0) ||
      (kind.case === "structExpr" && kind.value.messageName === "" && kind.value.entries.length > 0);
    if (!isLiteral) return;
    const literal = create(ExprSchema, { id: newId(), exprKind: kind });
    wrapped.add(literal);
    expr.exprKind = { case: "callExpr", value: create(CallSchema, { function: literalFunction, args: [literal] }) };
  });
}

type Comprehension = Extract<Expr["exprKind"], { case: "comprehensionExpr" }>["value"];
type Call = Extract<Expr["exprKind"], { case: "callExpr" }>["value"];

/**
 * The `accumulator + [element]` call of a `map` or `filter` macro's loop step (`acc + [e]`, or
 * `p ? acc + [e] : acc`) whose accumulator starts empty.
 */
function accumulatorAppend(comprehension: Comprehension): Call | undefined {
  const { accuVar, accuInit, loopStep } = comprehension;
  if (accuInit?.exprKind.case !== "listExpr" || accuInit.exprKind.value.elements.length !== 0) return undefined;
  if (loopStep?.exprKind.case !== "callExpr") return undefined;
  const isAccumulator = (e: Expr | undefined) => e?.exprKind.case === "identExpr" && e.exprKind.value.name === accuVar;
  const isAppend = (e: Expr | undefined): e is Expr & { exprKind: { case: "callExpr"; value: Call } } =>
    e?.exprKind.case === "callExpr" &&
    e.exprKind.value.function === "_+_" &&
    e.exprKind.value.target === undefined &&
    e.exprKind.value.args.length === 2 &&
    isAccumulator(e.exprKind.value.args[0]) &&
    e.exprKind.value.args[1]?.exprKind.case === "listExpr";
  const step = loopStep.exprKind.value;
  if (isAppend(loopStep)) return step;
  if (step.function === "_?_:_" && step.args.length === 3 && isAppend(step.args[1]) && isAccumulator(step.args[2])) {
    return step.args[1].exprKind.value;
  }
  return undefined;
}

/** 1-based "line:column" of an offset, for messages. */
export function positionOf(source: string, offset: number): string {
  const before = source.slice(0, Math.max(0, offset));
  const line = before.split("\n").length;
  // Characters (code points), as cel-go counts them; an offset counts UTF-16 units.
  const column = [...before.slice(before.lastIndexOf("\n") + 1)].length + 1;
  return `${line}:${column}`;
}

/** The source offset of a sub-expression, 0 when the parser recorded none. */
export function offsetOf(parsed: ParsedCel, exprId: bigint): number {
  return parsed.sourceInfo?.positions[exprId.toString()] ?? 0;
}

function syntaxError(e: unknown): CelSyntaxError {
  const message = e instanceof Error ? e.message : String(e);
  const offset = hasLocation(e) ? e.location.start.offset : 0;
  // peggy prefixes "<input>:line:col: "; the caller states the position its own way.
  return new CelSyntaxError(message.replace(/^<input>:\d+:\d+:\s*/, ""), offset);
}

function hasLocation(e: unknown): e is { location: { start: { offset: number } } } {
  if (typeof e !== "object" || e === null || !("location" in e)) return false;
  const location: unknown = e.location;
  if (typeof location !== "object" || location === null || !("start" in location)) return false;
  const start: unknown = location.start;
  return typeof start === "object" && start !== null && "offset" in start && typeof start.offset === "number";
}

function collectAccesses(root: Expr): FieldAccess[] {
  const accesses: FieldAccess[] = [];
  forEachExpr(root, (expr) => {
    const kind = expr.exprKind;
    const text = (): string | undefined => sourceText(expr);
    if (kind.case === "selectExpr" && !kind.value.testOnly && kind.value.operand !== undefined) {
      const shown = text();
      if (shown !== undefined) accesses.push({ exprId: expr.id, field: kind.value.field, text: shown });
    } else if (kind.case === "callExpr" && kind.value.function === "_[_]") {
      const key = kind.value.args[1]?.exprKind;
      const shown = key?.case === "constExpr" && key.value.constantKind.case === "stringValue" ? text() : undefined;
      if (shown !== undefined && key?.case === "constExpr") accesses.push({ exprId: expr.id, field: String(key.value.constantKind.value), text: shown });
    }
  });
  return accesses;
}

/**
 * The expression written back as CEL, for messages; undefined for one cel-es cannot write back:
 * a macro's expansion (`xs.filter(x, p)[0].y`, `has(xs.map(x, x)[0].y)`) threw "unsupported
 * expression: comprehension", which made saving such an expression a 500.
 */
export function sourceText(expr: Expr): string | undefined {
  try {
    return unparse(expr);
  } catch {
    return undefined;
  }
}

/**
 * The offset of the first bracket opened at more than `maxDepth` levels, outside comments (`//` to
 * the end of the line) and string and bytes literals (quoted with ' or ", single or triple, with
 * backslash escapes unless raw); undefined
 * when there is none. It does not validate: the parser does that afterwards.
 */
function firstBracketDeeperThan(source: string, maxDepth: number): number | undefined {
  let depth = 0;
  for (const span of lexicalSpans(source)) {
    if (span.kind !== "code") continue;
    for (let i = span.start; i < span.end; i++) {
      const c = source[i];
      if (c === "(" || c === "[" || c === "{") {
        if (++depth > maxDepth) return i;
      } else if (c === ")" || c === "]" || c === "}") {
        depth = Math.max(0, depth - 1);
      }
    }
  }
  return undefined;
}

/**
 * `source` with each comment replaced by as many spaces, so that every offset stays the same.
 * cel-es's parser takes at most one comment between two tokens and only one that a line break
 * ends: `1 // one`, and two comment lines in a row, were syntax errors.
 */
function commentsBlanked(source: string): string {
  let blanked = "";
  let copied = 0;
  for (const span of lexicalSpans(source)) {
    if (span.kind !== "comment") continue;
    blanked += source.slice(copied, span.start) + " ".repeat(span.end - span.start);
    copied = span.end;
  }
  return copied === 0 ? source : blanked + source.slice(copied);
}

/** A span of an expression's source; a literal's says how its text is read. */
type LexicalSpan =
  | { kind: "code" | "comment"; start: number; end: number }
  | { kind: "literal"; start: number; end: number; quote: string; raw: boolean; bytes: boolean };

/**
 * An expression's source in spans: code, comments (`//` to the end of the line) and string or
 * bytes literals (quoted '...', "...", or tripled; a raw literal's prefix, r"..." or rb'...',
 * turns escapes off; a `b` makes it bytes). A literal's span starts at its first quote; an
 * unterminated one runs to the end.
 */
function* lexicalSpans(source: string): Generator<LexicalSpan> {
  let codeStart = 0;
  for (let i = 0; i < source.length; i++) {
    const c = source[i];
    let span: LexicalSpan;
    if (c === "/" && source[i + 1] === "/") {
      const lineEnd = source.slice(i).search(/[\r\n]/);
      span = { kind: "comment", start: i, end: lineEnd === -1 ? source.length : i + lineEnd };
    } else if (c === '"' || c === "'") {
      let prefixStart = i;
      while (prefixStart > 0 && i - prefixStart < 2 && /[rRbB]/.test(source[prefixStart - 1] ?? "")) prefixStart--;
      const prefix = prefixStart === 0 || !/[A-Za-z0-9_]/.test(source[prefixStart - 1] ?? "") ? source.slice(prefixStart, i) : "";
      const raw = /[rR]/.test(prefix);
      const quote = source.startsWith(c.repeat(3), i) ? c.repeat(3) : c;
      let j = i + quote.length;
      while (j < source.length && !source.startsWith(quote, j)) j += !raw && source[j] === "\\" ? 2 : 1;
      span = { kind: "literal", start: i, end: Math.min(source.length, j + quote.length), quote, raw, bytes: /[bB]/.test(prefix) };
    } else {
      continue;
    }
    if (codeStart < i) yield { kind: "code", start: codeStart, end: i };
    yield span;
    codeStart = span.end;
    i = span.end - 1;
  }
  if (codeStart < source.length) yield { kind: "code", start: codeStart, end: source.length };
}

/**
 * The first escape in a string or bytes literal that the CEL spec does not define, with its
 * offset: cel-es's parser kept `'\q'` and `'\400'` as written, read `'\u12'` as U+0012 and
 * `b'\u00ff'` as a byte, and refused `'\x4'` with "Invalid code point NaN". The spec's escapes
 * (cel-go's too): `` \\ \? \" \' \` \a \b \f \n \r \t \v ``, `\x` or `\X` and two hex
 * digits, three octal digits from `\000` to `\377`, and in strings only `\u` and four hex
 * digits or `\U` and eight (a code point; cel-es refuses surrogates itself).
 */
function firstInvalidEscape(source: string): { offset: number; message: string } | undefined {
  for (const span of lexicalSpans(source)) {
    if (span.kind !== "literal" || span.raw) continue;
    const bodyEnd = source.startsWith(span.quote, span.end - span.quote.length) && span.end - span.start >= 2 * span.quote.length ? span.end - span.quote.length : span.end;
    for (let i = span.start + span.quote.length; i < bodyEnd; i++) {
      if (source[i] !== "\\") continue;
      const length = escapeLength(source.slice(i + 1, i + 10), span.bytes);
      if (typeof length === "string") return { offset: i, message: length };
      i += length;
    }
  }
  return undefined;
}

/** How many characters follow the backslash of a valid escape (`after`: what follows it), or what is wrong. */
function escapeLength(after: string, inBytes: boolean): number | string {
  const c = after[0] ?? "";
  if (c === "" || c === "\r" || c === "\n") return "a backslash ends the line or the literal";
  if ("\\?\"'`abfnrtv".includes(c)) return 1;
  const hexDigits = c === "x" || c === "X" ? 2 : c === "u" ? 4 : c === "U" ? 8 : 0;
  const octal = /[0-7]/.test(c);
  const shown = `\\${after.slice(0, hexDigits > 0 ? 1 + hexDigits : octal ? 3 : 1).replace(/[\s'"\\].*$/s, "")}`;
  if (hexDigits > 0) {
    if (inBytes && hexDigits > 2) return `invalid escape ${shown}: \\${c} is for strings, not bytes (use \\x and two hexadecimal digits, or three octal digits)`;
    const digits = after.slice(1, 1 + hexDigits);
    if (!new RegExp(`^[0-9a-fA-F]{${hexDigits}}$`).test(digits)) return `invalid escape ${shown}: \\${c} takes ${hexDigits} hexadecimal digits`;
    if (parseInt(digits, 16) > 0x10ffff) return `invalid escape ${shown}: no Unicode code point is that large`;
    return 1 + hexDigits;
  }
  if (octal) return /^[0-3][0-7]{2}/.test(after) ? 3 : `invalid escape ${shown}: an octal escape is three digits, \\000 to \\377`;
  return `invalid escape ${shown} (CEL's are \\\\ \\? \\" \\' \\\` \\a \\b \\f \\n \\r \\t \\v, \\xHH, \\ooo, \\uHHHH and \\UHHHHHHHH)`;
}

const int64Range = { min: minInt64, max: maxInt64, text: "int: -2^63 to 2^63-1" };
const uint64Range = { min: 0n, max: maxUint64, text: "uint: 0 to 2^64-1" };

/**
 * The first int or uint literal outside its type's range (`9223372036854775808`,
 * `18446744073709551616u`), or double literal beyond a double's (`1e400`), which the CEL spec
 * makes a parse error. cel-es's parser keeps such an integer as a bigint of any size, and the
 * expression's planning then threw from deep inside protobuf-es (a 500 for the Create that saved
 * it); such a double it kept as Infinity.
 */
function firstLiteralOutOfRange(root: Expr | undefined): { id: bigint; message: string } | undefined {
  let found: { id: bigint; message: string } | undefined;
  forEachExpr(root, (expr) => {
    const kind = expr.exprKind;
    if (found !== undefined || kind.case !== "constExpr") return;
    const constant = kind.value.constantKind;
    if (constant.case === "doubleValue" && !Number.isFinite(constant.value)) {
      found = { id: expr.id, message: "double literal is out of range (a double: about ±1.8e308)" };
      return;
    }
    const range = constant.case === "int64Value" ? int64Range : constant.case === "uint64Value" ? uint64Range : undefined;
    if (range === undefined || typeof constant.value !== "bigint") return;
    if (constant.value < range.min || constant.value > range.max) {
      const text = `${constant.value}${constant.case === "uint64Value" ? "u" : ""}`;
      found = { id: expr.id, message: `integer literal ${text} is out of range (${range.text})` };
    }
  });
  return found;
}

/** A sub-expression at more than `maxDepth` levels (the root is level 1), found without recursion. */
function firstExprDeeperThan(root: Expr | undefined, maxDepth: number): Expr | undefined {
  if (root === undefined) return undefined;
  const pending: [Expr, number][] = [[root, 1]];
  for (let next = pending.pop(); next !== undefined; next = pending.pop()) {
    const [expr, depth] = next;
    if (depth > maxDepth) return expr;
    for (const child of childrenOf(expr)) pending.push([child, depth + 1]);
  }
  return undefined;
}

/** Visits every sub-expression, parents first. */
export function forEachExpr(expr: Expr | undefined, visit: (expr: Expr) => void): void {
  if (expr === undefined) return;
  visit(expr);
  for (const child of childrenOf(expr)) forEachExpr(child, visit);
}

export function childrenOf(expr: Expr): Expr[] {
  const kind = expr.exprKind;
  const present = (list: (Expr | undefined)[]) => list.filter((e): e is Expr => e !== undefined);
  switch (kind.case) {
    case "selectExpr":
      return present([kind.value.operand]);
    case "callExpr":
      return present([kind.value.target, ...kind.value.args]);
    case "listExpr":
      return kind.value.elements;
    case "structExpr":
      return present(
        kind.value.entries.flatMap((entry) => [
          entry.keyKind.case === "mapKey" ? entry.keyKind.value : undefined,
          entry.value,
        ]),
      );
    case "comprehensionExpr": {
      const c = kind.value;
      return present([c.iterRange, c.accuInit, c.loopCondition, c.loopStep, c.result]);
    }
    default:
      return [];
  }
}
