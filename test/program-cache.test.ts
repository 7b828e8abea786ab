import { describe, expect, it } from "vitest";
import { ProgramCache } from "../src/automations/program-cache.js";

/**
 * Compiled programs are kept by source text. A dense expression's program holds some 150 bytes a
 * character of source, so a bound on entries alone let 28 saves of 4 KB list literals (57 steps
 * each) take the heap past its limit: the cache is bounded by source characters too.
 */
describe("the program cache", () => {
  const literal = (i: number) => `[${i}, ${Array(1_999).fill("1").join(", ")}]`; // about 6 KB

  it("keeps at most its capacity of source characters, dropping the least recently used first", () => {
    const cache = new ProgramCache(10_000, 20_000);
    const first = cache.get(literal(0));
    cache.get(literal(1));
    cache.get(literal(2));
    expect(cache.get(literal(0))).toBe(first); // used again: now the most recent
    cache.get(literal(3));
    expect(cache.size).toBe(3);
    expect(cache.sourceChars).toBeLessThanOrEqual(20_000);
    expect(cache.get(literal(0))).toBe(first); // kept; literal(1) went
    const again = cache.get(literal(1));
    expect(again.source).toBe(literal(1));
  });

  it("keeps one entry larger than the whole capacity (the expression being compiled is always returned and cached)", () => {
    const cache = new ProgramCache(10_000, 100);
    const compiled = cache.get(literal(0));
    expect(cache.get(literal(0))).toBe(compiled);
    expect(cache.size).toBe(1);
  });

  it("is bounded by entries as well", () => {
    const cache = new ProgramCache(2);
    for (const source of ["1", "2", "3"]) cache.get(source);
    expect(cache.size).toBe(2);
    expect(cache.sourceChars).toBe(2);
  });
});
