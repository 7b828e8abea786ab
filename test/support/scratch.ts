import { mkdtempSync, readdirSync, rmSync, utimesSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll } from "vitest";
import type { CliProcess } from "./spawn-cli.js";

export interface Scratch {
  /** A new empty folder under the system's temp folder. */
  tempDir(): string;
  /** Registers a child process to be killed after the file's tests if it still runs; returns it. */
  track(cli: CliProcess): CliProcess;
}

/**
 * The temporary folders and child processes of one test file. Call it at the file's top level:
 * after the file's tests, every tracked process still running is SIGKILLed and every folder removed.
 */
export function scratch(prefix: string): Scratch {
  const dirs: string[] = [];
  const running: CliProcess[] = [];
  afterAll(() => {
    for (const cli of running) if (cli.child.exitCode === null) cli.child.kill("SIGKILL");
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  });
  return {
    tempDir() {
      const dir = mkdtempSync(join(tmpdir(), prefix));
      dirs.push(dir);
      return dir;
    },
    track(cli) {
      running.push(cli);
      return cli;
    },
  };
}

/** Backdates the files in `dir` whose names start with `prefix` by two minutes: a later run, as a nightly backup is. */
export function backdateFiles(dir: string, prefix: string): void {
  const then = new Date(Date.now() - 120_000);
  for (const name of readdirSync(dir).filter((n) => n.startsWith(prefix))) utimesSync(join(dir, name), then, then);
}
