import { createRequire } from "node:module";
import { Worker } from "node:worker_threads";
import type { Database } from "./database.js";

export interface WalCheckpointerOptions {
  /** Told when the thread fails; the connection then checkpoints every 1,000 pages again. */
  onError?: (error: Error) => void;
  /**
   * Told when a checkpoint fails (the disk full, an I/O error): the thread goes on, trying again
   * every `retryIntervalMs` (and the connection checkpoints every 1,000 pages meanwhile), and
   * `onCheckpointsResumed` says when one succeeds again.
   */
  onCheckpointFailed?: (error: Error) => void;
  onCheckpointsResumed?: () => void;
  /** Between tries while checkpoints fail (milliseconds; default 1,000). */
  retryIntervalMs?: number;
  /** Between checkpoints while new frames keep coming (the pause doubles while none do). */
  busyIntervalMs?: number;
  /** The longest pause, reached after a while with no new frames (milliseconds). */
  idleIntervalMs?: number;
  /** The request connection's own automatic checkpoint, kept as a backstop (pages). */
  backstopPages?: number;
}

/**
 * Checkpoints the WAL from a thread of its own, so the request thread seldom copies pages into
 * the database file or waits for a checkpoint's two fsyncs. SQLite's automatic checkpoint runs
 * inside the COMMIT that takes the WAL past 1,000 pages: under webhook load that was 18 times a
 * second, each an event-loop stall of 6-9 ms, which set the p99 latency (bench/RESULTS.md).
 *
 * Here a second connection, in a worker thread, runs a PASSIVE checkpoint every `busyIntervalMs`
 * while the WAL grows: PASSIVE never blocks a writer (it takes only the checkpoint lock), and when
 * it has copied every frame the next write transaction starts the WAL over. Under sustained writes
 * it seldom finds a moment with every frame copied, so the request connection keeps its own
 * automatic checkpoint at `backstopPages` (10,000: 40 MB): by then the thread has copied nearly
 * every frame, so the backstop has little to copy, and it restarts the WAL. Crash-safe at any
 * point: a checkpoint is SQLite's own atomic operation. A checkpoint that fails is tried again a
 * second later; if the thread dies, the connection goes back to SQLite's default of 1,000 pages.
 *
 * The interval is short on purpose: each checkpoint fsyncs the WAL, and a commit that lands during
 * that fsync waits for it, so many small fsyncs stall requests less than a few large ones. At
 * 2,700 webhooks/s on the development VM the p99 was 17-19 ms with 20 ms, 14 ms with 10 ms and
 * 9-11 ms with 5 ms (2 ms was no better and cost more CPU).
 *
 * While no frames come, the pause doubles up to `idleIntervalMs` (20 ms): a checkpoint of an
 * unchanged WAL costs next to nothing. The pause once grew to 1 s; then the first second of load
 * after an idle spell went without checkpoints, the WAL grew past the backstop, and the request
 * thread checkpointed it itself: at 4,000 webhooks/s after 8 s idle, p99 latencies of 0.2-0.7 s
 * (event-loop stalls of 42-164 ms) against 6-37 ms with 20 ms.
 */
export class WalCheckpointer {
  private readonly worker: Worker;
  private stopping = false;

  constructor(db: Database, options: WalCheckpointerOptions = {}) {
    const backstopPages = options.backstopPages ?? 10_000;
    db.pragma(`wal_autocheckpoint = ${backstopPages}`);
    const workerData = {
      path: db.name,
      betterSqlite3: createRequire(import.meta.url).resolve("better-sqlite3"),
      busyIntervalMs: options.busyIntervalMs ?? 5,
      idleIntervalMs: options.idleIntervalMs ?? 20,
      retryIntervalMs: options.retryIntervalMs ?? 1_000,
    };
    this.worker = new Worker(threadSource, { eval: true, workerData });
    this.worker.unref();
    // While the thread's checkpoints fail, the connection checkpoints every 1,000 pages again, as
    // when the thread is gone: a failure that lasts (a connection broken for good) must not leave
    // the WAL to grow to the backstop between checkpoints.
    this.worker.on("message", (report: CheckpointReport) => {
      if (report.failed === undefined) {
        if (db.open) db.pragma(`wal_autocheckpoint = ${backstopPages}`);
        options.onCheckpointsResumed?.();
      } else {
        if (db.open) db.pragma("wal_autocheckpoint = 1000");
        options.onCheckpointFailed?.(Object.assign(new Error(report.failed.message), { code: report.failed.code }));
      }
    });
    const fail = (error: Error) => {
      if (this.stopping) return;
      this.stopping = true;
      if (db.open) db.pragma("wal_autocheckpoint = 1000");
      options.onError?.(error);
    };
    this.worker.on("error", fail);
    this.worker.on("exit", (code) => fail(new Error(`the WAL checkpoint thread exited with code ${code}`)));
  }

  /** Stops the thread (it closes its connection); resolves once it has exited. */
  stop(): Promise<void> {
    if (this.stopping) return Promise.resolve();
    this.stopping = true;
    const exited = new Promise<void>((resolve) => this.worker.once("exit", () => resolve()));
    // Unreferenced, the thread would not keep the process alive until it exits, and whoever
    // awaits this (graceful shutdown) would never resume.
    this.worker.ref();
    this.worker.postMessage("stop");
    return exited;
  }
}

/** What the thread tells: a checkpoint failed (the first of a spell), or they succeed again. */
interface CheckpointReport {
  failed?: { code: string; message: string };
}

/**
 * The thread (CommonJS, evaluated): its own connection, a PASSIVE checkpoint per tick, closed on
 * any message. A checkpoint that fails (the disk full: the database file cannot grow) is tried
 * again every `retryIntervalMs`, not the end of the thread: one full disk once turned background
 * checkpoints off until the next restart.
 */
const threadSource = `
const { workerData, parentPort } = require("node:worker_threads");
const Database = require(workerData.betterSqlite3);
const db = new Database(workerData.path, { fileMustExist: true });
db.pragma("synchronous = NORMAL");
let pause = workerData.busyIntervalMs;
let lastLog = -1;
let failing = false;
let timer;
function tick() {
  try {
    const [{ log }] = db.pragma("wal_checkpoint(PASSIVE)");
    if (failing) parentPort.postMessage({});
    failing = false;
    pause = log !== lastLog ? workerData.busyIntervalMs : Math.min(pause * 2, workerData.idleIntervalMs);
    lastLog = log;
  } catch (error) {
    if (!failing) parentPort.postMessage({ failed: { code: String(error.code ?? ""), message: String(error.message ?? error) } });
    failing = true;
    pause = workerData.retryIntervalMs;
  }
  timer = setTimeout(tick, pause);
}
timer = setTimeout(tick, pause);
parentPort.on("message", () => {
  clearTimeout(timer);
  db.close();
  parentPort.close();
});
`;
