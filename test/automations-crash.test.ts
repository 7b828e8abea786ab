import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import Database from "better-sqlite3";
import { carefulStepSetting } from "../src/automations/crash-loop-guard.js";
import { Store } from "../src/store/store.js";
import type { CliProcess } from "./support/spawn-cli.js";
import { automationLogLines, serveProcess, until, type ServedProcess } from "./support/served-process.js";

const running: CliProcess[] = [];
const dirs: string[] = [];
afterAll(() => {
  for (const cli of running) if (cli.child.exitCode === null) cli.child.kill("SIGKILL");
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

const stepDelayMs = 100;
const executions = 8;

async function serve(database: string): Promise<ServedProcess> {
  const served = await serveProcess({ ACCESSD_DATABASE: database, ACCESSD_TEST_STEP_DELAY_MS: String(stepDelayMs) });
  running.push(served.cli);
  return served;
}

interface ExecutionJson {
  id: string;
  state: string;
  steps: { name: string; state: string }[];
}

describe("crash safety", () => {
  it("completes every execution exactly once after the process is SIGKILLed in the middle of a batch", async () => {
    const dir = mkdtempSync(join(tmpdir(), "accessd-crash-"));
    dirs.push(dir);
    const database = join(dir, "accessd.db");

    const first = await serve(database);
    const { app } = await first.call<{ app: { id: string } }>("POST", "/api/v1/apps", { displayName: "Billing" });
    const { appEntitlement } = await first.call<{ appEntitlement: { id: string } }>(
      "POST",
      `/api/v1/apps/${app.id}/entitlements`,
      { displayName: "Admin" },
    );
    const userIds: string[] = [];
    for (let i = 0; i < executions; i++) {
      const { user } = await first.call<{ user: { id: string } }>("POST", "/api/v1/users", { displayName: `User ${i}` });
      userIds.push(user.id);
    }
    const { automation } = await first.call<{ automation: { id: string } }>("POST", "/api/v1/automations", {
      displayName: "Grant",
      trigger: { manual: {} },
      steps: [
        { name: "before", log: { messageCel: '"granting " + ctx.trigger.user_id' } },
        {
          name: "grant",
          addEntitlementOwner: { appIdCel: "ctx.trigger.app_id", entitlementIdCel: 'ctx.trigger["entitlement-id"]', userIdCel: "ctx.trigger.user_id" },
        },
        { name: "after", log: { messageCel: '"granted " + ctx.grant.userId' } },
      ],
    });
    const executionIds: string[] = [];
    for (const userId of userIds) {
      const { execution } = await first.call<{ execution: ExecutionJson }>("POST", `/api/v1/automations/${automation.id}/execute`, {
        context: { app_id: app.id, "entitlement-id": appEntitlement.id, user_id: userId },
      });
      executionIds.push(execution.id);
    }

    // Kill once an execution has finished a step but not all of them, with more still queued.
    await until("an execution is part-way through", async () => {
      const { list } = await first.call<{ list: ExecutionJson[] }>("GET", "/api/v1/automation_executions?state=RUNNING");
      return list.some((e) => e.steps.some((s) => s.state === "SUCCEEDED"));
    });
    first.cli.child.kill("SIGKILL");
    expect(await first.cli.exited).toEqual({ code: null, signal: "SIGKILL" });

    const atCrash = Store.open(database);
    const interrupted = executionIds.map((id) => atCrash.executions.get(id)).filter((e) => e?.state === "RUNNING");
    const pending = executionIds.map((id) => atCrash.executions.get(id)).filter((e) => e?.state === "PENDING");
    atCrash.close();
    // The worker always holds one execution while work is queued (it claims the next in the same
    // tick it finishes one), so the kill left one RUNNING, usually part-way, and others PENDING.
    // Resuming from a middle step deterministically is covered in automations.test.ts.
    expect(interrupted).toHaveLength(1);
    expect(pending.length).toBeGreaterThan(0);

    const second = await serve(database);
    await until("every execution has finished", async () => {
      const unfinished = await Promise.all(
        ["PENDING", "RUNNING"].map((state) =>
          second.call<{ list: ExecutionJson[] }>("GET", `/api/v1/automation_executions?automation_id=${automation.id}&state=${state}`),
        ),
      );
      return unfinished.every((page) => page.list.length === 0);
    });
    expect(second.cli.stdout()).toContain("resuming automation execution");
    second.cli.child.kill("SIGTERM");
    expect(await second.cli.exited).toEqual({ code: 0, signal: null });

    const store = Store.open(database);
    try {
      for (const [i, id] of executionIds.entries()) {
        expect(store.executions.get(id)?.state).toBe("SUCCEEDED");
        const steps = store.executions.steps(id);
        expect(steps.map((s) => [s.position, s.name, s.state])).toEqual([
          [0, "before", "SUCCEEDED"],
          [1, "grant", "SUCCEEDED"],
          [2, "after", "SUCCEEDED"],
        ]);
        expect(steps[1]?.output).toEqual({ appId: app.id, entitlementId: appEntitlement.id, userId: userIds[i] });
        expect(steps[2]?.output).toBe(`granted ${userIds[i]}`);
      }
      const owners = store.owners.listAfter(appEntitlement.id, undefined, 100).map((u) => u.id);
      expect(owners.sort()).toEqual([...userIds].sort());
    } finally {
      store.close();
    }

    // A log step's line is written after its record commits: never twice across the two processes.
    const lines = [...automationLogLines(first.cli), ...automationLogLines(second.cli)];
    expect(new Set(lines).size).toBe(lines.length);
  }, 60_000);

  it("ends an execution whose step is running each time the process dies, instead of dying with it at every start, and runs the queue behind it", async () => {
    const dir = mkdtempSync(join(tmpdir(), "accessd-crash-loop-"));
    dirs.push(dir);
    const database = join(dir, "accessd.db");
    // Each step waits first (the test knob): the step "is running" then, and the kill lands in it.
    // The processes to be killed wait 10 s, so the kill cannot come after the step (with 400 ms, a
    // poll answered late on a loaded machine let the step finish first: the mark was then on the
    // execution behind it); the last one waits 400 ms, to run the queue.
    const serveSlowSteps = async (stepDelayMs = 10_000) => {
      const served = await serveProcess({ ACCESSD_DATABASE: database, ACCESSD_TEST_STEP_DELAY_MS: String(stepDelayMs) });
      running.push(served.cli);
      return served;
    };
    const kill = async (served: ServedProcess) => {
      served.cli.child.kill("SIGKILL");
      expect(await served.cli.exited).toEqual({ code: null, signal: "SIGKILL" });
    };
    /** The step a careful worker marked before running it, read from the live file. */
    const carefulMark = () => {
      const db = new Database(database, { readonly: true });
      try {
        const row = db.prepare("SELECT value FROM settings WHERE name = ?").get(carefulStepSetting) as { value: Buffer } | undefined;
        return row === undefined ? undefined : (JSON.parse(row.value.toString()) as { executionId: string; position: number; attempts: number });
      } finally {
        db.close();
      }
    };

    const first = await serveSlowSteps();
    const { automation } = await first.call<{ automation: { id: string } }>("POST", "/api/v1/automations", {
      displayName: "Poison",
      trigger: { manual: {} },
      steps: [{ name: "fatal", log: { messageCel: '"ran"' } }],
    });
    const execute = async (served: ServedProcess) =>
      (await served.call<{ execution: ExecutionJson }>("POST", `/api/v1/automations/${automation.id}/execute`, { context: {} })).execution.id;
    const poisoned = await execute(first);
    const behind = await execute(first);
    const state = async (served: ServedProcess, id: string) =>
      (await served.call<{ execution: ExecutionJson }>("GET", `/api/v1/automation_executions/${id}`)).execution.state;

    // 1. A batch as usual: the process dies while step "fatal" of `poisoned` runs.
    await until("the first execution is claimed", async () => (await state(first, poisoned)) === "RUNNING");
    await kill(first);
    // 2 and 3. After an unclean stop the worker marks each step before it runs it; the process dies in it again.
    for (const attempts of [1, 2]) {
      const careful = await serveSlowSteps();
      expect(careful.cli.stdout()).toContain("stopped without shutting down");
      await until(`step "fatal" is marked, attempt ${attempts}`, () => carefulMark()?.attempts === attempts);
      expect(carefulMark()).toEqual({ executionId: poisoned, position: 0, attempts });
      await kill(careful);
    }
    // 4. The next start ends `poisoned` without running its step again, and goes on.
    const last = await serveSlowSteps(400);
    await until("the execution behind it has run", async () => (await state(last, behind)) === "SUCCEEDED");
    const ended = (await last.call<{ execution: ExecutionJson & { error: string } }>("GET", `/api/v1/automation_executions/${poisoned}`)).execution;
    expect(ended).toMatchObject({ state: "FAILED", steps: [{ name: "fatal", state: "FAILED", error: expect.stringMatching(/^was running when the process died/) }] });
    // A batch's log lines are written after its commit, in the background: the state can be seen first.
    await until("the log line of the execution behind it is written", () => automationLogLines(last.cli).length > 0);
    expect(automationLogLines(last.cli)).toEqual([`${behind}/fatal`]);
    expect(ended.error).toContain('step "fatal" was running when the process died, in 2 starts in a row');
    expect(last.cli.stdout()).toContain("automation execution failed");
    expect(await execute(last)).toBeTruthy(); // and the service takes work as before
    last.cli.child.kill("SIGTERM");
    expect(await last.cli.exited).toEqual({ code: 0, signal: null });
  }, 60_000);
});
