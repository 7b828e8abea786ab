import { isCelError, type CelInput, type CelResult } from "@bufbuild/cel";
import { describe, expect, it } from "vitest";
import { compileExpression } from "../src/automations/compiled-expression.js";
import { evaluate } from "../src/automations/evaluate.js";
import { ProgramCache } from "../src/automations/program-cache.js";
import { StepContext } from "../src/automations/step-context.js";
import { celToJson, jsonToCel, OutputError } from "../src/automations/json-cel.js";

/** Evaluates `source` as a step does, with `ctx.trigger` bound to `trigger`. */
function run(source: string, trigger: unknown = {}): CelResult {
  return compileExpression(source).evaluate(new Map<string, CelInput>([["trigger", jsonToCel(trigger as never)]]));
}

const valueOf = (source: string, trigger?: unknown) => {
  const result = run(source, trigger);
  if (isCelError(result)) throw result;
  return celToJson(result);
};
const errorOf = (source: string, trigger?: unknown) => {
  const result = run(source, trigger);
  return isCelError(result) ? result.message : `no error: ${JSON.stringify(celToJson(result))}`;
};

describe("casts as the CEL spec and cel-go have them (cel-es 0.6.1 differs)", () => {
  it("reads timestamp(int) as Unix seconds (cel-es read milliseconds: 1970-01-20)", () => {
    expect(valueOf("string(timestamp(1700000000))")).toBe("2023-11-14T22:13:20Z");
    expect(valueOf("timestamp(int(timestamp('2026-11-27T10:00:00Z'))) == timestamp('2026-11-27T10:00:00Z')")).toBe(true);
    expect(valueOf("string(timestamp(int(ctx.trigger.at)))", { at: 1764237600 })).toBe("2025-11-27T10:00:00Z"); // JSON numbers are doubles
    expect(valueOf("string(timestamp(-62135596800))")).toBe("0001-01-01T00:00:00Z");
    expect(errorOf("timestamp(253402300800)")).toBe("timestamp(253402300800) is out of range (years 1 to 9999)");
  });

  it("converts only base-10 digits to int and uint (cel-es took '', ' 12 ' and '0x10' as BigInt does)", () => {
    expect(valueOf("int('-42') + int('+7') + int('007')")).toBe(-28);
    expect(valueOf("uint('18446744073709551615') == 18446744073709551615u")).toBe(true);
    for (const text of ["", " 12 ", "0x10", "1.5", "1e3", "abc"]) {
      expect(errorOf(`int('${text}')`)).toBe(`cannot convert ${JSON.stringify(text)} to int`);
    }
    expect(errorOf("uint('-1')")).toBe('cannot convert "-1" to uint');
    expect(errorOf("uint('+5')")).toBe('cannot convert "+5" to uint'); // ParseUint takes no sign
    expect(errorOf("int('9223372036854775808')")).toBe("int overflow during type conversion");
    expect(errorOf("uint('18446744073709551616')")).toBe("uint overflow during type conversion");
    expect(errorOf(`int('${"9".repeat(100)}x')`)).toBe(`cannot convert "${"9".repeat(64)}…" to int`);
  });

  it("converts a decimal number, inf and nan to double, and nothing else (cel-es answered NaN for 'abc' and 0 for '')", () => {
    expect(valueOf("double('1.5') + double('.5') + double('2e3') + double('-1.')")).toBe(2001);
    expect(valueOf("double('-Infinity') < 0.0 && double('inf') > 0.0 && double('NaN') != double('NaN')")).toBe(true);
    for (const text of ["abc", "", " 1", "0x10", "1_000", "+nan", "-NaN"]) {
      expect(errorOf(`double('${text}')`)).toBe(`cannot convert ${JSON.stringify(text)} to double`);
    }
    // ParseFloat's ErrRange is cel-go's error, not Infinity (cel-es and the first replacement: Infinity).
    expect(errorOf("double('1e400')")).toBe('cannot convert "1e400" to double: out of range');
  });
  it("reads a duration as Go's ParseDuration: a unit on every number but a lone 0, µs with either mu (cel-es took '' and '-' as 0s)", () => {
    expect(valueOf("[duration('1h30m'), duration('-1.5s'), duration('+.5ms'), duration('0'), duration('-0'), duration('1µs'), duration('1μs'), duration('2562047h')].map(d, string(d))")).toEqual(
      ["5400s", "-1.500s", "0.000500s", "0s", "0s", "0.000001s", "0.000001s", "9223369200s"],
    );
    for (const text of ["", "-", "+", "1", "1d", "1h-1m", "1e3s", "1h 1m", " 1s", "1S", ".s"]) {
      expect(errorOf(`duration('${text}')`), text).toBe(`cannot convert ${JSON.stringify(text)} to duration (numbers with units ns, us, ms, s, m, h, and a sign or none: "1h30m", "-1.5s")`);
    }
    expect(errorOf("duration('2562048h')")).toBe("duration out of range");
  });
});

describe("string methods as the CEL spec and cel-go have them: code points, Go's SplitN (cel-es 0.6.1 counts UTF-16 units)", () => {
  it("index, cut and split by code points, so a character beyond the BMP is one (cel-es cut 😀 in halves)", () => {
    expect(valueOf('"a😀b".indexOf("b")')).toBe(2);
    expect(valueOf('"a😀b😀c".indexOf("😀", 2)')).toBe(3);
    expect(valueOf('"a😀b😀c".lastIndexOf("😀")')).toBe(3);
    expect(valueOf('"a😀b😀c".lastIndexOf("😀", 2)')).toBe(1);
    expect(valueOf('"a😀b".substring(0, size("a😀b"))')).toBe("a😀b");
    expect(valueOf('"a😀b".substring(2)')).toBe("b");
    expect(valueOf('"a😀b".charAt(1)')).toBe("😀");
    expect(valueOf('"a😀b".charAt(3)')).toBe("");
    expect(valueOf('"a😀b".split("")')).toEqual(["a", "😀", "b"]);
    expect(valueOf('"Ørjan".substring(0, 1) + "." ')).toBe("Ø.");
  });

  it("split(sep, n) ends with the rest of the string, as Go's SplitN (cel-es dropped it)", () => {
    expect(valueOf('"a,b,c".split(",", 2)')).toEqual(["a", "b,c"]);
    expect(valueOf('"a,b,c".split(",", 1)')).toEqual(["a,b,c"]);
    expect(valueOf('"a,b,c".split(",", 0)')).toEqual([]);
    expect(valueOf('"a,b,c".split(",", -1)')).toEqual(["a", "b", "c"]);
    expect(valueOf('"a,b,c".split(",", 5)')).toEqual(["a", "b", "c"]);
    expect(valueOf('"a😀bc".split("", 3)')).toEqual(["a", "😀", "bc"]);
  });

  it("keeps cel-es's bounds, in code points", () => {
    expect(errorOf('"a😀b".charAt(4)')).toBe("index 4 out of bounds [0, 3)");
    expect(errorOf('"a😀b".substring(4)')).toBe("index 4 out of bounds [0, 3)");
    expect(errorOf('"a😀b".substring(2, 1)')).toBe("invalid argument to function substring: start > end");
    expect(errorOf('"a😀b".indexOf("b", 3)')).toBe("index 3 out of bounds [0, 3)");
    expect(errorOf('"a😀b".indexOf("b", -1)')).toBe("index -1 out of bounds [0, 3)");
  });
});

describe("timestamps as the CEL spec and cel-go have them, whatever the server's time zone (cel-es 0.6.1 read the wall clock in it)", () => {
  it("read the accessors in UTC, at a fixed offset or in an IANA zone, years 1 to 99 too", () => {
    expect(valueOf("timestamp('2024-03-10T02:30:00Z').getHours()")).toBe(2);
    expect(valueOf("timestamp('2024-03-10T02:30:00Z').getHours('UTC')")).toBe(2);
    expect(valueOf("timestamp('2024-03-10T02:30:00Z').getHours('')")).toBe(2); // cel-go: LoadLocation("") is UTC
    expect(valueOf("timestamp('2024-03-10T07:30:00Z').getHours('America/New_York')")).toBe(3); // DST began at 2:00 there
    expect(valueOf("timestamp('2024-03-10T06:30:00Z').getHours('America/New_York')")).toBe(1);
    expect(valueOf("timestamp('2024-03-10T01:30:00Z').getHours('-05:30')")).toBe(20);
    expect(valueOf("timestamp('2024-03-10T01:30:00Z').getDayOfMonth('-05:30')")).toBe(8); // 0-based: the 9th
    expect(valueOf("timestamp('2024-07-01T00:30:00Z').getDayOfYear()")).toBe(182);
    expect(valueOf("timestamp('2024-01-01T00:00:00Z').getDayOfYear()")).toBe(0);
    expect(valueOf("timestamp('2024-12-31T23:59:59.999Z').getMilliseconds()")).toBe(999);
    expect(valueOf("timestamp('0050-06-01T12:00:00Z').getFullYear()")).toBe(50);
    expect(valueOf("timestamp('0050-06-01T12:00:00Z').getDayOfWeek()")).toBe(3);
    expect(valueOf("timestamp('0001-01-01T00:00:00Z').getFullYear('+01:00')")).toBe(1);
    expect(valueOf("timestamp('0001-01-01T00:00:00Z').getFullYear('-05:00')")).toBe(0); // 1 BC is year 0, as in cel-go
    expect(valueOf("timestamp('0001-01-01T00:00:00Z').getFullYear('America/New_York')")).toBe(0); // Intl's 1 BC was read as 1
    expect(errorOf("timestamp('2024-01-01T00:00:00Z').getHours('Mars/Olympus')")).toBe('unknown time zone "Mars/Olympus"');
  });

  it("gives the same answers in a process whose TZ is America/New_York", async () => {
    const { execFileSync } = await import("node:child_process");
    const script = `import { compileExpression } from "./src/automations/compiled-expression.ts";
      const r = ["timestamp('2024-03-10T02:30:00Z').getHours()", "timestamp('2024-07-01T00:30:00Z').getDayOfYear()", "timestamp('2024-03-10T01:30:00Z').getHours('Europe/Berlin')"].map((e) => String(compileExpression(e).evaluate(new Map())));
      console.log(r.join(","));`;
    const out = execFileSync(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], { env: { ...process.env, TZ: "America/New_York" } });
    expect(out.toString().trim()).toBe("2,182,2");
  });

  it("refuses a date that does not exist (cel-es rolled 2024-02-30 over to March 1st, hour 24 to the next day)", () => {
    for (const text of ["2024-02-30T00:00:00Z", "2023-02-29T00:00:00Z", "2024-04-31T00:00:00Z", "2024-00-10T00:00:00Z"]) {
      expect(errorOf(`timestamp('${text}')`)).toBe(`Failed to parse timestamp: day out of range in "${text}"`);
    }
    expect(errorOf("timestamp('2024-01-01T24:00:00Z')")).toBe('Failed to parse timestamp: hour out of range in "2024-01-01T24:00:00Z"');
    expect(valueOf("string(timestamp('2024-02-29T23:59:59+01:00'))")).toBe("2024-02-29T22:59:59Z");
  });
});

describe("a list index that is no whole number", () => {
  it("is named so (cel-es said 'unsupported input undefined')", () => {
    const context = new StepContext({ l: [1, 2] });
    expect(() => evaluate("messageCel", "ctx.trigger.l[1.5]", new ProgramCache(), context)).toThrow(
      "messageCel: a list index is not a whole number (a list is indexed by an int, or a double or uint holding one, such as 1.0)",
    );
    expect(evaluate("messageCel", "ctx.trigger.l[1.0]", new ProgramCache(), context)).toBe(2); // JSON numbers are doubles
  });
});

describe("map literals with a repeated key", () => {
  it("are an error when an int and a uint key have one value, as keys of one type are (cel-es kept both)", () => {
    expect(errorOf("{0: 1, 0u: 2}[0.0]")).toBe("Failed with repeated key: 0 (an int and a uint of one value are one key)");
    expect(valueOf("{0: 1, 1u: 2}[1]")).toBe(2);
  });
});

describe("strings ordered by code point (cel-es 0.6.1 compared UTF-16 units)", () => {
  it("puts a character beyond the BMP after U+FFFF, as cel-go does", () => {
    expect(valueOf("'😀' > '\\uffff'")).toBe(true);
    expect(valueOf("'\\uffff' < '😀' && '😀' >= '\\ue000' && !('😀' <= '\\uffff')")).toBe(true);
    expect(valueOf("'a' < 'b' && 'ab' > 'a' && 'a' <= 'a'")).toBe(true);
  });
});

describe("has() as the CEL spec has it: of a map's key or a message's field, an error on anything else", () => {
  it("tests a key of a map, the trigger's too", () => {
    expect(valueOf("has({'a': 1, 'b': 2}.a) && !has({}.a)")).toBe(true);
    expect(valueOf("[has(ctx.trigger.user.email), has(ctx.trigger.user.phone), has(ctx.trigger.x)]", { user: { email: "a@b" } })).toEqual([true, false, false]);
    expect(valueOf("has(google.protobuf.Duration{seconds: 5}.seconds)")).toBe(true);
  });

  it.each([
    ["has(ctx.trigger.user.email)", "ctx.trigger.user is a string"],
    ["has(ctx.trigger.list.email)", "ctx.trigger.list is a list(dyn)"],
    ["has(ctx.trigger.none.email)", "ctx.trigger.none is null"],
    ["has('abc'.size)", '"abc" is a string'],
  ])("%s is an error when the operand is no map (cel-es answered false)", (source, what) => {
    expect(errorOf(source, { user: "ada", list: [1], none: null })).toBe(`has() tests a field of a map or a message: ${what}`);
  });

  it("tests a field of a macro's result, and a read of one names what it can (cel-es could not write a macro back: compiling either threw, a 500 on save)", () => {
    const trigger = { lm: [{ x: 1 }] };
    expect(valueOf("has(ctx.trigger.lm.filter(i, true)[0].x) && has([1].map(x, {'a': x})[0].a)", trigger)).toBe(true);
    expect(valueOf("ctx.trigger.lm.map(i, i)[0].x", trigger)).toBe(1);
    expect(errorOf("has(ctx.trigger.lm.map(i, i.x)[0].y)", trigger)).toBe("has() tests a field of a map or a message: its operand is a double");
  });

  it("finds a key whose value is null, as `in` does (cel-es's maps read it as absent: has() and `in` were false while size() counted it)", () => {
    expect(valueOf("[has(ctx.trigger.a), 'a' in ctx.trigger, has({'k': null}.k), 'k' in {'k': null}, 'b' in ctx.trigger, size(ctx.trigger)]", { a: null })).toEqual([
      true,
      true,
      true,
      true,
      false,
      1,
    ]);
  });

  it("is absorbed by || and && as other errors are", () => {
    expect(valueOf("has(ctx.trigger.user.email) || true", { user: "ada" })).toBe(true);
    expect(valueOf("false && has(ctx.trigger.user.email)", { user: "ada" })).toBe(false);
  });
});

describe("outputs with half a character", () => {
  it("fail their step: a lone surrogate in a string or a map key (no UTF-8 can carry it; gRPC clients read U+FFFD)", () => {
    expect(() => celToJson("a\ud800")).toThrow(new OutputError("the output's string holds half a character (a lone UTF-16 surrogate), which no UTF-8 can carry"));
    expect(() => valueOf("ctx.trigger", { ["k\udc00"]: 1 })).toThrow(new OutputError("the output's map key holds half a character (a lone UTF-16 surrogate), which no UTF-8 can carry"));
    expect(celToJson("a\ud83d\ude00")).toBe("a😀");
  });
});

describe("the CEL source as the spec reads it (cel-es 0.6.1's parser differs)", () => {
  it("takes a comment anywhere white space may be: at the end without a line break, several in a row (cel-es refused both)", () => {
    expect(valueOf("1 + 2 // three")).toBe(3);
    expect(valueOf("1 +\n// one\n// two\n2")).toBe(3);
    expect(valueOf("[1, // one\r\n 2 // two\n]")).toEqual([1, 2]);
    // Inside a literal, // is text; a comment's quotes and brackets are not the expression's.
    expect(valueOf(String.raw`'a // b' + "//" + r'\' // it's ((( "`)).toBe("a // b//\\");
    expect(valueOf("'''x // y''' // z")).toBe("x // y");
  });

  it("keeps every position: an error after comments is placed where it is in the source", () => {
    expect(() => compileExpression("// one\n// two\n1 2")).toThrow(expect.objectContaining({ name: "CelSyntaxError", offset: 16 }));
    expect(() => compileExpression("[1, // one\n 2 3]")).toThrow(expect.objectContaining({ name: "CelSyntaxError", offset: 14 }));
  });

  it.each([
    ["9223372036854775808", "integer literal 9223372036854775808 is out of range (int: -2^63 to 2^63-1)", 0],
    ["-9223372036854775809", "integer literal -9223372036854775809 is out of range (int: -2^63 to 2^63-1)", 0],
    ["18446744073709551616u", "integer literal 18446744073709551616u is out of range (uint: 0 to 2^64-1)", 0],
    ["[1, 0x10000000000000000]", "integer literal 18446744073709551616 is out of range (int: -2^63 to 2^63-1)", 4],
  ])("refuses %s as a syntax error at its position (cel-es kept it as a bigint of any size)", (source, message, offset) => {
    expect(() => compileExpression(source)).toThrow(expect.objectContaining({ name: "CelSyntaxError", message, offset }));
  });

  it("refuses a double literal beyond a double's range (cel-es kept it as Infinity)", () => {
    for (const source of ["1e400", "1.99e90000009", "-2e308"]) {
      expect(() => compileExpression(source), source).toThrow(expect.objectContaining({ name: "CelSyntaxError", message: "double literal is out of range (a double: about ±1.8e308)" }));
    }
    expect(valueOf("1.7e308 > 0.0")).toBe(true);
  });

  const escapesNamed = String.raw`(CEL's are \\ \? \" \' \` \a \b \f \n \r \t \v, \xHH, \ooo, \uHHHH and \UHHHHHHHH)`;
  it.each([
    [String.raw`'\q'`, String.raw`invalid escape \q ` + escapesNamed, 1],
    [String.raw`'ok' + '''\8'''`, String.raw`invalid escape \8 ` + escapesNamed, 10],
    [String.raw`"\400"`, String.raw`invalid escape \400: an octal escape is three digits, \000 to \377`, 1],
    [String.raw`'\u12'`, String.raw`invalid escape \u12: \u takes 4 hexadecimal digits`, 1],
    [String.raw`'\x4'`, String.raw`invalid escape \x4: \x takes 2 hexadecimal digits`, 1],
    [String.raw`'\U00110000'`, String.raw`invalid escape \U00110000: no Unicode code point is that large`, 1],
    [String.raw`b'\u00ff'`, String.raw`invalid escape \u00ff: \u is for strings, not bytes (use \x and two hexadecimal digits, or three octal digits)`, 2],
  ])("refuses %s, an escape the spec does not define, at its position (cel-es kept \\q and \\400 as written, read \\u12 as U+0012)", (source, message, offset) => {
    expect(() => compileExpression(source)).toThrow(expect.objectContaining({ name: "CelSyntaxError", message, offset }));
  });

  it("reads every escape the spec defines, and none in a raw literal or a comment", () => {
    expect(valueOf(String.raw`"\\\?\"\'\`\a\b\f\n\r\t\v"`)).toBe("\\?\"'`\x07\b\f\n\r\t\v");
    expect(valueOf(String.raw`'\x41\X42\101\u00e9\U0001F600\377'`)).toBe("ABAé😀ÿ");
    expect(valueOf(String.raw`string(b'\xff\377\000'.size()) + r'\q' + R"\400" // \q`)).toBe(String.raw`3\q\400`);
  });

  it("takes the extremes of int and uint", () => {
    expect(valueOf("string(-9223372036854775808) + ' ' + string(9223372036854775807) + ' ' + string(18446744073709551615u)")).toBe(
      "-9223372036854775808 9223372036854775807 18446744073709551615",
    );
  });
});

describe("outputs of protobuf messages CEL builds", () => {
  it.each([
    ["google.protobuf.Duration{nanos: 2000000000}", "the output's google.protobuf.Duration cannot be written as JSON: a field is out of range"],
    ["google.protobuf.Duration{seconds: 315576000001}", "the output's google.protobuf.Duration cannot be written as JSON: cannot encode message google.protobuf.Duration to JSON: value out of range"],
    ["google.protobuf.Timestamp{seconds: 253402300800}", expect.stringMatching(/^the output's google.protobuf.Timestamp cannot be written as JSON: .*9999-12-31/)],
  ])("fail their step when JSON cannot hold them, %s (an internal error before, which logged a stack)", (source, message) => {
    expect(() => valueOf(source)).toThrow(expect.objectContaining({ message }));
    expect(() => valueOf(source)).toThrow(OutputError);
  });

  it("are their JSON form when it can", () => {
    expect(valueOf("google.protobuf.Duration{seconds: 5, nanos: 500000000}")).toBe("5.500s");
  });
});

describe("the messages of a failed read (cel-es says 'index 5 out of bounds [0, -1)' for every index, and 'field not found' on a string)", () => {
  const failureOf = (source: string): string => {
    const context = new StepContext({ l: [1, 2], m: { "1": 2 }, x: "str", n: null, u: { v: 1 } });
    try {
      evaluate("messageCel", source, new ProgramCache(), context);
      return "no failure";
    } catch (e) {
      return (e as Error).message;
    }
  };

  it.each([
    ["ctx.trigger.l[5]", "messageCel: ctx.trigger.l[5]: index 5 is out of range (a list of 2 elements)"],
    ["ctx.trigger.l[0] + ctx.trigger.l[9]", "messageCel: ctx.trigger.l[9]: index 9 is out of range (a list of 2 elements)"],
    ["ctx.trigger['l'][7]", 'messageCel: ctx.trigger["l"][7]: index 7 is out of range (a list of 2 elements)'],
    ["ctx.trigger.m[1]", 'messageCel: ctx.trigger.m[1]: no key 1 (a JSON object\'s keys are strings: write ctx.trigger.m["1"])'],
    // Told to write {"a": 1.0}["1"], which fails as well.
    ["{'a': 1}[1]", 'messageCel: {"a": 1}[1]: no key 1'],
    ["'abc'[0]", 'messageCel: "abc"[0] cannot be read: "abc" is a string, which has no index'],
    ["ctx.trigger.x.y", "messageCel: ctx.trigger.x.y cannot be read: ctx.trigger.x is a string, not a map"],
    ["ctx.trigger.n.w", "messageCel: ctx.trigger.n.w cannot be read: ctx.trigger.n is null, not a map"],
    ["ctx.trigger.u.w", 'messageCel: ctx.trigger.u.w is missing (no field "w")'],
    // Inside a comprehension the operand does not stand alone: the message stays general.
    ["ctx.trigger.l.map(e, [e][3])", "messageCel: index 3 is out of range, or not a key"],
  ])("%s says which read failed and why", (source, message) => {
    expect(failureOf(source)).toBe(message);
  });
});
