import { compileExpression, type CompiledExpression } from "./compiled-expression.js";

/**
 * Compiled expressions by source text, so a run never parses again. A program depends only on
 * its source (the environment is fixed), so every automation and version shares one entry.
 * Least recently used entries go first once the cache holds `capacity` entries or
 * `capacityChars` characters of source: a compiled program keeps some 150 bytes a character of
 * a dense expression (a 4 KB list literal: 630 KiB), and 10,000 entries of those exhausted the heap.
 */
export class ProgramCache {
  private readonly entries = new Map<string, CompiledExpression>();
  private chars = 0;

  constructor(
    private readonly capacity = 10_000,
    private readonly capacityChars = 256 * 1024,
  ) {}

  /** The compiled expression; throws CelSyntaxError for a source that does not parse. */
  get(source: string): CompiledExpression {
    const cached = this.entries.get(source);
    if (cached !== undefined) {
      this.entries.delete(source);
      this.entries.set(source, cached);
      return cached;
    }
    const compiled = compileExpression(source);
    this.entries.set(source, compiled);
    this.chars += source.length;
    while (this.entries.size > 1 && (this.entries.size > this.capacity || this.chars > this.capacityChars)) {
      const oldest = this.entries.keys().next();
      if (oldest.done === true) break;
      this.entries.delete(oldest.value);
      this.chars -= oldest.value.length;
    }
    return compiled;
  }

  get size(): number {
    return this.entries.size;
  }

  /** Characters of source held. */
  get sourceChars(): number {
    return this.chars;
  }
}
