import { randomBytes } from "node:crypto";
import { lstatSync, readdirSync, rmSync } from "node:fs";
import { basename, dirname, join } from "node:path";

/**
 * The name a file gets while this process writes it, before it is linked to `path`:
 * `<path>.<what>-<pid>-<8 hex digits>`. The random part keeps two processes with the same id (in
 * two containers writing to one folder) from ever sharing it. A process killed half-way leaves
 * it behind; `removeLeftovers` finds it.
 */
export function temporaryName(path: string, what: string): string {
  return `${path}.${what}-${process.pid}-${randomBytes(4).toString("hex")}`;
}

/** How long a leftover must have been left alone: a file still being written is newer than this. */
export const leftoverQuietMs = 60_000;

/**
 * Deletes what processes that no longer run left of their temporary files for `path` (names made
 * by `temporaryName`, and those with `-journal` or `.key` after them); returns the names. A file
 * stays if its process still runs (another than this one), if it changed in the last
 * `leftoverQuietMs` (a process in another pid namespace may be writing it: its id means nothing
 * here), or if it is not a plain file or link (a folder that happens to match is not ours).
 */
export function removeLeftovers(path: string, what: string, now = Date.now()): string[] {
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
    const pid = Number(/^(\d{1,10})-[0-9a-f]{8}(-journal|\.key)?$/.exec(name.slice(prefix.length))?.[1]);
    // One of this process's id is not its own (it has not written it: ids were reused, or the
    // process is pid 1 of a container again); the quiet minute below still guards a live writer.
    if (!Number.isSafeInteger(pid) || pid <= 0 || (pid !== process.pid && isRunning(pid))) continue;
    const file = join(folder, name);
    try {
      const stats = lstatSync(file);
      if (!(stats.isFile() || stats.isSymbolicLink()) || now - stats.mtimeMs < leftoverQuietMs) continue;
      rmSync(file, { force: true });
      removed.push(name);
    } catch {
      // Gone meanwhile, or not ours to remove: leave it.
    }
  }
  return removed;
}

/** Whether a process with this id runs (as any user); false once it is gone and reaped. */
export function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    // EPERM: it runs, as another user. Anything but ESRCH (an id out of range): not known to be gone.
    return (e as NodeJS.ErrnoException).code !== "ESRCH";
  }
}
