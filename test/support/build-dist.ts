import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";

/**
 * Vitest's global setup: builds `dist/` from the sources once before any test file runs (about a
 * second), so every test that starts `accessd` as a process (`spawnCli`) runs what `src/` says
 * now, as `npm start` would, and none pays tsx's start-up (1-3 s a process on this VM) instead.
 */
export default function buildDist(): void {
  const repoRoot = fileURLToPath(new URL("../../", import.meta.url));
  try {
    execFileSync(`${repoRoot}node_modules/.bin/tsc`, ["-p", "tsconfig.build.json"], { cwd: repoRoot, stdio: "inherit" });
  } catch {
    // A type error: tsc has still written dist/ (no noEmitOnError), and the tests run, so one
    // error mid-edit does not hide every result. `npm run typecheck` (and CI) report it.
    console.warn("build-dist: tsc reported errors (above); the tests run on what it emitted");
  }
}
