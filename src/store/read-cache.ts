import type { Database } from "./database.js";

/**
 * Results of a repository's hot lookups, kept in memory between writes. Every repository that
 * writes the rows behind it clears it on each such write (for a client's principal, the clients'
 * and the user roles' repositories share one); a lookup inside a transaction neither reads nor
 * fills it (the transaction may see its own uncommitted writes, and may roll back). Correct
 * because one process serves a database (README "Operating it"): nothing else writes these rows
 * behind its back. Bounded: when full it starts over.
 */
export class ReadCache<K, V> {
  private readonly entries = new Map<K, V>();

  constructor(
    private readonly db: Database,
    private readonly maxEntries = 10_000,
  ) {}

  /** The cached value, or `load()`'s (cached when defined and outside a transaction). */
  get(key: K, load: () => V | undefined): V | undefined {
    if (this.db.inTransaction) return load();
    const cached = this.entries.get(key);
    if (cached !== undefined) return cached;
    const value = load();
    if (value !== undefined) {
      if (this.entries.size >= this.maxEntries) this.entries.clear();
      this.entries.set(key, value);
    }
    return value;
  }

  clear(): void {
    this.entries.clear();
  }
}
