import { randomUUID } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { Automations } from "../gen/svc/api/automations/v1/automation_pb.js";
import * as compiledExpression from "../src/automations/compiled-expression.js";
import { maxExecutionOutputChars } from "../src/automations/json-cel.js";
import { maxJsonDepth } from "../src/automations/json-depth.js";
import { StepContext } from "../src/automations/step-context.js";
import type { ExecutionJson } from "./support/api-fixtures.js";
import { startTestServer, type TestServer } from "./support/test-server.js";

async function createAutomation(server: TestServer, steps: unknown[]): Promise<string> {
  const res = await server.call("POST", "/api/v1/automations", { displayName: "CEL", trigger: { manual: {} }, steps });
  expect(res.status).toBe(200);
  return ((await res.json()) as { automation: { id: string } }).automation.id;
}

/** Execute, wait for the worker, and the finished execution (steps without timestamps). */
async function executeToEnd(server: TestServer, automationId: string, context: unknown): Promise<Pick<ExecutionJson, "id" | "state" | "error" | "steps">> {
  const res = await server.call("POST", `/api/v1/automations/${automationId}/execute`, { context });
  expect(res.status).toBe(200);
  const { id } = ((await res.json()) as { execution: { id: string } }).execution;
  await server.worker.whenIdle();
  const got = await server.call("GET", `/api/v1/automation_executions/${id}`);
  expect(got.status).toBe(200);
  const { execution } = (await got.json()) as { execution: ExecutionJson };
  return {
    id,
    state: execution.state,
    error: execution.error,
    steps: execution.steps.map(({ name, state, output, error }) => ({ name, state, output, error })),
  };
}

describe("JSON -> CEL values at run time", () => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServer();
  });
  afterAll(() => server.close());

  const steps = [
    { name: "city", log: { messageCel: "ctx.trigger.user.address.city" } },
    { name: "address", log: { messageCel: "ctx.trigger.user.address" } },
    { name: "second", log: { messageCel: "ctx.trigger.list[1]" } },
    { name: "item_id", log: { messageCel: "ctx.trigger.items[1].id + ':' + string(size(ctx.trigger.items))" } },
    { name: "flagged", skipIfTrueCel: "ctx.trigger.flag", log: { messageCel: '"flag was false"' } },
    { name: "unflagged", skipIfTrueCel: "!ctx.trigger.flag", log: { messageCel: '"flag was true"' } },
    { name: "manager", log: { messageCel: 'ctx.trigger.manager == null ? "no manager" : "manager " + string(ctx.trigger.manager)' } },
    { name: "count", log: { messageCel: "ctx.trigger.count * 2.0" } },
  ];
  const trigger = (flag: boolean, manager: string | null) => ({
    user: { name: "Ada", address: { city: "Lisbon", zip: "1000-001" } },
    list: ["a", "b", "c"],
    items: [{ id: "i-0" }, { id: "i-1" }],
    flag,
    manager,
    count: 21,
  });

  it("reads a nested object, array elements, a boolean condition and a null compared with == null", async () => {
    const automationId = await createAutomation(server, steps);
    const execution = await executeToEnd(server, automationId, trigger(true, null));
    expect(execution).toEqual({
      id: execution.id,
      state: "SUCCEEDED",
      error: undefined,
      steps: [
        { name: "city", state: "SUCCEEDED", output: "Lisbon", error: undefined },
        { name: "address", state: "SUCCEEDED", output: { city: "Lisbon", zip: "1000-001" }, error: undefined },
        { name: "second", state: "SUCCEEDED", output: "b", error: undefined },
        { name: "item_id", state: "SUCCEEDED", output: "i-1:2", error: undefined },
        { name: "flagged", state: "SKIPPED", output: undefined, error: undefined },
        { name: "unflagged", state: "SUCCEEDED", output: "flag was true", error: undefined },
        { name: "manager", state: "SUCCEEDED", output: "no manager", error: undefined },
        { name: "count", state: "SUCCEEDED", output: 42, error: undefined },
      ],
    });
  });

  it("takes the other branch for flag false and a non-null manager", async () => {
    const automationId = await createAutomation(server, steps);
    const execution = await executeToEnd(server, automationId, trigger(false, "u-9"));
    expect(execution.state).toBe("SUCCEEDED");
    expect(execution.steps.slice(4)).toEqual([
      { name: "flagged", state: "SUCCEEDED", output: "flag was false", error: undefined },
      { name: "unflagged", state: "SKIPPED", output: undefined, error: undefined },
      { name: "manager", state: "SUCCEEDED", output: "manager u-9", error: undefined },
      { name: "count", state: "SUCCEEDED", output: 42, error: undefined },
    ]);
  });
});

describe("compiled CEL programs are cached", () => {
  afterEach(() => {
    vi.restoreAllMocks();
  });

  /** Expressions no other test compiles (the cache is keyed by source text). */
  function uniqueSteps(): { steps: unknown[]; sources: string[] } {
    const tag = randomUUID();
    const sources = [`ctx.trigger.n > 1.0`, `"${tag} " + string(ctx.trigger.n)`, `"${tag} " + (has(ctx.steps.first) ? ctx.first : "skipped")`];
    return {
      sources,
      steps: [
        { name: "first", skipIfTrueCel: sources[0], log: { messageCel: sources[1] } },
        { name: "second", log: { messageCel: sources[2] } },
      ],
    };
  }

  /** How often compileExpression ran for each source, in the order of `sources`. */
  const compilesOf = (spy: { mock: { calls: unknown[][] } }, sources: string[]) =>
    sources.map((source) => spy.mock.calls.filter(([arg]) => arg === source).length);

  it("compiles each expression once when the automation is saved and never again for its runs", async () => {
    const server = await startTestServer();
    try {
      const compile = vi.spyOn(compiledExpression, "compileExpression");
      const { steps, sources } = uniqueSteps();
      const automationId = await createAutomation(server, steps);
      expect(compilesOf(compile, sources)).toEqual([1, 1, 1]);
      const seenAfterSave = compile.mock.calls.length;

      for (let n = 0; n < 5; n++) {
        const execution = await executeToEnd(server, automationId, { n });
        expect(execution.state).toBe("SUCCEEDED");
        expect(execution.steps.map((s) => s.state)).toEqual([n > 1 ? "SKIPPED" : "SUCCEEDED", "SUCCEEDED"]);
      }
      // Five runs, eight evaluations of the three expressions, and no compilation at all.
      expect(compile.mock.calls.length).toBe(seenAfterSave);
    } finally {
      await server.close();
    }
  });

  it("compiles each expression at most once for many runs after a restart emptied the cache", async () => {
    const database = join(mkdtempSync(join(tmpdir(), "accessd-cel-cache-")), "accessd.db");
    const first = await startTestServer({ database });
    const { steps, sources } = uniqueSteps();
    let automationId: string;
    try {
      automationId = await createAutomation(first, steps);
    } finally {
      await first.close();
    }
    const compile = vi.spyOn(compiledExpression, "compileExpression");
    const second = await startTestServer({ database });
    try {
      for (let n = 0; n < 4; n++) expect((await executeToEnd(second, automationId, { n: 0 })).state).toBe("SUCCEEDED");
      expect(compilesOf(compile, sources)).toEqual([1, 1, 1]);
    } finally {
      await second.close();
      rmSync(dirname(database), { recursive: true, force: true });
    }
  });
});

describe("a runaway expression", () => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServer();
  });
  afterAll(() => server.close());

  /** `depth` maps nested over ctx.trigger.xs: xs.length ** depth iterations in all. */
  const nestedMaps = (depth: number) => {
    let source = "0";
    for (let d = 0; d < depth; d++) source = `ctx.trigger.xs.map(v${d}, ${source})`;
    return source;
  };

  it(`fails its step after ${compiledExpression.maxComprehensionIterations} comprehension iterations instead of holding (and exhausting) the server, and each evaluation has the whole budget`, async () => {
    const automationId = await createAutomation(server, [
      // 60 + 60 * 60 = 3,660 iterations each: within the bound, twice in one execution.
      { name: "wide", log: { messageCel: `size(${nestedMaps(2)})` } },
      { name: "wide_again", log: { messageCel: `size(${nestedMaps(2)}) + size([1, 2].filter(x, x > 1))` } },
      // About 13 million iterations: without the bound they hold the server's one thread until
      // its 13 million list elements exhaust the heap (the test process dies of OOM), and a
      // restart would resume the execution at this step.
      { name: "runaway", log: { messageCel: `size(${nestedMaps(4)})` } },
      { name: "after", log: { messageCel: '"not reached"' } },
    ]);
    const execution = await executeToEnd(server, automationId, { xs: Array.from({ length: 60 }, (_, i) => i) });
    expect(execution.state).toBe("FAILED");
    expect(execution.steps).toEqual([
      { name: "wide", state: "SUCCEEDED", output: 60, error: undefined },
      { name: "wide_again", state: "SUCCEEDED", output: 61, error: undefined },
      {
        name: "runaway",
        state: "FAILED",
        output: undefined,
        error: `messageCel: the expression ran more than ${compiledExpression.maxComprehensionIterations} comprehension iterations`,
      },
      { name: "after", state: "PENDING", output: undefined, error: undefined },
    ]);
    expect((await server.call("GET", "/healthz")).status).toBe(200);
  });

  it(`fails its step past a cost of ${compiledExpression.maxEvaluationCost} instead of holding the server (a replacement repeated over a list ran for minutes)`, async () => {
    const automationId = await createAutomation(server, [
      // cel-es's replace searched the rebuilt string again after each occurrence: hours for this one.
      { name: "clean", log: { messageCel: 'ctx.trigger.text.replace("\\n", " ").size()' } },
      { name: "runaway", log: { messageCel: 'ctx.trigger.xs.map(x, ctx.trigger.s.replace("s", ctx.trigger.s)).size()' } },
      { name: "after", log: { messageCel: '"not reached"' } },
    ]);
    const trigger = { text: "line\n".repeat(8_000), s: "s".repeat(10_000), xs: Array.from({ length: 100 }, (_, i) => i) };
    const execution = await executeToEnd(server, automationId, trigger);
    expect(execution.state).toBe("FAILED");
    expect(execution.steps).toEqual([
      { name: "clean", state: "SUCCEEDED", output: 40_000, error: undefined },
      { name: "runaway", state: "FAILED", output: undefined, error: expect.stringContaining(`messageCel: the expression's calls cost more than ${compiledExpression.maxEvaluationCost}`) },
      { name: "after", state: "PENDING", output: undefined, error: undefined },
    ]);
    expect((await server.call("GET", "/healthz")).status).toBe(200);
  });

  it(`fails a log step whose output would pass ${maxExecutionOutputChars} characters of JSON, and keeps one that echoes a large trigger`, async () => {
    const automationId = await createAutomation(server, [
      // A 300 KB string from a 30 KB context (an Execute's context is at most 64 KiB).
      { name: "echo", log: { messageCel: 'ctx.trigger.ten.map(x, ctx.trigger.s).join("")' } },
      // 1,600 references to one 300 KB string: a 480 MB output, stored and answered on every Get, without the bound.
      { name: "repeated", log: { messageCel: "ctx.trigger.xs.map(a, ctx.trigger.xs.map(b, ctx.echo))" } },
    ]);
    const s = "s".repeat(300_000);
    const ten = Array.from({ length: 10 }, (_, i) => i);
    const execution = await executeToEnd(server, automationId, { xs: Array.from({ length: 40 }, (_, i) => i), ten, s: "s".repeat(30_000) });
    expect(execution.state).toBe("FAILED");
    expect(execution.steps).toEqual([
      { name: "echo", state: "SUCCEEDED", output: s, error: undefined },
      {
        name: "repeated",
        state: "FAILED",
        output: undefined,
        error: `messageCel: the output would take the execution's step outputs past ${maxExecutionOutputChars} characters of JSON in all (${maxExecutionOutputChars - 300_003} were left)`,
      },
    ]);
  });

  it(`bounds the outputs of all the steps of an execution together to ${maxExecutionOutputChars} characters, also across a restart`, async () => {
    // 100 steps echoing a 1 MB trigger made a 100 MB execution; 25 of them in a page of the
    // listing exhausted the heap.
    // A 300 KB string built from a 30 KB context, then echoed by the other nine steps.
    const big = { name: "big", log: { messageCel: 'ctx.trigger.ten.map(x, ctx.trigger.s).join("")' } };
    const steps = [big, ...Array.from({ length: 9 }, (_, i) => ({ name: `echo${i}`, log: { messageCel: "ctx.big" } }))];
    const automationId = await createAutomation(server, steps);
    const s = "s".repeat(300_000);
    const execution = await executeToEnd(server, automationId, { s: "s".repeat(30_000), ten: Array.from({ length: 10 }, (_, i) => i) });
    expect(execution.state).toBe("FAILED");
    expect(execution.steps.map((step) => step.state)).toEqual(["SUCCEEDED", "SUCCEEDED", "SUCCEEDED", "FAILED", ...Array(6).fill("PENDING")]);
    expect(execution.steps[3]?.error).toBe(
      `messageCel: the output would take the execution's step outputs past ${maxExecutionOutputChars} characters of JSON in all (${maxExecutionOutputChars - 3 * 300_003} were left)`,
    );
    // A resumed execution counts the outputs recorded before the restart (StepContext is rebuilt from them).
    const context = new StepContext({});
    for (let i = 0; i < 3; i++) context.addOutput(`echo${i}`, s);
    expect(context.outputCharsLeft).toBe(maxExecutionOutputChars - 3 * 300_003);
  });

  it(`refuses an expression nested more than ${compiledExpression.maxExpressionDepth} levels deep with 400 (a 2,000-term sum overflowed the stack: 500)`, async () => {
    const res = await server.call("POST", "/api/v1/automations", {
      displayName: "CEL",
      trigger: { manual: {} },
      steps: [{ name: "deep", log: { messageCel: Array(2_000).fill("1").join("+") } }],
    });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { message: string }).message).toContain(`nested more than ${compiledExpression.maxExpressionDepth} levels deep`);
  });

  it("counts an output's strings as JSON writes them: 180,000 control characters are 1,080,000 characters, not 180,000 (an execution's outputs reached 6 MB)", async () => {
    const id = await createAutomation(server, [{ name: "escaped", log: { messageCel: 'ctx.trigger.l.map(x, ctx.trigger.s).join("")' } }]);
    // The context (10,000 control characters, 60,000 bytes of JSON) within an Execute's 65 KiB.
    const run = await executeToEnd(server, id, { s: "\u0001".repeat(10_000), l: Array(18).fill(0) });
    expect(run.state).toBe("FAILED");
    expect(run.steps[0]?.error).toMatch(/^messageCel: the output would take the execution's step outputs past 1048576 characters of JSON/);
    // Within the limit as JSON writes it: 17 x 10,000 x 6 characters and the quotes.
    expect((await executeToEnd(server, id, { s: "\u0001".repeat(10_000), l: Array(17).fill(0) })).state).toBe("SUCCEEDED");
  });

  it(`fails a step whose output nests lists and maps deeper than ${maxJsonDepth} levels (its execution could not be read: 500 on every Get)`, async () => {
    const wrap = (levels: number) => "[".repeat(levels) + "ctx.trigger" + "]".repeat(levels);
    const trigger = JSON.parse('{"a":'.repeat(maxJsonDepth - 3) + "1" + "}".repeat(maxJsonDepth - 3)) as unknown;
    const id = await createAutomation(server, [
      { name: "fits", log: { messageCel: wrap(3) } },
      { name: "too_deep", log: { messageCel: wrap(4) } },
    ]);
    const run = await executeToEnd(server, id, trigger);
    expect(run.steps.map((step) => [step.state, step.error])).toEqual([
      ["SUCCEEDED", undefined],
      ["FAILED", `messageCel: the output nests lists and maps deeper than ${maxJsonDepth} levels`],
    ]);
  });

  it(`refuses an Execute context nested deeper than ${maxJsonDepth} levels with 400, as a webhook body`, async () => {
    const id = await createAutomation(server, [{ name: "echo", log: { messageCel: "ctx.trigger" } }]);
    const nested = (levels: number) => JSON.parse("[".repeat(levels) + "]".repeat(levels)) as unknown;
    expect((await server.call("POST", `/api/v1/automations/${id}/execute`, { context: nested(maxJsonDepth) })).status).toBe(200);
    const res = await server.call("POST", `/api/v1/automations/${id}/execute`, { context: nested(maxJsonDepth + 1) });
    expect(res.status).toBe(400);
    expect(await res.json()).toEqual({ code: "invalid_argument", message: `context nests lists and structs deeper than ${maxJsonDepth} levels` });
  });

  it("refuses an Execute context that is a Value with no kind set (valid protobuf, no JSON form) with invalid_argument over gRPC (it was a 500 and an error line)", async () => {
    const id = await createAutomation(server, [{ name: "echo", log: { messageCel: "ctx.trigger" } }]);
    const automations = createClient(Automations, createGrpcTransport({ baseUrl: server.url }));
    for (const context of [create(ValueSchema), create(ValueSchema, { kind: { case: "structValue", value: { fields: { a: create(ValueSchema) } } } })]) {
      const refused = await automations.execute({ id, context }, { headers: server.headers }).catch((e: unknown) => ConnectError.from(e));
      expect(refused).toBeInstanceOf(ConnectError);
      expect((refused as ConnectError).code).toBe(Code.InvalidArgument);
      expect((refused as ConnectError).rawMessage).toBe("context holds a google.protobuf.Value with none of its kinds set (null_value, number_value, ...)");
    }
  });

  it.each(["9223372036854775808", "-9223372036854775809", "18446744073709551616u", "0x10000000000000000", "[1, 99999999999999999999]"])(
    "refuses an integer literal out of its type's range with 400, as the CEL spec makes it a syntax error (it was a 500): %s",
    async (literal) => {
      const res = await server.call("POST", "/api/v1/automations", {
        displayName: "CEL",
        trigger: { manual: {} },
        steps: [{ name: "big", log: { messageCel: literal } }],
      });
      expect(res.status).toBe(400);
      expect(((await res.json()) as { message: string }).message).toMatch(/integer literal -?\d+u? is out of range/);
    },
  );

  it("fails the step of a stored expression this version cannot compile, and runs the executions queued behind it", async () => {
    // As if saved by an earlier version without the depth limit: written to the store directly.
    const stale = await createAutomation(server, [{ name: "old", log: { messageCel: '"saved earlier"' } }]);
    const deep = Array(400).fill("1").join(" + ");
    server.store.db
      .prepare("UPDATE automation_versions SET steps = ? WHERE automation_id = ?")
      .run(JSON.stringify([{ name: "old", action: { kind: "log", messageCel: deep }, skipIfTrueCel: "" }]), stale);
    const healthy = await createAutomation(server, [{ name: "fine", log: { messageCel: '"ran"' } }]);

    const staleRun = await executeToEnd(server, stale, {});
    expect(staleRun.state).toBe("FAILED");
    expect(staleRun.steps).toEqual([
      { name: "old", state: "FAILED", output: undefined, error: `messageCel: cannot be compiled: syntax error at 1:601: nested more than ${compiledExpression.maxExpressionDepth} levels deep` },
    ]);
    expect((await executeToEnd(server, healthy, {})).state).toBe("SUCCEEDED");
  });

  it.each(["accessd.comprehensionIteration(true)", "accessd.appendToAccumulator([], [1])"])("cannot be called by name in an expression: %s", async (messageCel) => {
    const res = await server.call("POST", "/api/v1/automations", {
      displayName: "CEL",
      trigger: { manual: {} },
      steps: [{ name: "sneaky", log: { messageCel } }],
    });
    expect(res.status).toBe(400);
  });
});

describe("step outputs with keys JSON treats specially", () => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServer();
  });
  afterAll(() => server.close());

  it('keeps a "__proto__" key, from the trigger and as a step name, in the output (a plain object lost it)', async () => {
    const automationId = await createAutomation(server, [
      { name: "__proto__", log: { messageCel: "ctx.trigger" } },
      { name: "all", log: { messageCel: "ctx.steps" } },
    ]);
    const trigger = '{"__proto__":{"x":1},"y":{"__proto__":5}}';
    const execution = await executeToEnd(server, automationId, JSON.parse(trigger));
    expect(execution.state).toBe("SUCCEEDED");
    expect(JSON.stringify(execution.steps[0]?.output)).toBe(trigger);
    expect(JSON.stringify(execution.steps[1]?.output)).toBe(`{"__proto__":${trigger}}`);
  });

  it("refuses an Execute context with half a character (a lone surrogate escape), over REST and Connect: gRPC clients read it as U+FFFD, JSON ones escaped", async () => {
    const automationId = await createAutomation(server, [{ name: "echo", log: { messageCel: "ctx.trigger" } }]);
    const message = "context escapes half a character: a \\uD800-\\uDFFF escape that is not one of a pair";
    for (const body of ['{"context":{"s":"lone\\ud800"}}', '{"context":{"k\\udfff":1}}', '{"context":["\\ud83d"]}']) {
      const rest = await server.call("POST", `/api/v1/automations/${automationId}/execute`, body);
      expect({ body, status: rest.status, answer: await rest.json() }).toEqual({ body, status: 400, answer: { code: "invalid_argument", message } });
      const connect = await server.call("POST", "/svc.api.automations.v1.Automations/Execute", body.replace("{", `{"id":"${automationId}",`));
      expect({ body, status: connect.status }).toEqual({ body, status: 400 });
    }
    const pair = await executeToEnd(server, automationId, JSON.parse('{"s":"\\ud83d\\ude00"}'));
    expect(pair.steps[0]?.output).toEqual({ s: "😀" });
  });

  it("fails a step whose map has two keys that are one JSON key, rather than keep one of them silently", async () => {
    const automationId = await createAutomation(server, [{ name: "clash", log: { messageCel: '{true: 1, "true": 2}' } }]);
    const execution = await executeToEnd(server, automationId, {});
    expect(execution.steps).toEqual([
      {
        name: "clash",
        state: "FAILED",
        output: undefined,
        error: 'messageCel: the output\'s map has two keys written "true" in JSON (keys of different types, such as true and "true")',
      },
    ]);
  });
});
