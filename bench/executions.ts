/**
 * Executions per second through the automation worker (issue 4): a three-step automation
 * (log, addEntitlementOwner, log) run by the in-process worker over a SQLite file (WAL), in its
 * production batches (several steps to a transaction, each step atomic with its record in a
 * savepoint). The executions are enqueued first; the clock runs from the worker's start until
 * none is left unfinished. The baseline from the same run: enqueueing them (one INSERT each, one
 * transaction), the least any execution costs.
 *
 * Run with `npx tsx bench/executions.ts [executions]` (default 5000).
 */
import { createWriteStream, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { enqueueExecution, ExecutionWorker, ProgramCache, validateSteps, type StepDefinition } from "../src/automations/index.js";
import { systemClock } from "../src/clock.js";
import { createLogger } from "../src/logger.js";
import { newId } from "../src/store/ids.js";
import { Store } from "../src/store/store.js";
import { report, round } from "./support/report.js";

const count = Number(process.argv[2] ?? 5000);
const warmup = 500;
const dir = mkdtempSync(join(tmpdir(), "accessd-bench-executions-"));
const store = Store.open(join(dir, "accessd.db"));
// Log steps write their line as in production, to a sink.
const log = createLogger("info", createWriteStream("/dev/null"));
const programs = new ProgramCache();
const now = systemClock.now();

const steps: StepDefinition[] = [
  { name: "before", skipIfTrueCel: "", action: { kind: "log", messageCel: '"granting " + ctx.trigger.user_id' } },
  {
    name: "grant",
    skipIfTrueCel: "!has(ctx.trigger.user_id)",
    action: {
      kind: "addEntitlementOwner",
      appIdCel: "ctx.trigger.app_id",
      entitlementIdCel: 'ctx.trigger["entitlement-id"]',
      userIdCel: "ctx.trigger.user_id",
    },
  },
  { name: "after", skipIfTrueCel: "", action: { kind: "log", messageCel: '{"granted": ctx.grant.userId, "to": ctx.steps.grant.entitlementId}' } },
];
validateSteps(steps, programs);

const appId = newId();
const entitlementId = newId();
const automationId = newId();
const userIds = Array.from({ length: count + warmup }, () => newId());
store.transaction(() => {
  store.apps.insert({ id: appId, displayName: "Bench", description: "", createdAt: now, updatedAt: now });
  store.appEntitlements.insert({ id: entitlementId, appId, displayName: "Admin", description: "", slug: "admin", createdAt: now, updatedAt: now });
  for (const id of userIds) store.users.insert({ id, displayName: id, email: "", username: "", createdAt: now, updatedAt: now, roles: [] });
  store.automations.insert({
    id: automationId,
    displayName: "Bench",
    description: "",
    trigger: { kind: "manual" },
    steps,
    published: true,
    triggerEnabled: true,
    version: 1,
    createdAt: now,
    updatedAt: now,
  });
});

let enqueueSeconds = 0;

async function run(users: string[]): Promise<number> {
  const enqueueStarted = performance.now();
  store.transaction(() => {
    for (const userId of users) {
      enqueueExecution(store, systemClock.now(), {
        automationId,
        trigger: { app_id: appId, "entitlement-id": entitlementId, user_id: userId },
      });
    }
  });
  enqueueSeconds = (performance.now() - enqueueStarted) / 1000;
  const worker = new ExecutionWorker({ store, clock: systemClock, log, programs });
  const started = performance.now();
  worker.start();
  await worker.whenIdle();
  const seconds = (performance.now() - started) / 1000;
  await worker.stop();
  return seconds;
}

await run(userIds.slice(0, warmup));
const seconds = await run(userIds.slice(warmup));
const failed = store.executions.listAfter({ automationId, state: "FAILED" }, undefined, 1).length;
if (failed > 0) throw new Error("an execution failed; the figure would be meaningless");
const owners = store.owners.listAfter(entitlementId, undefined, count + warmup + 1).length;
if (owners !== count + warmup) throw new Error(`expected ${count + warmup} owners, found ${owners}`);

const perSecond = count / seconds;
report({
  name: "executions through the worker, 3-step automation",
  value: round(perSecond, 0),
  unit: "executions/s",
  note: `${count} executions in ${round(seconds, 2)} s; ${round((count * 3) / seconds, 0)} steps/s; SQLite file, WAL`,
});
report({
  name: "executions run / executions enqueued per second",
  value: round(perSecond / (count / enqueueSeconds), 3),
  unit: "x",
  note: `enqueueing the same ${count} (one INSERT each, one transaction): ${round(count / enqueueSeconds, 0)} per second`,
});
store.close();
rmSync(dir, { recursive: true, force: true });
