import { compileExpression, type CompiledExpression } from "./compiled-expression.js";

/**
 * Compiled expressions by source text, so a run never parses again. A program depends only on
 * its source (the environment is fixed), so every automation and version shares one entry.
 * Least recently used entries go first once `capacity` is reached.
 */
export class ProgramCache {
  private readonly entries = new Map<string, CompiledExpression>();

  constructor(private readonly capacity = 10_000) {}

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
    if (this.entries.size > this.capacity) {
      const oldest = this.entries.keys().next();
      if (oldest.done !== true) this.entries.delete(oldest.value);
    }
    return compiled;
  }

  get size(): number {
    return this.entries.size;
  }
}
