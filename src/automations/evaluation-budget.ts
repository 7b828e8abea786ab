import { celError, celList, celMethod, isCelError, isCelList, isCelMap, isCelUint, type CelEnv, type CelFunc, type CelList, type CelResult, type CelValue } from "@bufbuild/cel";
import { RE2JS } from "@bufbuild/re2";

/**
 * What one evaluation of an expression may do. The worker runs steps on the server's one thread,
 * and a restart resumes an execution at the step it was running, so an expression that runs for
 * minutes, or exhausts the heap, would hold (or end) the server again and again. Two bounds,
 * both deterministic (the same expression on the same input always passes or always fails):
 *
 * - comprehension iterations (`map`, `filter`, `all`, `exists`, nested ones counted together);
 * - cost: every function or operator call costs 1 plus the sizes of what it reads and of what it
 *   returns (a string's or bytes' length, a list's elements, a map's entries), charged when it
 *   returns. Every value an expression makes is charged as it is made, so no single call reads
 *   more than the budget (the trigger is at most 1 MiB), and none does more than linear work
 *   in what it reads (`replace` and the list appends of `map` and `filter` are replaced below to
 *   make that true).
 *
 * Past either, every further call is refused before it runs and the evaluation's result is that
 * error, even where `||`, `&&` or `?:` would have absorbed it.
 */
export const maxComprehensionIterations = 10_000;

/**
 * A 1 MiB webhook body lowered and searched fits (about 3.1 million); a unit costs 5-55 ns on the
 * development VM depending on the operation (bench/README.md, eighth session), so one evaluation
 * holds the thread for some 0.2 s at most.
 */
export const maxEvaluationCost = 4_000_000;

/*
 * The budget of the evaluation in progress, in module state on purpose (STYLE.md asks for none):
 * the metered functions are registered with cel-es once and receive no per-evaluation context,
 * and an evaluation is synchronous, so exactly one runs at a time on this thread and
 * `resetBudget()` starts each one with the whole budget.
 */
let iterationsLeft = maxComprehensionIterations;
let costLeft = maxEvaluationCost;
let exhausted: string | undefined;

/** Called before each evaluation: each has the whole budget. */
export function resetBudget(): void {
  iterationsLeft = maxComprehensionIterations;
  costLeft = maxEvaluationCost;
  exhausted = undefined;
  // Only when it holds something: V8's Set.clear allocates a new table (about 1 us an evaluation).
  if (patternsCharged.size > 0) patternsCharged.clear();
}

/** What the last evaluation used (for tests and measurements). */
export function costUsed(): number {
  return maxEvaluationCost - costLeft;
}

/** Why the last evaluation was stopped, if it was. */
export function budgetExhausted(): string | undefined {
  return exhausted;
}

/** Counts one comprehension iteration; throws past the bound (the CelFunc turns it into a CEL error). */
export function countIteration(): void {
  if (--iterationsLeft < 0) {
    exhausted ??= `the expression ran more than ${maxComprehensionIterations} comprehension iterations`;
    throw new Error(exhausted);
  }
}

function charge(units: number): void {
  costLeft -= units;
  if (costLeft < 0) {
    exhausted ??= `the expression's calls cost more than ${maxEvaluationCost} (1 a call, plus 1 a character or byte, 4 a list element and 8 a map entry it reads or returns)`;
  }
  if (exhausted !== undefined) throw new Error(exhausted);
}

/**
 * What going through a value costs, in units of one character: a character or a byte 1, a list
 * element 4, a map entry 8 (about what cel-es spends on each: 2-40 ns a character, 25-50 ns an
 * element, up to 300 ns an entry when maps are compared); 0 for scalars.
 */
function sizeOf(value: CelValue | undefined): number {
  if (typeof value === "string") return value.length;
  if (value instanceof Uint8Array) return value.length;
  if (isCelList(value)) return 4 * value.size;
  if (isCelMap(value)) return 8 * value.size;
  return 0;
}

/**
 * Calls that go through their operands all the way down: equality compares lists and maps
 * element by element at every level, and a list's `in` compares the value with each element.
 * Their operands are charged by deepSizeOf: charged by the top level only, comparing two
 * one-element lists that each held a 240,000-element list cost 9 units and walked 240,000
 * elements (10,000 such comparisons held the thread 40 s).
 */
const readsAllTheWayDown = new Set(["_==_", "_!=_", "@in"]);

/** Deep sizes of lists and maps already measured (values never change once made). */
const deepSizes = new WeakMap<object, number>();

/**
 * sizeOf, summed over every level of a list or map (each element or entry counted as sizeOf
 * counts it, a value held twice counted twice, as a comparison walks it twice). Measuring costs
 * a step per distinct value (sizes are remembered), and stops once the size passes `limit`
 * (what is left of the budget): a list of ten references to a list of ten references ... is
 * 10^n elements to compare but n values to measure.
 */
function deepSizeOf(value: CelValue, limit = Infinity): number {
  if (!isCelList(value) && !isCelMap(value)) return sizeOf(value);
  const known = deepSizes.get(value);
  if (known !== undefined) return known;
  let size = sizeOf(value);
  if (isCelList(value)) {
    for (const element of value) {
      size += deepSizeOf(element, limit - size);
      if (size > limit) return size; // past the budget: the caller refuses the call; not remembered
    }
  } else {
    for (const [key, entry] of value) {
      size += deepSizeOf(key, limit - size) + deepSizeOf(entry, limit - size);
      if (size > limit) return size;
    }
  }
  deepSizes.set(value, size);
  return size;
}

/** Operands a call reads without going through them: what `size` counts but a string, the map `in` looks a key up in. */
const readsInConstantTime: Record<string, ((value: CelValue) => boolean) | undefined> = {
  size: (value) => typeof value !== "string",
  "@in": (value) => isCelMap(value),
};

/**
 * `replace` for `funcs`' two replace overloads (the others as they are): cel-es rebuilds the
 * whole string after each occurrence and searches the rebuilt (flattened) string again, so
 * replacing the 2,000 characters of a 2 KB string took 15 s, and a 100 KB body's newlines would
 * take hours. Here it is one pass, with cel-go's semantics (Go's strings.Replace: a negative
 * limit replaces all, an empty search string matches at each code point boundary), and the
 * result's length is charged before it is built (so meteredCalls leaves it out).
 */
export function withLinearReplace(funcs: readonly CelFunc[]): CelFunc[] {
  return funcs.map((func) => (func.name === "replace" && func.target?.name === "string" ? linearReplace(func) : func));
}

/**
 * `env` with every call metered: 1 plus the sizes of what it reads and returns, charged when the
 * overload that matched returns. `selfCharging` names functions that charge for themselves.
 * The metering wraps each function group the planner looks up (one layer a call; wrapping each
 * overload instead cost ~40 ns for every overload tried before the one that matched, +60% for
 * a string `+`), so `plan` gets an environment whose `funcs.find` returns the metered group.
 */
export function meteredCalls(env: CelEnv, selfCharging: ReadonlySet<string>): CelEnv {
  const resolver = env.funcs;
  const groups = new Map<string, ReturnType<typeof resolver.find>>();
  const find = (name: string) => {
    if (!groups.has(name)) {
      const group = resolver.find(name);
      groups.set(
        name,
        group === undefined || selfCharging.has(name)
          ? group
          : name === "matches"
            ? (Object.create(group, { call: { value: meteredMatches } }) as FuncGroup)
            : meteredGroup(group),
      );
    }
    return groups.get(name);
  };
  const funcs = Object.create(resolver, { find: { value: find } }) as typeof resolver;
  return Object.create(env, { funcs: { value: funcs } }) as CelEnv;
}

type FuncGroup = NonNullable<ReturnType<CelEnv["funcs"]["find"]>>;

function meteredGroup(group: FuncGroup): FuncGroup {
  const readFree = readsInConstantTime[group.name] ?? (() => false);
  if (readsAllTheWayDown.has(group.name)) return deepReadingGroup(group, readFree);
  const call = (id: number, target: CelValue | undefined, args: CelValue[]): CelResult | undefined => {
    if (exhausted !== undefined) return celError(exhausted, id);
    const result = group.call(id, target, args);
    if (result === undefined || isCelError(result)) return result;
    let cost = 1 + sizeOf(result);
    if (target !== undefined && !readFree(target)) cost += sizeOf(target);
    for (const arg of args) if (!readFree(arg)) cost += sizeOf(arg);
    try {
      charge(cost);
    } catch (e) {
      return celError(e, id);
    }
    return result;
  };
  // Everything else (name, the overloads) is the original's.
  return Object.create(group, { call: { value: call } }) as FuncGroup;
}

/**
 * A group from readsAllTheWayDown: its operands are measured and charged before it runs. Charged
 * after the call, one comparison of lists built to share their elements (570 characters of
 * expression) held the thread 4 s before the charge refused it. Its result, a bool, costs nothing.
 */
function deepReadingGroup(group: FuncGroup, readFree: (value: CelValue) => boolean): FuncGroup {
  const call = (id: number, target: CelValue | undefined, args: CelValue[]): CelResult | undefined => {
    try {
      if (exhausted !== undefined) throw new Error(exhausted);
      let cost = 1;
      for (const operand of target === undefined ? args : [target, ...args]) {
        if (!readFree(operand)) cost += deepSizeOf(operand, costLeft - cost);
      }
      charge(cost);
    } catch (e) {
      return celError(e, id);
    }
    return group.call(id, target, args);
  };
  return Object.create(group, { call: { value: call } }) as FuncGroup;
}

function linearReplace(original: CelFunc): CelFunc {
  const impl = function (this: string, search: string, replacement: string, limit?: bigint): string {
    charge(1 + this.length + search.length + replacement.length);
    const most = limit === undefined || limit < 0n ? Infinity : Number(limit);
    if (most === 0 || search === replacement) return this;
    // The pieces between occurrences (an empty search: the code points).
    const pieces = search === "" ? Array.from(this) : this.split(search);
    const found = search === "" ? pieces.length + 1 : pieces.length - 1;
    const replaced = Math.min(most, found);
    charge(this.length + replaced * (replacement.length - search.length));
    if (search === "") {
      const edited = replacement + pieces.slice(0, replaced).join(replacement);
      return replaced === found ? (pieces.length > 0 ? edited + replacement : edited) : edited + pieces.slice(replaced).join("");
    }
    const edited = pieces.slice(0, replaced + 1).join(replacement);
    return replaced === found ? edited : edited + search + pieces.slice(replaced + 1).join(search);
  };
  return celMethod(original.name, original.target as never, original.arguments as never, original.result as never, impl as never);
}

/**
 * What compiling a `matches` pattern costs, a unit a character times this: RE2JS compiles a
 * counted repetition into that many copies (`a{1000}`, 7 characters, is 1,000 instructions), and
 * its compiler spends about 2 us an instruction: up to ~290 us a character of pattern, measured
 * (bench/README.md, tenth session). Charged on a pattern's first use in an evaluation, so the
 * same expression on the same input always costs the same, cache or not.
 */
export const matchesCompileCostPerCharacter = 5_000;

/**
 * What running a compiled pattern costs: its text's length (plus one) times its program's
 * instructions, times this. RE2's automata guarantee time linear in that product; RE2JS spends up
 * to ~140 ns on each (a pattern such as `(?:a?){1000}a{1000}` on a 1 KB text: 0.42 s), usually far
 * less (its DFA: ~8 ns).
 */
export const matchesRunCostPerStep = 3;

/** Compiled patterns, kept across evaluations: compiling is most of the work of a short match. */
const compiledPatterns = new Map<string, { regex: RE2JS; instructions: number }>();
const maxCompiledPatterns = 256;
/** The patterns this evaluation has paid the compile cost of. */
const patternsCharged = new Set<string>();

/**
 * `string.matches(pattern)`, metered: cel-es compiles the pattern with RE2JS on every call and
 * its cost was not charged (a 19-character pattern held the thread 0.4 s a call, and a 1.5 KB
 * webhook body with 20 such patterns 7 s). Here the pattern's compilation is charged before it
 * is compiled (matchesCompileCostPerCharacter), and the match before it runs
 * (matchesRunCostPerStep); compiled patterns are cached.
 */
function meteredMatches(id: number, target: CelValue | undefined, args: CelValue[]): CelResult | undefined {
  const [pattern] = args;
  if (typeof target !== "string" || typeof pattern !== "string" || args.length !== 1) return undefined;
  try {
    if (exhausted !== undefined) throw new Error(exhausted);
    if (!patternsCharged.has(pattern)) {
      charge(1 + pattern.length * matchesCompileCostPerCharacter);
      patternsCharged.add(pattern);
    }
    const compiled = compiledPattern(pattern);
    charge(1 + (target.length + 1) * compiled.instructions * matchesRunCostPerStep);
    return compiled.regex.test(target);
  } catch (e) {
    return celError(e, id);
  }
}

function compiledPattern(pattern: string): { regex: RE2JS; instructions: number } {
  let compiled = compiledPatterns.get(pattern);
  if (compiled === undefined) {
    const regex = RE2JS.compile(pattern); // throws on a bad pattern: the call's error
    compiled = { regex, instructions: instructionsOf(regex) };
    if (compiledPatterns.size >= maxCompiledPatterns) compiledPatterns.delete(compiledPatterns.keys().next().value ?? "");
  } else {
    compiledPatterns.delete(pattern); // to the end: the least recently used goes first
  }
  compiledPatterns.set(pattern, compiled);
  return compiled;
}

/**
 * The size of a compiled pattern's program. RE2JS does not export it; its RE2 object holds the
 * program (`re2Input.prog.numInst()`, as in RE2's C++ and Go `ProgramSize`). A test pins it, so an
 * upgrade of @bufbuild/re2 that moves it fails there rather than here.
 */
function instructionsOf(regex: RE2JS): number {
  const program = (regex as unknown as { re2Input?: { prog?: { numInst?: () => number } } }).re2Input?.prog;
  if (typeof program?.numInst !== "function") throw new Error("@bufbuild/re2 no longer exposes a pattern's program size");
  return program.numInst();
}

/**
 * A list or map literal, as built: costs 1 plus its size (the rewritten plan calls it around each
 * literal). A map literal with an int and a uint key of one value (`{0: 1, 0u: 2}`) is an error,
 * as the CEL spec has repeated keys: cel-es refuses a repeated key of one type only, and kept
 * both, one of them out of reach.
 */
export function chargeLiteral<T extends CelValue>(literal: T): T {
  charge(1 + sizeOf(literal));
  if (isCelMap(literal) && literal.size > 1) {
    const numbers = new Set<bigint>();
    for (const key of literal.keys()) {
      const number = typeof key === "bigint" ? key : isCelUint(key) ? key.value : undefined;
      if (number === undefined) continue;
      if (numbers.has(number)) throw new Error(`Failed with repeated key: ${number} (an int and a uint of one value are one key)`);
      numbers.add(number);
    }
  }
  return literal;
}

/** Lists built by appendToAccumulator, with the array each one's elements are in. */
const accumulatorArrays = new WeakMap<object, CelValue[]>();

/**
 * `accumulator + tail` for a `map` or `filter` comprehension's accumulator, in amortized constant
 * time. cel-es's own list `+` links its two operands, so a `map` built a chain as deep as its
 * list, which every later read walks level by level (searching a 5,000-element result overflowed
 * the stack; 4,000 took 8 million steps). Here the array behind the accumulator is extended in
 * place, which changes no list anyone can still see: only the comprehension's own loop step
 * reads its accumulator (see compiled-expression.ts), and the first append copies the initial
 * `[]`. Costs 1 plus the tail's elements.
 */
export const appendToAccumulatorFunction = "accessd.appendToAccumulator";

export function appendToAccumulator(accumulator: CelList, tail: CelList): CelList {
  charge(1 + sizeOf(tail));
  const array = accumulatorArrays.get(accumulator) ?? [...accumulator];
  for (const element of tail) array.push(element);
  const extended = celList(array);
  accumulatorArrays.set(extended, array);
  return extended;
}
