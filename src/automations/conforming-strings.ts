import { celFunc, celList, celMethod, CelScalar, listType } from "@bufbuild/cel";

/**
 * cel-es (0.6.1) string-extension methods that counted UTF-16 code units where the CEL spec and
 * cel-go count code points (runes), replaced by the environment's own as the casts are
 * (conforming-casts.ts). With a character beyond the BMP (an emoji, many CJK) before it:
 * `"a😀b".indexOf("b")` was 3 (cel-go: 2), `"a😀b".substring(0, size("a😀b"))` lost the `b`
 * (`size` counts code points), `charAt(1)` and `split("")` cut the emoji in halves, which no
 * UTF-8 can carry. And `split(sep, n)` kept only the first n pieces, where cel-go (Go's
 * strings.SplitN) ends with the rest of the string: `"a,b,c".split(",", 2)` is `["a", "b,c"]`.
 * The bounds are cel-es's, in code points. And strings order by code point, not UTF-16 unit.
 */
export const conformingStrings = [
  celMethod("charAt", CelScalar.STRING, [CelScalar.INT], CelScalar.STRING, function (this: string, index) {
    const points = Array.from(this);
    const i = inBounds(index, points.length, points.length);
    return points[i] ?? "";
  }),
  celMethod("indexOf", CelScalar.STRING, [CelScalar.STRING], CelScalar.INT, function (this: string, sub) {
    return pointIndex(this, this.indexOf(sub));
  }),
  celMethod("indexOf", CelScalar.STRING, [CelScalar.STRING, CelScalar.INT], CelScalar.INT, function (this: string, sub, start) {
    return pointIndex(this, this.indexOf(sub, unitOffset(this, start)));
  }),
  celMethod("lastIndexOf", CelScalar.STRING, [CelScalar.STRING], CelScalar.INT, function (this: string, sub) {
    return pointIndex(this, this.lastIndexOf(sub));
  }),
  celMethod("lastIndexOf", CelScalar.STRING, [CelScalar.STRING, CelScalar.INT], CelScalar.INT, function (this: string, sub, start) {
    return pointIndex(this, this.lastIndexOf(sub, unitOffset(this, start)));
  }),
  celMethod("substring", CelScalar.STRING, [CelScalar.INT], CelScalar.STRING, function (this: string, start) {
    const points = Array.from(this);
    return points.slice(inBounds(start, points.length, points.length)).join("");
  }),
  celMethod("substring", CelScalar.STRING, [CelScalar.INT, CelScalar.INT], CelScalar.STRING, function (this: string, start, end) {
    const points = Array.from(this);
    const i = inBounds(start, points.length, points.length);
    const j = inBounds(end, points.length, points.length);
    if (i > j) throw new Error("invalid argument to function substring: start > end");
    return points.slice(i, j).join("");
  }),
  celMethod("split", CelScalar.STRING, [CelScalar.STRING], listType(CelScalar.DYN), function (this: string, separator) {
    return celList(splitN(this, separator, -1));
  }),
  celMethod("split", CelScalar.STRING, [CelScalar.STRING, CelScalar.INT], listType(CelScalar.DYN), function (this: string, separator, n) {
    return celList(splitN(this, separator, n < -1n ? -1 : Number(n > 2n ** 31n ? 2n ** 31n : n)));
  }),
  // Strings order by code point (the spec; cel-go compares UTF-8 bytes, the same order), where
  // JavaScript's < compares UTF-16 units: '😀' > '\uffff' was false.
  celFunc("_<_", [CelScalar.STRING, CelScalar.STRING], CelScalar.BOOL, (l, r) => compareCodePoints(l, r) < 0),
  celFunc("_<=_", [CelScalar.STRING, CelScalar.STRING], CelScalar.BOOL, (l, r) => compareCodePoints(l, r) <= 0),
  celFunc("_>_", [CelScalar.STRING, CelScalar.STRING], CelScalar.BOOL, (l, r) => compareCodePoints(l, r) > 0),
  celFunc("_>=_", [CelScalar.STRING, CelScalar.STRING], CelScalar.BOOL, (l, r) => compareCodePoints(l, r) >= 0),
];

/** Negative, zero or positive as `left` orders before, with or after `right` by code points. */
function compareCodePoints(left: string, right: string): number {
  // UTF-16 order is code-point order but where a surrogate meets a unit from U+E000 to U+FFFF.
  if (!surrogate.test(left) && !surrogate.test(right)) return left < right ? -1 : left > right ? 1 : 0;
  const a = Array.from(left, (c) => c.codePointAt(0) ?? 0);
  const b = Array.from(right, (c) => c.codePointAt(0) ?? 0);
  for (let i = 0; i < Math.min(a.length, b.length); i++) {
    if (a[i] !== b[i]) return (a[i] ?? 0) - (b[i] ?? 0);
  }
  return a.length - b.length;
}

const surrogate = /[\uD800-\uDFFF]/;

/** `index` as a number, when 0 <= index <= max (else cel-es's error, naming the length). */
function inBounds(index: bigint, max: number, length: number): number {
  if (index < 0n || index > BigInt(max)) throw new Error(`index ${index} out of bounds [0, ${length})`);
  return Number(index);
}

/** The UTF-16 offset of code point `start` of `text`, which must be one of them (cel-es's bounds). */
function unitOffset(text: string, start: bigint): number {
  const points = Array.from(text);
  const i = inBounds(start, points.length - 1, points.length);
  return points.slice(0, i).join("").length;
}

/** The code-point index of a UTF-16 index found in `text` (-1 stays -1). */
function pointIndex(text: string, unitIndex: number): bigint {
  return unitIndex < 0 ? -1n : BigInt(Array.from(text.slice(0, unitIndex)).length);
}

/**
 * Go's strings.SplitN: n < 0 all the pieces, 0 none, else at most n, the last one the rest of the
 * string. An empty separator splits between code points.
 */
function splitN(text: string, separator: string, n: number): string[] {
  if (n === 0) return [];
  const pieces = separator === "" ? Array.from(text) : text.split(separator);
  if (n < 0 || pieces.length <= n) return pieces;
  return [...pieces.slice(0, n - 1), pieces.slice(n - 1).join(separator)];
}
