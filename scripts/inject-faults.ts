/**
 * `npm run faults`: shows that the reliability tests catch what they guard against (issue 7's
 * acceptance). Each fault breaks one guarantee, in a throw-away git worktree of HEAD (the working
 * tree is never touched, so commit first), and runs there the test that should catch it. The run
 * fails when a test does not catch its fault, or when a fault's code has moved (the text it edits
 * is no longer found: update the fault with the code).
 *
 *   npx tsx scripts/inject-faults.ts [name ...]      all faults by default; about a minute each
 */
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { stripVTControlCharacters } from "node:util";

interface Edit {
  file: string;
  find: string;
  replace: string;
}

interface Fault {
  name: string;
  /** The guarantee it breaks, as the report says it. */
  breaks: string;
  /** The test file that must fail with it. */
  test: string;
  edits: Edit[];
}

const crashTest = "test/reliability/crash-under-load.test.ts";

const faults: Fault[] = [
  {
    name: "lost",
    breaks: "a webhook answered 200 before its event is committed (commits held back 100 ms)",
    test: crashTest,
    edits: [
      { file: "src/webhooks/group-commit.ts", find: "setImmediate(this.endOfTurn);", replace: "setTimeout(this.endOfTurn, 100);" },
      {
        file: "src/webhooks/event-acceptance.ts",
        find: "    const accepted = await this.commits.run(",
        replace: "    const early = newId();\n    const acceptedLater = this.commits.run(",
      },
      {
        file: "src/webhooks/event-acceptance.ts",
        find: "      return execution;\n    });\n",
        replace: [
          "      return execution;",
          "    });",
          "    acceptedLater.then((a) => { if (a !== undefined && !(a instanceof Rejection)) this.handOff(a, event.bodyBytes); }, () => {});",
          "    return { executionId: early };",
          "    const accepted = await acceptedLater;",
          "",
        ].join("\n"),
      },
    ],
  },
  {
    name: "double",
    breaks: "the duplicate check: an event is recorded and run whatever the index of event keys says",
    test: crashTest,
    edits: [
      {
        file: "src/store/webhook-events-repository.ts",
        find: "    if (!keys.add(listenerId, eventId)) return false;",
        replace: "    keys.add(listenerId, eventId);",
      },
    ],
  },
  {
    name: "forgetful",
    breaks: "the index of event keys is never filled from the stored records: a restarted server forgets what it accepted",
    test: crashTest,
    edits: [
      {
        file: "src/store/webhook-events-repository.ts",
        find: "      for (const [listenerId, eventId] of this.allPairsStmt.iterate()) {",
        replace: "      for (const [listenerId, eventId] of [] as [string, string][]) {",
      },
    ],
  },
  {
    name: "500",
    breaks: "a webhook body that is not JSON throws (the parse unguarded) instead of a 400",
    test: "test/reliability/hostile-input.test.ts",
    edits: [
      {
        file: "src/webhooks/json-body.ts",
        find: [
          "  let value: JsonValue;",
          "  try {",
          "    value = JSON.parse(text) as JsonValue;",
          "  } catch {",
          '    return badRequest("body_not_json", "the body is not valid JSON");',
          "  }",
        ].join("\n"),
        replace: "  const value = JSON.parse(text) as JsonValue;",
      },
    ],
  },
  {
    name: "no-deadline",
    breaks: "requests have no deadline: a stalled or trickled body holds its connection for good",
    test: "test/reliability/slow-clients.test.ts",
    edits: [
      {
        file: "src/server/http-server.ts",
        find: "    enforceDeadlines(req, res, this.options.requestTimeoutMs, facts, () => this.stopping);",
        replace: "    void enforceDeadlines; void RequestTimeoutError;",
      },
    ],
  },
];

const root = fileURLToPath(new URL("..", import.meta.url));
const git = (args: string[], cwd = root) => {
  const result = spawnSync("git", args, { cwd, encoding: "utf8" });
  if (result.status !== 0) throw new Error(`git ${args.join(" ")}: ${result.stderr}`);
  return result.stdout.trim();
};

interface Outcome {
  fault: Fault;
  verdict: "caught" | "NOT CAUGHT" | "code moved" | "did not run";
  detail: string[];
}

// Ctrl-C reaches the test run too (one process group): the fault's worktree is removed, then the script stops.
let interrupted = false;
process.on("SIGINT", () => {});

function inject(fault: Fault): Outcome {
  const dir = mkdtempSync(join(tmpdir(), `accessd-fault-${fault.name}-`)); // empty: git adds the worktree in it
  git(["worktree", "add", "--detach", "--quiet", dir, "HEAD"]);
  try {
    symlinkSync(join(root, "node_modules"), join(dir, "node_modules"));
    for (const edit of fault.edits) {
      const path = join(dir, edit.file);
      const text = existsSync(path) ? readFileSync(path, "utf8") : "";
      if (!text.includes(edit.find)) return { fault, verdict: "code moved", detail: [`${edit.file} no longer has: ${edit.find.split("\n")[0]}`] };
      writeFileSync(path, text.replace(edit.find, edit.replace));
    }
    const run = spawnSync("npx", ["vitest", "run", fault.test], { cwd: dir, encoding: "utf8", timeout: 10 * 60_000 });
    if (run.signal === "SIGINT" || run.status === 130) interrupted = true;
    if (interrupted) return { fault, verdict: "did not run", detail: ["interrupted"] };
    const output = stripVTControlCharacters(`${run.stdout}\n${run.stderr}`).split("\n");
    const failed = output.filter((line) => /^\s*×/.test(line)).map((line) => line.trim());
    const summary = output.find((line) => /^\s*Tests\s/.test(line))?.trim() ?? "(no test summary: the run did not get to its tests)";
    // What the failing assertion said: the crash test's lost and doubled events, the answers of 500.
    const findings = output.filter((line) => /^\s*AssertionError/.test(line)).map((line) => line.trim()).slice(0, 2);
    const answers500 = output.filter((line) => /status 5\d\d\b/.test(line)).length;
    if (answers500 > 0) findings.push(`${answers500} answers with a status 5xx`);
    if (run.status === 0) return { fault, verdict: "NOT CAUGHT", detail: [summary] };
    if (failed.length === 0) return { fault, verdict: "did not run", detail: [summary, ...output.filter((l) => /error/i.test(l)).slice(0, 5)] };
    return { fault, verdict: "caught", detail: [summary, ...failed, ...findings] };
  } finally {
    git(["worktree", "remove", "--force", dir]);
  }
}

const names = process.argv.slice(2);
const unknown = names.filter((name) => !faults.some((fault) => fault.name === name));
if (unknown.length > 0) {
  process.stderr.write(`unknown fault(s): ${unknown.join(", ")}; the faults: ${faults.map((f) => f.name).join(", ")}\n`);
  process.exit(2);
}
const chosen = names.length === 0 ? faults : faults.filter((fault) => names.includes(fault.name));
process.stdout.write(`Injecting ${chosen.length} fault(s) into HEAD ${git(["rev-parse", "--short", "HEAD"])}, each in a worktree of its own.\n`);
let allCaught = true;
for (const fault of chosen) {
  process.stdout.write(`\n${fault.name}: ${fault.breaks}\n  ${fault.test} ... `);
  const outcome = inject(fault);
  allCaught &&= outcome.verdict === "caught";
  process.stdout.write(`${outcome.verdict}\n${outcome.detail.map((line) => `    ${line}`).join("\n")}\n`);
  if (interrupted) process.exit(130);
}
process.stdout.write(allCaught ? "\nEvery fault was caught.\n" : "\nSome fault was not caught (see above).\n");
process.exit(allCaught ? 0 : 1);
