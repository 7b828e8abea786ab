import { gzipSync } from "node:zlib";
import { fromJson } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { Code, createClient, type Interceptor } from "@connectrpc/connect";
import { compressionGzip, createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Automations } from "../gen/svc/api/automations/v1/automation_pb.js";
import { boundedErrorText } from "../src/automations/error-text.js";
import { enqueueExecution } from "../src/automations/index.js";
import { answer, createApp, createEntitlement, createUser, listOwnerIds, type ExecutionJson } from "./support/api-fixtures.js";
import { startTestServer, type TestServer } from "./support/test-server.js";


let server: TestServer;
beforeAll(async () => {
  server = await startTestServer();
});
afterAll(() => server.close());

const grantStep = {
  name: "grant",
  addEntitlementOwner: {
    appIdCel: "ctx.trigger.app_id",
    entitlementIdCel: 'ctx.trigger["entitlement-id"]',
    userIdCel: "ctx.trigger.user_id",
  },
};

async function createAutomation(steps: unknown[], displayName = "Grant on request"): Promise<string> {
  const res = await server.call("POST", "/api/v1/automations", { displayName, trigger: { manual: {} }, steps });
  const { status, body } = await answer(res);
  expect({ status, body }).toMatchObject({ status: 200 });
  return (body as { automation: { id: string } }).automation.id;
}

async function execute(automationId: string, context: unknown): Promise<ExecutionJson> {
  const res = await server.call("POST", `/api/v1/automations/${automationId}/execute`, { context });
  expect(res.status).toBe(200);
  return ((await res.json()) as { execution: ExecutionJson }).execution;
}

async function getExecution(id: string): Promise<ExecutionJson> {
  const res = await server.call("GET", `/api/v1/automation_executions/${id}`);
  expect(res.status).toBe(200);
  return ((await res.json()) as { execution: ExecutionJson }).execution;
}

/** Runs an execution to its end and returns it without timestamps. */
async function executeToEnd(automationId: string, context: unknown): Promise<ExecutionJson> {
  const created = await execute(automationId, context);
  await server.worker.whenIdle();
  const { id, automationId: a, automationVersion, state, trigger, steps, error } = await getExecution(created.id);
  return {
    id,
    automationId: a,
    automationVersion,
    state,
    trigger,
    error,
    steps: steps.map(({ name, state: s, output, error: e }) => ({ name, state: s, output, error: e })),
  };
}

describe("automation executions", () => {
  it("adds the owner named by ctx.trigger.user_id and ctx.trigger[\"entitlement-id\"] and records each step's output", async () => {
    const appId = await createApp(server);
    const entitlementId = await createEntitlement(server, appId);
    const userId = await createUser(server);
    const automationId = await createAutomation([
      grantStep,
      { name: "note", log: { messageCel: '"added " + ctx.grant.userId + " to " + ctx.steps.grant.entitlementId' } },
    ]);
    const context = { app_id: appId, "entitlement-id": entitlementId, user_id: userId };

    const created = await execute(automationId, context);
    expect(created).toMatchObject({
      automationId,
      automationVersion: 1,
      state: "PENDING",
      trigger: context,
      steps: [
        { name: "grant", state: "PENDING" },
        { name: "note", state: "PENDING" },
      ],
    });

    const execution = await executeToEnd(automationId, context);
    expect(execution).toEqual({
      id: execution.id,
      automationId,
      automationVersion: 1,
      state: "SUCCEEDED",
      trigger: context,
      error: undefined,
      steps: [
        { name: "grant", state: "SUCCEEDED", output: { appId, entitlementId, userId }, error: undefined },
        { name: "note", state: "SUCCEEDED", output: `added ${userId} to ${entitlementId}`, error: undefined },
      ],
    });
    expect(await listOwnerIds(server, appId, entitlementId)).toEqual([userId]);
  });

  it("marks a step SKIPPED when its skipIfTrueCel is true, and has() sees that it has no output", async () => {
    const automationId = await createAutomation([
      { name: "maybe", skipIfTrueCel: "!has(ctx.trigger.note)", log: { messageCel: "ctx.trigger.note" } },
      { name: "after", log: { messageCel: 'has(ctx.steps.maybe) ? "ran" : "skipped"' } },
    ]);
    const skipped = await executeToEnd(automationId, { other: 1 });
    expect(skipped.state).toBe("SUCCEEDED");
    expect(skipped.steps).toEqual([
      { name: "maybe", state: "SKIPPED", output: undefined, error: undefined },
      { name: "after", state: "SUCCEEDED", output: "skipped", error: undefined },
    ]);
    const ran = await executeToEnd(automationId, { note: "hello" });
    expect(ran.steps).toEqual([
      { name: "maybe", state: "SUCCEEDED", output: "hello", error: undefined },
      { name: "after", state: "SUCCEEDED", output: "ran", error: undefined },
    ]);
  });

  it("fails the step and the execution with a message naming a missing field", async () => {
    const appId = await createApp(server);
    const entitlementId = await createEntitlement(server, appId);
    const automationId = await createAutomation([grantStep, { name: "never", log: { messageCel: '"unreached"' } }]);
    const execution = await executeToEnd(automationId, { app_id: appId, "entitlement-id": entitlementId });
    expect(execution.state).toBe("FAILED");
    expect(execution.steps).toEqual([
      { name: "grant", state: "FAILED", output: undefined, error: 'userIdCel: ctx.trigger.user_id is missing (no field "user_id")' },
      { name: "never", state: "PENDING", output: undefined, error: undefined },
    ]);
    expect(execution.error).toBe('step "grant" failed: userIdCel: ctx.trigger.user_id is missing (no field "user_id")');

    const bracketed = await executeToEnd(automationId, { app_id: appId, user_id: "u" });
    expect(bracketed.steps[0]?.error).toBe(
      'entitlementIdCel: ctx.trigger["entitlement-id"] is missing (no field "entitlement-id")',
    );
  });

  it("fails the step with a message saying which input had the wrong type", async () => {
    const appId = await createApp(server);
    const entitlementId = await createEntitlement(server, appId);
    const automationId = await createAutomation([grantStep]);
    const execution = await executeToEnd(automationId, { app_id: appId, "entitlement-id": entitlementId, user_id: 42 });
    expect(execution.state).toBe("FAILED");
    expect(execution.steps[0]).toEqual({
      name: "grant",
      state: "FAILED",
      output: undefined,
      error: "userIdCel must evaluate to a string id, got double 42",
    });
    expect(await listOwnerIds(server, appId, entitlementId)).toEqual([]);

    const skipNotBool = await createAutomation([{ name: "s", skipIfTrueCel: "ctx.trigger.flag", log: { messageCel: "1" } }]);
    expect((await executeToEnd(skipNotBool, { flag: "yes" })).steps[0]?.error).toBe(
      "skipIfTrueCel must evaluate to a bool, got string",
    );
  });

  it("fails the step with the API's own message for an unknown user", async () => {
    const appId = await createApp(server);
    const entitlementId = await createEntitlement(server, appId);
    const automationId = await createAutomation([grantStep]);
    const execution = await executeToEnd(automationId, { app_id: appId, "entitlement-id": entitlementId, user_id: "nobody" });
    expect(execution.steps[0]).toMatchObject({ state: "FAILED", error: 'user "nobody" not found' });
  });

  it("removes an owner with removeEntitlementOwner", async () => {
    const appId = await createApp(server);
    const entitlementId = await createEntitlement(server, appId);
    const userId = await createUser(server);
    const automationId = await createAutomation([
      grantStep,
      { name: "revoke", removeEntitlementOwner: { appIdCel: "ctx.grant.appId", entitlementIdCel: "ctx.grant.entitlementId", userIdCel: "ctx.grant.userId" } },
    ]);
    const execution = await executeToEnd(automationId, { app_id: appId, "entitlement-id": entitlementId, user_id: userId });
    expect(execution.steps.map((s) => s.state)).toEqual(["SUCCEEDED", "SUCCEEDED"]);
    expect(await listOwnerIds(server, appId, entitlementId)).toEqual([]);
  });

  it("runs the steps of the version an execution was created with, not those of a later update", async () => {
    const automationId = await createAutomation([{ name: "say", log: { messageCel: '"version one"' } }]);
    await server.worker.stop();
    const before = await execute(automationId, {});
    const update = await server.call("POST", `/api/v1/automations/${automationId}`, {
      automation: { id: automationId, steps: [{ name: "shout", log: { messageCel: '"VERSION TWO"' } }] },
    });
    expect(update.status).toBe(200);
    expect(((await update.json()) as { automation: { version: number } }).automation.version).toBe(2);
    const after = await execute(automationId, {});
    server.worker.start();
    await server.worker.whenIdle();

    expect(await getExecution(before.id)).toMatchObject({
      automationVersion: 1,
      state: "SUCCEEDED",
      steps: [{ name: "say", state: "SUCCEEDED", output: "version one" }],
    });
    expect(await getExecution(after.id)).toMatchObject({
      automationVersion: 2,
      state: "SUCCEEDED",
      steps: [{ name: "shout", state: "SUCCEEDED", output: "VERSION TWO" }],
    });
  });

  it("answers 404 to Execute of an unknown automation and to Get of an unknown execution", async () => {
    expect(await answer(await server.call("POST", "/api/v1/automations/nope/execute", { context: {} }))).toEqual({
      status: 404,
      body: { code: "not_found", message: 'automation "nope" not found' },
    });
    expect(await answer(await server.call("GET", "/api/v1/automation_executions/nope"))).toEqual({
      status: 404,
      body: { code: "not_found", message: 'automation execution "nope" not found' },
    });
  });
  it("resumes an interrupted execution at its first unfinished step and never runs a recorded step again", async () => {
    const appId = await createApp(server);
    const entitlementId = await createEntitlement(server, appId);
    const userId = await createUser(server);
    const automationId = await createAutomation([grantStep, { name: "note", log: { messageCel: '"after " + ctx.grant.userId' } }]);
    await server.worker.stop();
    const created = await execute(automationId, { app_id: appId, "entitlement-id": entitlementId, user_id: userId });
    // What a crash after step 0 committed leaves behind: RUNNING, step 0 recorded. The record says
    // the owner was added, but it was not: if step 0 ran again, the owner would appear.
    const store = server.store;
    store.transaction(() => {
      store.executions.markRunning(created.id, Date.now());
      store.executions.recordStep(created.id, {
        position: 0,
        name: "grant",
        state: "SUCCEEDED",
        output: { appId, entitlementId, userId: "recorded-user" },
        error: "",
        startedAt: Date.now(),
        finishedAt: Date.now(),
      });
    });
    server.worker.start();
    await server.worker.whenIdle();
    expect(await getExecution(created.id)).toMatchObject({
      state: "SUCCEEDED",
      steps: [
        { name: "grant", state: "SUCCEEDED", output: { userId: "recorded-user" } },
        { name: "note", state: "SUCCEEDED", output: "after recorded-user" },
      ],
    });
    expect(await listOwnerIds(server, appId, entitlementId)).toEqual([]);
  });

  it("still runs executions created before their automation was deleted", async () => {
    const automationId = await createAutomation([{ name: "say", log: { messageCel: '"still here"' } }]);
    await server.worker.stop();
    const created = await execute(automationId, {});
    expect((await server.call("DELETE", `/api/v1/automations/${automationId}`)).status).toBe(200);
    server.worker.start();
    await server.worker.whenIdle();
    expect(await getExecution(created.id)).toMatchObject({ state: "SUCCEEDED", steps: [{ name: "say", output: "still here" }] });
  });

  it("enqueues inside the caller's transaction: nothing is left when that transaction rolls back", async () => {
    const automationId = await createAutomation([{ name: "say", log: { messageCel: "1" } }]);
    const store = server.store;
    const clock = { now: () => Date.now() };
    let enqueued = "";
    expect(() =>
      store.transaction(() => {
        enqueued = enqueueExecution(store, clock.now(), { automationId, trigger: { a: 1 }, eventId: "e-1" }).id;
        throw new Error("the caller's own write failed");
      }),
    ).toThrow("the caller's own write failed");
    expect(store.executions.get(enqueued)).toBeUndefined();

    const { id: executionId } = store.transaction(() =>
      enqueueExecution(store, clock.now(), { automationId, trigger: { a: 1 }, eventId: "e-2" }),
    );
    server.worker.notify();
    await server.worker.whenIdle();
    expect(await getExecution(executionId)).toMatchObject({ state: "SUCCEEDED", eventId: "e-2", trigger: { a: 1 } });
    expect(() => enqueueExecution(store, clock.now(), { automationId: "gone", trigger: null })).toThrow('automation "gone" not found');
  });
});

const withToken: Interceptor = (next) => (req) => {
  for (const [name, value] of Object.entries(server.headers)) req.header.set(name, value);
  return next(req);
};

describe("Execute with a context that has no JSON form", () => {
  it("answers 400 to a number beyond a double's range, on REST and Connect (it was a 500), and runs nothing", async () => {
    const automationId = await createAutomation([{ name: "a", log: { messageCel: "1" } }]);
    const message = "context holds a number that is not finite (NaN, Infinity, or beyond a double's range such as 1e400)";
    for (const [path, body] of [
      [`/api/v1/automations/${automationId}/execute`, '{"context":{"x":[1, 1e400]}}'],
      [`/api/v1/automations/${automationId}/execute`, '{"context":-1e400}'],
      ["/svc.api.automations.v1.Automations/Execute", `{"id":"${automationId}","context":{"x":1e400}}`],
    ] as const) {
      expect(await answer(await server.call("POST", path, body))).toEqual({ status: 400, body: { code: "invalid_argument", message } });
    }
    const listed = await server.call("GET", `/api/v1/automation_executions?automation_id=${automationId}`);
    expect(((await listed.json()) as { list: unknown[] }).list).toEqual([]);
  });

  it("keeps a null context null, as a webhook's null body is (it was stored as {}), and takes no context as {}", async () => {
    const automationId = await createAutomation([{ name: "a", log: { messageCel: "ctx.trigger == null" } }]);
    const nullContext = await executeToEnd(automationId, null);
    expect({ trigger: nullContext.trigger, output: nullContext.steps[0]?.output }).toEqual({ trigger: null, output: true });
    const res = await server.call("POST", `/api/v1/automations/${automationId}/execute`, {});
    expect(res.status).toBe(200);
    expect(((await res.json()) as { execution: ExecutionJson }).execution.trigger).toEqual({});
  });

  it("runs a context of 30,000 values, and refuses a request over 65 KiB on REST, Connect and gRPC before decoding it (at 1 MiB, a context of small values held the thread 260-760 ms)", async () => {
    const automationId = await createAutomation([{ name: "a", log: { messageCel: "size(ctx.trigger.xs)" } }]);
    const execution = await executeToEnd(automationId, { xs: Array(30_000).fill(0) });
    expect(execution).toMatchObject({ state: "SUCCEEDED", steps: [{ output: 30_000 }] });
    const big = JSON.stringify({ context: { xs: Array(40_000).fill(0) } }); // 80 KB
    const rest = await server.call("POST", `/api/v1/automations/${automationId}/execute`, big);
    expect(await answer(rest)).toEqual({ status: 413, body: { code: "resource_exhausted", message: `request body is larger than ${65 * 1024} bytes` } });
    const connectBody = big.replace("{", `{"id":"${automationId}",`);
    const connect = await server.call("POST", "/svc.api.automations.v1.Automations/Execute", connectBody);
    expect(await answer(connect)).toMatchObject({ status: 429, body: { code: "resource_exhausted" } });
    // Compressed, its 80 KB are 300 bytes on the wire: the limit holds once decompressed too.
    const gzipped = await fetch(`${server.url}/svc.api.automations.v1.Automations/Execute`, {
      method: "POST",
      headers: { ...server.headers, "content-type": "application/json", "content-encoding": "gzip" },
      body: gzipSync(connectBody),
    });
    expect(await answer(gzipped)).toMatchObject({ status: 429, body: { code: "resource_exhausted" } });
    const context = fromJson(ValueSchema, { xs: Array(40_000).fill(0) });
    for (const sendCompression of [undefined, compressionGzip]) {
      const client = createClient(Automations, createGrpcTransport({ baseUrl: server.url, interceptors: [withToken], sendCompression, compressMinBytes: 0 }));
      await expect(client.execute({ id: automationId, context })).rejects.toMatchObject({ code: Code.ResourceExhausted });
    }
    // Each small enough: a context at the limit of a webhook body.
    const listed = await server.call("GET", `/api/v1/automation_executions?automation_id=${automationId}`);
    expect(((await listed.json()) as { list: unknown[] }).list).toHaveLength(1);
  });
});

describe("listing executions", () => {
  interface Page {
    list: ExecutionJson[];
    nextPageToken: string;
  }
  const list = async (query: string): Promise<{ status: number; body: Page }> => {
    const res = await server.call("GET", `/api/v1/automation_executions?${query}`);
    return { status: res.status, body: (await res.json()) as Page };
  };

  it("filters by automation and state, in pages of the shared pagination module", async () => {
    const ok = await createAutomation([{ name: "ok", log: { messageCel: "1" } }]);
    const bad = await createAutomation([{ name: "bad", log: { messageCel: "ctx.trigger.absent" } }]);
    const okIds: string[] = [];
    for (let i = 0; i < 12; i++) okIds.push((await execute(ok, { i })).id);
    const badIds: string[] = [];
    for (let i = 0; i < 3; i++) badIds.push((await execute(bad, { i })).id);
    await server.worker.whenIdle();

    const first = await list(`automation_id=${ok}&page_size=5`);
    expect(first.status).toBe(200);
    expect(first.body.list.map((e) => e.id)).toEqual(okIds.slice(0, 10)); // page_size below 10 -> 10
    expect(first.body.nextPageToken).not.toBe("");
    const second = await list(`automation_id=${ok}&page_size=5&page_token=${first.body.nextPageToken}`);
    expect(second.body).toMatchObject({ nextPageToken: "" });
    expect(second.body.list.map((e) => e.id)).toEqual(okIds.slice(10));

    const failed = await list(`automation_id=${bad}&state=FAILED`);
    expect(failed.body.list.map((e) => [e.id, e.state, e.steps[0]?.state])).toEqual(badIds.map((id) => [id, "FAILED", "FAILED"]));
    expect(failed.body.nextPageToken).toBe("");
    expect((await list(`automation_id=${ok}&state=FAILED`)).body).toEqual({ list: [], nextPageToken: "" });
    const allFailed = (await list("state=FAILED&page_size=100")).body.list.map((e) => e.id);
    expect(allFailed).toEqual(expect.arrayContaining(badIds));
    expect(allFailed).not.toContain(okIds[0]);

    // A token belongs to its listing: reusing it with another filter is refused.
    const other = await server.call("GET", `/api/v1/automation_executions?automation_id=${bad}&page_token=${first.body.nextPageToken}`);
    expect(other.status).toBe(400);
  });

  it("keeps a step's and an execution's error to 1,000 characters, however long the value it quotes (a page of ten was 20 MB)", async () => {
    const appId = await createApp(server);
    const entitlementId = await createEntitlement(server, appId);
    const automationId = await createAutomation([grantStep]);
    const longId = "a".repeat(60_000);
    const { id } = await execute(automationId, { app_id: longId, "entitlement-id": entitlementId, user_id: "u" });
    await server.worker.whenIdle();
    const execution = await getExecution(id);
    const stepError = execution.steps[0]?.error ?? "";
    // Within the 1,000, the note of what was left out included (they were 1,024 and 1,041).
    expect(stepError).toBe(`app "${"a".repeat(875)}… (59136 more characters)`);
    expect(execution.error).toBe(`step "grant" failed: ${stepError}`);
    // ... with room for the longest step name (64 characters) in the execution's.
    expect(`step "${"n".repeat(64)}" failed: ${stepError}`.length).toBeLessThanOrEqual(1_000);
    const page = await list(`automation_id=${automationId}`);
    expect(JSON.stringify(page.body).length).toBeLessThan(5_000);
    expect(boundedErrorText("x".repeat(1_000))).toBe("x".repeat(1_000));
    expect(boundedErrorText("x".repeat(959) + "\u{1F600}" + "y".repeat(40))).toBe("x".repeat(959) + "… (42 more characters)"); // never half a surrogate pair
  });

  it("lists executions without their trigger and step outputs, which Get answers", async () => {
    const echo = await createAutomation([{ name: "echo", log: { messageCel: "ctx.trigger.s" } }]);
    const { id } = await execute(echo, { s: "x".repeat(1000) });
    await server.worker.whenIdle();
    const [listed] = (await list(`automation_id=${echo}`)).body.list;
    expect(listed).toMatchObject({ id, state: "SUCCEEDED", steps: [{ name: "echo", state: "SUCCEEDED" }] });
    expect(listed).not.toHaveProperty("trigger");
    expect(listed?.steps[0]).not.toHaveProperty("output");
    expect(await getExecution(id)).toMatchObject({ trigger: { s: "x".repeat(1000) }, steps: [{ output: "x".repeat(1000) }] });
  });
});

describe("saving automations", () => {
  const save = (steps: unknown[]) =>
    server.call("POST", "/api/v1/automations", { displayName: "Bad", trigger: { manual: {} }, steps }).then(answer);
  const invalid = (message: string) => ({ status: 400, body: { code: "invalid_argument", message } });

  it.each([
    [
      "a syntax error",
      [{ name: "greet", log: { messageCel: "ctx.trigger." } }],
      'steps[0] ("greet").messageCel: syntax error at 1:12: found . but expecting end of input',
    ],
    [
      // Columns count characters (code points), as cel-go's do: four emoji put it at 1:14.
      "an unknown variable after characters outside the BMP",
      [{ name: "greet", log: { messageCel: "'😀😀😀😀' + user" } }],
      'steps[0] ("greet").messageCel: unknown variable "user" (expressions read ctx.trigger and ctx.steps.<name>) at 1:10',
    ],
    [
      "an unknown variable",
      [{ name: "greet", log: { messageCel: '"hi " + user' } }],
      'steps[0] ("greet").messageCel: unknown variable "user" (expressions read ctx.trigger and ctx.steps.<name>) at 1:9',
    ],
    [
      "a reference to a later step",
      [
        { name: "first", log: { messageCel: "ctx.steps.second" } },
        { name: "second", log: { messageCel: "1" } },
      ],
      'steps[0] ("first").messageCel: step "second" runs later; a step reads only the outputs of earlier steps at 1:10',
    ],
    [
      "a reference to an unknown step",
      [{ ...grantStep, name: "first", addEntitlementOwner: { ...grantStep.addEntitlementOwner, userIdCel: "ctx.lookup.id" } }],
      'steps[0] ("first").userIdCel: unknown step "lookup" at 1:4',
    ],
    [
      "a step reading its own output",
      [{ name: "me", skipIfTrueCel: 'has(ctx["me"].x)', log: { messageCel: "1" } }],
      'steps[0] ("me").skipIfTrueCel: step "me" cannot read its own output at 1:8',
    ],
    [
      "an unknown function",
      [{ name: "f", log: { messageCel: "frobnicate(ctx.trigger)" } }],
      'steps[0] ("f").messageCel: unknown function "frobnicate" at 1:1',
    ],
    [
      "has() of something that is no field selection (it said: unknown function \"has\")",
      [{ name: "f", log: { messageCel: "has(ctx.trigger.a['b-c'])" } }],
      "steps[0] (\"f\").messageCel: has() takes a field selection, such as has(ctx.trigger.a.b); for a key that is no name, write 'b-c' in ctx.trigger.a at 1:1",
    ],
    ["a reserved step name", [{ name: "trigger", log: { messageCel: "1" } }], 'steps[0].name "trigger" is reserved (ctx.trigger)'],
    ["a CEL reserved word as a step name", [{ name: "in", log: { messageCel: "1" } }], 'steps[0].name "in" is a CEL reserved word: ctx.in could not be written'],
    ["a CEL keyword as a step name", [{ name: "null", log: { messageCel: "1" } }], 'steps[0].name "null" is a CEL reserved word: ctx.null could not be written'],
    ["a repeated step name", [{ name: "a", log: { messageCel: "1" } }, { name: "a", log: { messageCel: "2" } }], 'steps[1].name "a" is used by an earlier step'],
    ["a step without an action", [{ name: "a" }], "steps[0] needs an action: addEntitlementOwner, removeEntitlementOwner or log"],
    ["an empty expression", [{ name: "a", log: { messageCel: " " } }], 'steps[0] ("a").messageCel is required'],
    // It said "is required" of the one optional expression.
    ["a blank skipIfTrueCel", [{ name: "a", skipIfTrueCel: "  ", log: { messageCel: "1" } }], 'steps[0] ("a").skipIfTrueCel is blank: leave it out (or empty) to run the step always'],
    ["a step name over 64 characters", [{ name: "n".repeat(65), log: { messageCel: "1" } }], "steps[0].name is longer than 64 characters"],
    [
      // 420 levels of `(!` took 3.2 s to refuse (the parser backtracks through every open bracket).
      "brackets nested more than 32 deep",
      [{ name: "a", log: { messageCel: "(!".repeat(420) } }],
      'steps[0] ("a").messageCel: syntax error at 1:65: brackets nested more than 32 deep',
    ],
    [
      "more than 100 steps",
      Array.from({ length: 101 }, (_, i) => ({ name: `s${i}`, log: { messageCel: "1" } })),
      "an automation has at most 100 steps, not 101",
    ],
    [
      "more than 64 KiB of expressions in all",
      Array.from({ length: 17 }, (_, i) => ({ name: `s${i}`, log: { messageCel: `"${"x".repeat(4_000)}"` } })),
      "the steps' expressions hold 68034 characters in all: at most 65536",
    ],
  ])("answers 400 naming the step for %s", async (_, steps, message) => {
    expect(await save(steps)).toEqual(invalid(message));
  });

  it("saves an automation of exactly 100 steps", async () => {
    expect(await save(Array.from({ length: 100 }, (_, i) => ({ name: `s${i}`, log: { messageCel: "1" } })))).toMatchObject({ status: 200 });
  });

  it("counts no bracket or quote inside a // comment (a quote there hid 380 open brackets from the check: 2.2 s to refuse)", async () => {
    const hidden = `// "\n${"(!".repeat(380)}x\n// "`;
    const closers = Array(12).fill(`${"(!".repeat(30)}\n//${")".repeat(30)}`).join("\n") + "\nx";
    for (const messageCel of [hidden, closers]) {
      const { status, body } = await save([{ name: "a", log: { messageCel } }]);
      expect({ status, message: (body as { message: string }).message }).toMatchObject({
        status: 400,
        message: expect.stringContaining("brackets nested more than 32 deep"),
      });
    }
    expect(await save([{ name: "a", log: { messageCel: '// a comment with "((((" and ))))\n1' } }])).toMatchObject({ status: 200 });
  });

  it("accepts brackets 32 deep, and brackets in string literals however many", async () => {
    const deep = `${"(".repeat(32)}1${")".repeat(32)}`;
    const quoted = `"${"(".repeat(100)}" + '${"[".repeat(100)}' + r"\\${"{".repeat(100)}" + """${"(".repeat(100)}"""`;
    const res = await save([
      { name: "a", log: { messageCel: deep } },
      { name: "b", log: { messageCel: quoted } },
      { name: "c", log: { messageCel: `"\\"" + "${"(".repeat(40)}"` } },
    ]);
    expect(res).toMatchObject({ status: 200 });
  });

  it("accepts macros, comprehension variables, type names and string extensions", async () => {
    const res = await save([
      { name: "a", log: { messageCel: "ctx.trigger.items.exists(i, i.id == 'x') && type(ctx.trigger.n) == double" } },
      { name: "b", log: { messageCel: "ctx.trigger.items.map(i, i.name.lowerAscii())" } },
      { name: "c", skipIfTrueCel: "has(ctx.steps.a) && 'b' in ctx.steps", log: { messageCel: "ctx.a" } },
    ]);
    expect(res.status).toBe(200);
  });

  it("answers 400 to an update whose steps do not compile, and keeps the version", async () => {
    // Named as the request has it, automation.steps[0], as its other fields are (it was steps[0]).
    const automationId = await createAutomation([{ name: "a", log: { messageCel: "1" } }]);
    const res = await server.call("POST", `/api/v1/automations/${automationId}`, {
      automation: { id: automationId, steps: [{ name: "a", log: { messageCel: "ctx.b" } }] },
    });
    expect(await answer(res)).toEqual(invalid('automation.steps[0] ("a").messageCel: unknown step "b" at 1:4'));
    const get = await server.call("GET", `/api/v1/automations/${automationId}`);
    expect(((await get.json()) as { automation: { version: number } }).automation.version).toBe(1);
  });
});
