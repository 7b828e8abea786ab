import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { fileURLToPath } from "node:url";

/** The repository root, whatever the working directory of the test run. */
export const repoRoot = fileURLToPath(new URL("../../", import.meta.url));

export interface CliProcess {
  child: ChildProcess;
  stdout: () => string;
  stderr: () => string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** The built CLI that `npm start` and the `accessd` bin run (`node dist/src/cli/main.js`). */
export const builtCli = `${repoRoot}dist/src/cli/main.js`;

/**
 * Runs `accessd <args>` as `npm start` and the `accessd` bin do (`node dist/src/cli/main.js`; the
 * global setup, test/support/build-dist.ts, builds dist/ from the sources before the tests), with
 * only the given ACCESSD_* variables (none inherited from the test's environment).
 */
export function spawnCli(args: string[], env: Record<string, string>, cwd = repoRoot): CliProcess {
  return spawnNode([builtCli, ...args], env, cwd);
}

function spawnNode(nodeArgs: string[], env: Record<string, string>, cwd: string): CliProcess {
  const inherited = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("ACCESSD_")));
  const child = spawn(process.execPath, nodeArgs, {
    cwd,
    env: { ...inherited, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  let err = "";
  child.stdout?.on("data", (c: Buffer) => (out += c.toString()));
  child.stderr?.on("data", (c: Buffer) => (err += c.toString()));
  const exited = once(child, "exit").then(([code, signal]) => ({
    code: code as number | null,
    signal: signal as NodeJS.Signals | null,
  }));
  return { child, stdout: () => out, stderr: () => err, exited };
}

/** Resolves with the port from the "accessd listening" log line, or rejects when the process exits first. */
export async function listeningPort(cli: CliProcess, timeoutMs = 20_000): Promise<number> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    for (const line of cli.stdout().split("\n")) {
      if (!line.includes("accessd listening")) continue;
      const port = (JSON.parse(line) as { port?: number }).port;
      if (typeof port === "number") return port;
    }
    if (cli.child.exitCode !== null) throw new Error(`accessd exited early: ${cli.stderr()}`);
    if (Date.now() > deadline) throw new Error(`accessd did not start: ${cli.stdout()} ${cli.stderr()}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
