import type { Store } from "../store/store.js";

interface Waiting {
  work: () => unknown;
  resolve: (value: unknown) => void;
  reject: (error: unknown) => void;
}

type Outcome = { ok: true; value: unknown } | { ok: false; error: unknown };

/** A unit threw: the whole group was rolled back (to be run again, unit by unit). */
class UnitFailed extends Error {}

export interface GroupCommitOptions {
  /** A group this large commits at once, without waiting for the end of the turn. */
  maxGroup?: number;
  /** The least time between two commits of a small group (ms); 0 commits at the end of every turn. */
  minIntervalMs?: number;
  /** A group of at least this many units commits at the end of its turn, however recent the last commit. */
  smallGroup?: number;
}

/**
 * At 4,000-4,800 webhooks a second (half the maximum on the development VM), 1 ms between the
 * commits of small groups took about 8-15% off the CPU a webhook costs, and the p99 latency down
 * in most phases, for about 1 ms more at the median (bench/README.md).
 */
const defaultMinIntervalMs = 1;
/**
 * Holding every group for the interval cost throughput at 256 connections (the held requests are
 * a share of all in flight); a group of 8 or more already shares its commit well.
 */
const defaultSmallGroup = 8;

/**
 * Group commit: units of work handed in together run in ONE transaction, committed once, instead
 * of one commit each. A commit writes every page the transaction dirtied to the WAL, and
 * concurrent requests dirty the same pages (the right-most leaves of the time-ordered indexes),
 * so a group costs little more than one request (see bench/RESULTS.md).
 *
 * A group is the units handed in until the check phase after the event-loop turn's I/O
 * (setImmediate). Under full load a turn holds many requests; at moderate load (a few thousand
 * webhooks a second) it holds one or two, and each would pay a commit's fixed cost nearly alone.
 * So a small group (fewer than `smallGroup` units) that comes within `minIntervalMs` of the last
 * commit waits for the rest of that interval, gathering the units of the turns in between. A
 * group after a quiet spell, and a group that is already large, commit at the end of their turn.
 *
 * Units run one after the other in the group's transaction, each seeing the writes of the units
 * before it. A unit that throws has its own writes rolled back and its promise rejects; the others
 * are unaffected: the group is then rolled back and run again with each unit in a savepoint (a
 * savepoint per unit on every group would cost about a third of a unit, and units rarely throw).
 * So a unit's work must only read and write the store (it may run twice, and only the last run
 * counts). Every promise settles only after the group's COMMIT returned, so nothing is
 * acknowledged that is not durable; if the COMMIT fails, every unit of the group rejects and none
 * of them is recorded.
 */
export class GroupCommit {
  private waiting: Waiting[] = [];
  private scheduled = false;
  /** performance.now() of the last commit. */
  private lastCommitAt = -Infinity;
  private readonly maxGroup: number;
  private readonly minIntervalMs: number;
  private readonly smallGroup: number;

  constructor(
    private readonly store: Store,
    options: GroupCommitOptions = {},
  ) {
    this.maxGroup = options.maxGroup ?? 256;
    this.minIntervalMs = options.minIntervalMs ?? defaultMinIntervalMs;
    this.smallGroup = options.smallGroup ?? defaultSmallGroup;
  }

  run<T>(work: () => T): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.waiting.push({ work, resolve: resolve as (value: unknown) => void, reject });
      if (this.waiting.length >= this.maxGroup) {
        this.commit();
      } else if (!this.scheduled) {
        this.scheduled = true;
        setImmediate(this.endOfTurn);
      }
    });
  }

  /** After the turn's I/O: commit, unless the group is small and the last commit recent. */
  private readonly endOfTurn = (): void => {
    const wait = this.lastCommitAt + this.minIntervalMs - performance.now();
    if (wait > 0 && this.waiting.length < this.smallGroup) {
      setTimeout(this.fire, wait);
      return;
    }
    this.fire();
  };

  private readonly fire = (): void => {
    this.scheduled = false;
    this.commit();
  };

  private commit(): void {
    const group = this.waiting;
    this.waiting = [];
    if (group.length === 0) return;
    this.lastCommitAt = performance.now();
    let outcomes: Outcome[];
    try {
      outcomes = this.runAll(group) ?? this.runEachInSavepoint(group);
    } catch (error) {
      for (const unit of group) unit.reject(error);
      return;
    }
    group.forEach((unit, i) => {
      const outcome = outcomes[i];
      if (outcome?.ok === true) unit.resolve(outcome.value);
      else unit.reject(outcome?.error);
    });
  }

  /** The common case: every unit in one transaction. Undefined (nothing recorded) when a unit threw. */
  private runAll(group: readonly Waiting[]): Outcome[] | undefined {
    try {
      return this.store.transaction(() =>
        group.map((unit): Outcome => {
          try {
            return { ok: true, value: unit.work() };
          } catch (error) {
            throw new UnitFailed("a unit of the group failed", { cause: error });
          }
        }),
      );
    } catch (error) {
      if (error instanceof UnitFailed) return undefined;
      throw error;
    }
  }

  /** After a unit threw: each unit in a savepoint, so only the failing ones are rolled back. */
  private runEachInSavepoint(group: readonly Waiting[]): Outcome[] {
    const { store } = this;
    return store.transaction(() =>
      group.map((unit): Outcome => {
        try {
          return { ok: true, value: store.transaction(unit.work) }; // nested: a savepoint
        } catch (error) {
          // Some errors (SQLITE_FULL, SQLITE_IOERR, SQLITE_BUSY, SQLITE_NOMEM) make SQLite roll the
          // whole transaction back: then nothing of the group is recorded, and every unit fails
          // with that error (a store failure, which the server answers with 503).
          if (!store.db.inTransaction) throw error;
          return { ok: false, error };
        }
      }),
    );
  }
}
