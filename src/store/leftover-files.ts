import { readdirSync, rmSync } from "node:fs";
import { basename, dirname, join } from "node:path";

/**
 * The name a file gets while this process writes it, before it is linked to `path`:
 * `<path>.<what>-<pid>`. A process killed half-way leaves it behind; `removeLeftovers` finds it.
 */
export function temporaryName(path: string, what: string): string {
  return `${path}.${what}-${process.pid}`;
}

/**
 * Deletes what processes that no longer run left of their temporary files for `path`
 * (`<path>.<what>-<pid>`, and anything named after one: `-journal`, `.key`); returns the names.
 * One with this process's id is stale too (the id was reused: this process has not written it).
 * A live process's file stays: another accessd may be writing it now.
 */
export function removeLeftovers(path: string, what: string): string[] {
  const folder = dirname(path);
  const prefix = `${basename(path)}.${what}-`;
  const removed: string[] = [];
  let names: string[];
  try {
    names = readdirSync(folder);
  } catch {
    return removed;
  }
  for (const name of names) {
    if (!name.startsWith(prefix)) continue;
    const pid = Number(/^\d+/.exec(name.slice(prefix.length))?.[0]);
    if (!Number.isSafeInteger(pid) || pid <= 0 || (pid !== process.pid && isRunning(pid))) continue;
    rmSync(join(folder, name), { force: true });
    removed.push(name);
  }
  return removed;
}

function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    // EPERM: it runs, as another user.
    return (e as NodeJS.ErrnoException).code === "EPERM";
  }
}
