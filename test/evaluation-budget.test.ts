import { isCelError, type CelInput, type CelResult } from "@bufbuild/cel";
import { describe, expect, it } from "vitest";
import { compileExpression } from "../src/automations/compiled-expression.js";
import {
  costUsed,
  matchesCompileCostPerCharacter,
  matchesRunCostPerStep,
  maxComprehensionIterations,
  maxEvaluationCost,
} from "../src/automations/evaluation-budget.js";
import { celToJson, jsonToCel } from "../src/automations/json-cel.js";

/** Evaluates `source` with `ctx.trigger` bound to `trigger` (as the worker binds a webhook body). */
function run(source: string, trigger: unknown = {}): CelResult {
  return compileExpression(source).evaluate(new Map<string, CelInput>([["trigger", jsonToCel(trigger as never)]]));
}

function json(result: CelResult): unknown {
  if (isCelError(result)) throw result;
  return celToJson(result);
}

function errorOf(result: CelResult): string | undefined {
  return isCelError(result) ? result.message : undefined;
}

const costMessage = `the expression's calls cost more than ${maxEvaluationCost}`;

describe("string.replace", () => {
  // cel-go's semantics (Go's strings.Replace); cel-es replaced nothing for a negative limit.
  it.each([
    ["a.b.c.d", ".", "--", undefined, "a--b--c--d"],
    ["a.b.c.d", ".", "--", 2, "a--b--c.d"],
    ["a.b.c.d", ".", "--", -1, "a--b--c--d"],
    ["a.b.c.d", ".", "--", 0, "a.b.c.d"],
    ["aaa", "aa", "b", undefined, "ba"],
    ["xyz", "q", "r", undefined, "xyz"],
    ["..", ".", "", undefined, ""],
    ["abcd", "", "-", undefined, "-a-b-c-d-"],
    ["abcd", "", "-", 2, "-a-bcd"],
    ["aé😀", "", ".", undefined, ".a.é.😀."],
    ["", "", "-", undefined, "-"],
  ])("%j.replace(%j, %j, %s) is %j", (text, search, replacement, limit, expected) => {
    const args = [JSON.stringify(search), JSON.stringify(replacement), ...(limit === undefined ? [] : [String(limit)])];
    expect(run(`ctx.trigger.t.replace(${args.join(", ")})`, { t: text })).toBe(expected);
  });

  it("takes one pass over a large body (cel-es rebuilt and searched the whole string once per occurrence: hours for this one)", () => {
    const body = "line\n".repeat(200_000);
    const started = performance.now();
    expect(run('ctx.trigger.body.replace("\\n", " ")', { body })).toBe("line ".repeat(200_000));
    // Generous for a loaded CI machine: the quadratic version copies some 10^11 characters.
    expect(performance.now() - started).toBeLessThan(5_000);
  });

  it("charges its result's length before building it", () => {
    // 2,000 x 2,000 characters would be 4 million, within the budget; 3,000 x 3,000 is not.
    expect(run('ctx.trigger.s.replace("s", ctx.trigger.s).size()', { s: "s".repeat(1_000) })).toBe(1_000_000n);
    expect(errorOf(run('ctx.trigger.s.replace("s", ctx.trigger.s)', { s: "s".repeat(3_000) }))).toContain(costMessage);
  });
});

describe("the cost of an evaluation", () => {
  it("is 1 a call plus what it reads and returns: a character 1, a list element 4, a map entry 8", () => {
    run('"ab" + "cde"');
    expect(costUsed()).toBe(1 + 2 + 3 + 5);
    // A list or map literal costs 1 plus what it built: [1, 2] is 1 + 8, {"a": 1} 1 + 8.
    const list = (n: number) => 1 + 4 * n;
    const map = (n: number) => 1 + 8 * n;
    run("[1, 2] + [3]");
    expect(costUsed()).toBe(list(2) + list(1) + 1 + 2 * 4 * (2 + 1));
    run('{"a": 1, "b": 2} == {"a": 1}');
    expect(costUsed()).toBe(map(2) + map(1) + 1 + (8 * 2 + 2) + (8 + 1)); // equality goes all the way down: the keys' characters too
    // size of a list or map and a key looked up in a map do not go through them.
    run('size([1, 2, 3]) + size({"a": 1}) + ("a" in {"a": 1} ? 1 : 0)');
    expect(costUsed()).toBe(list(3) + map(1) + map(1) + 1 + 1 + (1 + 1) + 1 + 1);
    run("3 in [1, 2, 3]");
    expect(costUsed()).toBe(list(3) + 1 + 4 * 3);
  });

  it("lets a 1 MiB body be lowered and searched", () => {
    const body = "Ab".repeat(512 * 1024);
    expect(run('ctx.trigger.body.lowerAscii().contains("ab")', { body })).toBe(true);
  });

  it("stops a replacement repeated over a list (ran for minutes)", () => {
    const trigger = { s: "s".repeat(10_000), xs: Array.from({ length: 100 }, (_, i) => i) };
    expect(errorOf(run('ctx.trigger.xs.map(x, ctx.trigger.s.replace("s", ctx.trigger.s)).size()', trigger))).toContain(costMessage);
  });

  it("stops a list doubled by nested comprehensions before it is searched (2^24 elements: 53 s)", () => {
    let source = "-1 in l23";
    for (let level = 22; level >= 0; level--) source = `[l${level} + l${level}].map(l${level + 1}, ${source})`;
    source = `[ctx.trigger.xs].map(l0, ${source})`;
    const started = performance.now();
    expect(errorOf(run(source, { xs: Array.from({ length: 10 }, (_, i) => i) }))).toContain(costMessage);
    expect(performance.now() - started).toBeLessThan(5_000);
  });

  it("is the result even where || would have absorbed the error", () => {
    const trigger = { s: "s".repeat(3_000) };
    expect(errorOf(run('ctx.trigger.s.replace("s", ctx.trigger.s) == "" || true', trigger))).toContain(costMessage);
    expect(run('ctx.trigger.s.replace("s", "t") == "" || true', trigger)).toBe(true);
  });

  it("is the whole budget again for each evaluation", () => {
    const expression = compileExpression('ctx.trigger.s.replace("s", ctx.trigger.s).size()');
    const trigger = new Map<string, CelInput>([["trigger", jsonToCel({ s: "s".repeat(1_200) })]]);
    for (let i = 0; i < 3; i++) expect(expression.evaluate(trigger)).toBe(1_440_000n);
  });
});

describe("comprehension iterations", () => {
  it("allow 10,000 in an evaluation (README) and refuse the 10,001st", () => {
    expect(maxComprehensionIterations).toBe(10_000);
    expect(json(run("ctx.trigger.l.map(x, x).size()", { l: Array(10_000).fill(0) }))).toBe(10_000);
    expect(errorOf(run("ctx.trigger.l.map(x, x).size()", { l: Array(10_001).fill(0) }))).toBe(
      "the expression ran more than 10000 comprehension iterations",
    );
  });
});

describe("list and map literals", () => {
  it("cost what they build, also inside a comprehension (uncharged, a 1,300-element literal built 10,000 times took 0.6 s)", () => {
    const literal = `[${Array(1_300).fill("i").join(", ")}]`;
    const trigger = { l: Array(10_000).fill(0) };
    expect(errorOf(run(`ctx.trigger.l.all(i, size(${literal}) > 0)`, trigger))).toContain(costMessage);
    const mapLiteral = `{${Array.from({ length: 500 }, (_, k) => `"k${k}": i`).join(", ")}}`;
    expect(errorOf(run(`ctx.trigger.l.all(i, size(${mapLiteral}) > 0)`, trigger))).toContain(costMessage);
    // A map or filter still builds its result as before (its accumulator and appended elements are not literals of the source).
    expect(json(run("ctx.trigger.l.map(i, i + 1.0).filter(x, x > 0.5)", { l: [0, 1, 2] }))).toEqual([1, 2, 3]);
    expect(json(run('[[1], {"a": [2]}]'))).toEqual([[1], { a: [2] }]);
  });
});

describe("equality and list membership", () => {
  it("cost every level of what they compare (charged by the top level, 10,000 comparisons of nested lists held the thread 40 s)", () => {
    const nested = { l: Array(1_000).fill(0), a: [Array(50_000).fill(0)], b: [Array(50_000).fill(0)] };
    expect(errorOf(run("ctx.trigger.l.all(i, ctx.trigger.a == ctx.trigger.b)", nested))).toContain(costMessage);
    expect(errorOf(run("ctx.trigger.l.exists(i, ctx.trigger.a != ctx.trigger.b)", nested))).toContain(costMessage);
    expect(errorOf(run("ctx.trigger.l.all(i, ctx.trigger.a[0] in ctx.trigger.b)", nested))).toContain(costMessage);
  });

  it("are charged before they run: lists built to share their elements are 10^9 elements to compare, 9 values to measure", () => {
    // Each level holds ten references to the level below: cheap to build and to measure, and
    // 10^9 elements for a comparison to walk (charged after the call, it ran for minutes).
    const shared = (seed: string) => {
      let source = seed;
      for (let level = 0; level < 9; level++) source = `[${source}].map(a, [a, a, a, a, a, a, a, a, a, a])[0]`;
      return source;
    };
    const started = performance.now();
    expect(errorOf(run(`${shared("[1]")} == ${shared("[1]")}`))).toContain(costMessage);
    expect(errorOf(run(`${shared("[1]")} in [${shared("[1]")}]`))).toContain(costMessage);
    expect(performance.now() - started).toBeLessThan(5_000); // a hang without the charge before the call
  });

  it("costs what flat values cost: a comparison of two 100-element lists is 1 + 2 x 400", () => {
    run("ctx.trigger.a == ctx.trigger.b", { a: Array(100).fill(1), b: Array(100).fill(1) });
    expect(costUsed()).toBe(1 + 2 * 400);
    run("ctx.trigger.a == ctx.trigger.b", { a: [Array(100).fill(1)], b: [Array(100).fill(1)] });
    expect(costUsed()).toBe(1 + 2 * (4 + 400));
  });
});

describe("string.matches", () => {
  const emailPattern = String.raw`^[a-z0-9.]+@corp\.example\.com$`;

  it("matches as cel-es does (RE2 syntax, unanchored unless the pattern says so), and a bad pattern is the call's error", () => {
    expect(run('"ada@corp.example.com".matches(ctx.trigger.p)', { p: emailPattern })).toBe(true);
    expect(run('"ada@corp-example.com".matches(ctx.trigger.p)', { p: emailPattern })).toBe(false);
    expect(run('"xyz".matches("y")')).toBe(true);
    expect(run('"xyz".matches("^y")')).toBe(false);
    expect(errorOf(run('"xyz".matches("(")'))).toContain("missing closing )");
  });

  it("costs its pattern's compilation once an evaluation and each match by text length times program size", () => {
    // "a{3}" compiles to 5 instructions (RE2's program: a, a, a, match, and the fail instruction).
    run('"aaaa".matches("a{3}")');
    const once = costUsed();
    expect(once).toBe(1 + 4 * matchesCompileCostPerCharacter + 1 + 5 * 5 * matchesRunCostPerStep);
    run('["aaaa", "aaaa"].all(s, s.matches("a{3}"))');
    // The second match pays no compilation; the rest is the list, the iterations and `all`.
    expect(costUsed()).toBeLessThan(2 * once);
    expect(costUsed()).toBeGreaterThan(once + 5 * 5 * matchesRunCostPerStep);
  });

  it("stops a pattern whose match costs seconds (a 19-character pattern held the thread 0.4 s a call)", () => {
    const trigger = { email: `${"a".repeat(999)}@example.com`, excluded: Array(20).fill("(?:a?){1000}a{1000}") };
    const started = performance.now();
    expect(errorOf(run("ctx.trigger.excluded.exists(p, ctx.trigger.email.matches(p))", trigger))).toContain(costMessage);
    expect(performance.now() - started).toBeLessThan(2_000); // unmetered: 20 x 0.4 s
  });

  it("lets a thousand addresses be checked against an ordinary pattern", () => {
    const users = Array.from({ length: 1_000 }, (_, i) => ({ email: `user.${i}@corp.example.com` }));
    expect(run("ctx.trigger.users.filter(u, u.email.matches(ctx.trigger.p)).size()", { users, p: emailPattern })).toBe(1_000n);
  });
});

describe("comprehension results", () => {
  it(`are flat lists: a ${maxComprehensionIterations - 1}-element map can be searched and filtered (cel-es's chained result overflowed the stack at 5,000)`, () => {
    const xs = Array.from({ length: maxComprehensionIterations - 1 }, (_, i) => i);
    expect(run(`${xs.length - 1}.0 in ctx.trigger.xs.map(x, x)`, { xs })).toBe(true);
    expect(run("ctx.trigger.xs.filter(x, x >= 0)[9997]", { xs })).toBe(9_997);
    // One comprehension's cost: 1 call and 4 units an element appended, plus what `in` reads.
    run(`-1 in ctx.trigger.xs.map(x, x)`, { xs });
    expect(costUsed()).toBe(xs.length * (1 + 4) + 1 + 4 * xs.length);
  });

  it("extend an accumulator that no expression can read (what makes extending it in place safe)", () => {
    expect(errorOf(run("[1, 2, 3].map(x, size(__result__))"))).toBe("unresolved attribute");
    expect(errorOf(run("[1, 2, 3].filter(x, size(__result__) < 2)"))).toBe("unresolved attribute");
    expect(json(run("[1, 2].map(x, [3, 4].map(y, [x, y]))"))).toEqual([
      [[1, 3], [1, 4]],
      [[2, 3], [2, 4]],
    ]);
    expect(json(run("[[1, 2], [3]].map(l, l.filter(x, x > 1).map(x, x * 10))"))).toEqual([[20], [30]]);
  });
});
