import { existsSync, lutimesSync, mkdirSync, readdirSync, symlinkSync, utimesSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { removeLeftovers, temporaryName } from "../src/store/leftover-files.js";
import { scratch } from "./support/scratch.js";

const { tempDir } = scratch("accessd-leftovers-");

/** Files named `names` in a new folder, last changed `agoMs` ago. */
function filesIn(names: string[], agoMs: number): string {
  const dir = tempDir();
  const then = new Date(Date.now() - agoMs);
  for (const name of names) {
    writeFileSync(join(dir, name), "left");
    utimesSync(join(dir, name), then, then);
  }
  return dir;
}

/**
 * What a process killed while it wrote a file under a temporary name (`temporaryName`) left,
 * removed by the next one that writes to that name, and nothing else.
 */
describe("removeLeftovers", () => {
  const gone = 2 ** 22 + 1; // above Linux's largest pid: no process has it

  it("removes the temporary files, journals and keys of processes that are gone, and of this process's id (it did not write them)", () => {
    const names = [`c.db.partial-${gone}-0123abcd`, `c.db.partial-${gone}-0123abcd-journal`, `c.db.partial-${gone}-0123abcd.key`, `c.db.partial-${process.pid}-89abcdef`];
    const dir = filesIn(names, 120_000);
    expect(removeLeftovers(join(dir, "c.db"), "partial").sort()).toEqual([...names].sort());
    expect(readdirSync(dir)).toEqual([]);
  });

  it("keeps a running process's file, one changed in the last minute, other names, a folder, and a link's target", () => {
    const kept = [
      `c.db.partial-${process.ppid}-0123abcd`, // its process runs
      "c.db.partial-2024-12-01.db", // not a temporary name
      `c.db.partial-${gone}-0123abcd.old`,
      `c.db.writing-${gone}-0123abcd`, // another kind
      `d.db.partial-${gone}-0123abcd`, // another file's
    ];
    const dir = filesIn(kept, 120_000);
    writeFileSync(join(dir, `c.db.partial-${gone}-4567cdef`), "being written in another pid namespace");
    mkdirSync(join(dir, `c.db.partial-${gone}-deadbeef`));
    const target = join(tempDir(), "target");
    writeFileSync(target, "elsewhere");
    const link = `c.db.partial-${gone}-feedface`;
    symlinkSync(target, join(dir, link));
    const then = new Date(Date.now() - 120_000);
    lutimesSync(join(dir, link), then, then); // the link's own time; its target is new
    expect(removeLeftovers(join(dir, "c.db"), "partial")).toEqual([link]); // the link, not its target
    expect(existsSync(target)).toBe(true);
    expect(readdirSync(dir).sort()).toEqual([...kept, `c.db.partial-${gone}-4567cdef`, `c.db.partial-${gone}-deadbeef`].sort());
  });

  it("names are made of the path, the kind, the process id and a random part", () => {
    const name = temporaryName("/x/c.db", "partial");
    expect(name).toMatch(new RegExp(`^/x/c\\.db\\.partial-${process.pid}-[0-9a-f]{8}$`));
    expect(temporaryName("/x/c.db", "partial")).not.toBe(name);
  });
});
