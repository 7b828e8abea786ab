/**
 * The store's share of an accepted webhook (issue 7): what accessd writes for each one, timed on
 * the server's own classes over a SQLite file, without HTTP. The baseline from the same run is the
 * reference receiver's write (bench/support/reference-receiver.ts): one INSERT of the event id, in
 * the same groups, on the same file system.
 *
 * - acceptance: EventAcceptance through the real GroupCommit and DeliveryLog, in groups of 11
 *   (the usual group with 16 senders): the event record, the PENDING execution and the
 *   delivery-log row, one COMMIT a group;
 * - worker: ExecutionRunner batches with the production limits after every 5 groups (about what
 *   its 10 ms gather collects at 5,000 webhooks/s): claim, the log step and its record, the
 *   execution's end, one COMMIT a batch.
 *
 * Also the WAL frames (pages) each part writes per webhook, from the WAL's growth with automatic
 * checkpoints off (a COMMIT's cost is mostly its frames), and the acceptance's frames by table,
 * from the page numbers in the frame headers. Run with `npx tsx bench/store-webhook.ts`.
 */
import { randomUUID } from "node:crypto";
import { closeSync, createWriteStream, mkdtempSync, openSync, readSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import { ExecutionRunner } from "../src/automations/execution-runner.js";
import { enqueueExecution, ProgramCache } from "../src/automations/index.js";
import { systemClock } from "../src/clock.js";
import { createLogger } from "../src/logger.js";
import { newId } from "../src/store/ids.js";
import { Store } from "../src/store/store.js";
import { DeliveryLog } from "../src/webhooks/delivery-log.js";
import { EventAcceptance } from "../src/webhooks/event-acceptance.js";
import { GroupCommit } from "../src/webhooks/group-commit.js";
import { openReferenceStore } from "./support/reference-store.js";
import { progress, report, round } from "./support/report.js";

const groupSize = 11;
const groupsPerWorkerBatch = 5;
const groups = Number(process.argv[2] ?? 2000);
const webhooks = groups * groupSize;
/** A WAL frame: its 24-byte header and one page. */
const frameBytes = 24 + 4096;
const dir = mkdtempSync(join(tmpdir(), "accessd-bench-store-"));

function walBytes(path: string): number {
  try {
    return statSync(`${path}-wal`).size;
  } catch {
    return 0;
  }
}

/**
 * Which table each frame written between `ranges` of the WAL belongs to (its indexes included):
 * the page number in each frame's header, looked up in dbstat. Pages freed and reused during the
 * run count for their last owner.
 */
function framesByTable(db: Database.Database, walPath: string, ranges: readonly [number, number][]): Map<string, number> {
  const owners = new Map<number, string>();
  const tableOf = new Map<string, string>(
    (db.prepare("SELECT name, tbl_name FROM sqlite_schema").all() as { name: string; tbl_name: string }[]).map((r) => [r.name, r.tbl_name]),
  );
  for (const { name, pageno } of db.prepare("SELECT name, pageno FROM dbstat").all() as { name: string; pageno: number }[]) {
    owners.set(pageno, tableOf.get(name) ?? name);
  }
  const counts = new Map<string, number>();
  const fd = openSync(walPath, "r");
  const header = Buffer.alloc(4);
  try {
    for (const [start, end] of ranges) {
      for (let offset = start; offset + frameBytes <= end; offset += frameBytes) {
        readSync(fd, header, 0, 4, offset);
        const page = header.readUInt32BE(0);
        const owner = page === 1 ? "database header" : (owners.get(page) ?? "pages freed since");
        counts.set(owner, (counts.get(owner) ?? 0) + 1);
      }
    }
  } finally {
    closeSync(fd);
  }
  return counts;
}

/** accessd: the acceptance and the worker, each timed and its WAL growth measured. */
async function accessdPerWebhook() {
  const path = join(dir, "accessd.db");
  const store = Store.open(path);
  store.db.pragma("wal_autocheckpoint = 0");
  const automationId = newId();
  const listenerId = newId();
  store.transaction(() =>
    store.automations.insert({
      id: automationId,
      displayName: "bench",
      description: "",
      trigger: { kind: "manual" },
      steps: [{ name: "note", skipIfTrueCel: "", action: { kind: "log", messageCel: "ctx.trigger.user" } }],
      published: true,
      triggerEnabled: true,
      version: 1,
      createdAt: 0,
      updatedAt: 0,
    }),
  );
  const deliveries = new DeliveryLog(store.webhooks.deliveries, { clock: systemClock, refusalsPerSecond: 100 });
  const runner = new ExecutionRunner({
    store,
    clock: systemClock,
    log: createLogger("info", createWriteStream("/dev/null")),
    programs: new ProgramCache(),
  });
  // As in the server (src/main.ts): each committed execution is handed to the runner.
  const acceptance = new EventAcceptance(
    store,
    new GroupCommit(store, { minIntervalMs: 0 }), // the groups are formed here, not by time
    (request) => enqueueExecution(store, systemClock.now(), request),
    (execution, triggerBytes) => runner.committed(execution, triggerBytes),
  );
  const trigger = { user: "u-1", action: "grant", entitlement: "e-1" };
  const bodyBytes = Buffer.byteLength(JSON.stringify(trigger));
  const acceptOne = () => {
    const eventId = randomUUID();
    const receivedAt = systemClock.now();
    const facts = { automationId, eventId, sourceIp: "127.0.0.1", sizeBytes: bodyBytes, receivedAt, bodyConsumed: true };
    return acceptance.accept({ listenerId, automationId, eventId, trigger, bodyBytes, receivedAt }, (executionId) =>
      deliveries.record(facts, { status: 200, reason: "accepted", executionId }),
    );
  };
  let acceptMs = 0;
  let workerMs = 0;
  let acceptFrames = 0;
  let workerFrames = 0;
  const acceptRanges: [number, number][] = [];
  for (let g = 0; g < groups; g++) {
    const wal = walBytes(path);
    const started = performance.now();
    await Promise.all(Array.from({ length: groupSize }, acceptOne));
    acceptMs += performance.now() - started;
    acceptFrames += (walBytes(path) - wal) / frameBytes;
    acceptRanges.push([wal, walBytes(path)]);
    if ((g + 1) % groupsPerWorkerBatch === 0 || g === groups - 1) {
      const walBefore = walBytes(path);
      const workStarted = performance.now();
      while (runner.runBatch({ maxUnits: 256, maxMs: 2 }, () => false) > 0 && !runner.drained);
      workerMs += performance.now() - workStarted;
      workerFrames += (walBytes(path) - walBefore) / frameBytes;
    }
  }
  const unfinished = store.executions.countUnfinished();
  const acceptFramesByTable = framesByTable(store.db, `${path}-wal`, acceptRanges);
  await store.close();
  if (unfinished !== 0) throw new Error(`${unfinished} executions left unfinished`);
  return {
    acceptUs: (acceptMs * 1000) / webhooks,
    workerUs: (workerMs * 1000) / webhooks,
    acceptFrames: acceptFrames / webhooks,
    workerFrames: workerFrames / webhooks,
    acceptFramesByTable,
  };
}

/** The reference receiver's write: one INSERT of the event id per webhook, a COMMIT per group. */
function referencePerWebhook() {
  const path = join(dir, "reference.db");
  const { db, insert, begin, commit } = openReferenceStore(path);
  db.pragma("wal_autocheckpoint = 0");
  const wal = walBytes(path);
  const started = performance.now();
  for (let g = 0; g < groups; g++) {
    begin.run();
    for (let i = 0; i < groupSize; i++) insert.run(randomUUID(), Date.now());
    commit.run();
  }
  const us = ((performance.now() - started) * 1000) / webhooks;
  const frames = (walBytes(path) - wal) / frameBytes / webhooks;
  db.close();
  return { us, frames };
}

try {
  progress(`${webhooks} webhooks in groups of ${groupSize}...`);
  const reference = referencePerWebhook();
  const accessd = await accessdPerWebhook();
  const total = accessd.acceptUs + accessd.workerUs;
  report({
    name: "store work per accepted webhook (acceptance + worker)",
    value: round(total, 1),
    unit: "us",
    note: `acceptance ${round(accessd.acceptUs, 1)} us (event record, execution, delivery-log row, group COMMIT), worker ${round(accessd.workerUs, 1)} us (claim, log step and its record, the end, batch COMMIT); ${webhooks} webhooks in groups of ${groupSize}, SQLite file, WAL`,
  });
  report({
    name: "reference: one durable INSERT per webhook",
    value: round(reference.us, 1),
    unit: "us",
    note: `the reference receiver's write (event id primary key), same groups and file system; ${round(reference.frames, 2)} WAL frames a webhook`,
  });
  report({ name: "store work per webhook / the reference INSERT", value: round(total / reference.us, 1), unit: "x" });
  report({
    name: "WAL frames written per accepted webhook",
    value: round(accessd.acceptFrames + accessd.workerFrames, 2),
    unit: "frames",
    note: `acceptance ${round(accessd.acceptFrames, 2)}, worker ${round(accessd.workerFrames, 2)} (a frame is one 4 KiB page and its header, two pwrites); the reference ${round(reference.frames, 2)}`,
  });
  const byTable = [...accessd.acceptFramesByTable].sort((a, b) => b[1] - a[1]);
  report({
    name: `WAL frames per group of ${groupSize} acceptances`,
    value: round(accessd.acceptFrames * groupSize, 1),
    unit: "frames",
    note: `by table, indexes included: ${byTable.map(([table, frames]) => `${table} ${round(frames / groups, 1)}`).join(", ")}`,
  });
} finally {
  rmSync(dir, { recursive: true, force: true });
}
