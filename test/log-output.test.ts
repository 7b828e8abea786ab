import { closeSync, mkdtempSync, openSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { LogOutput } from "../src/log-output.js";

/**
 * The background writer of the server's log lines (src/log-output.ts): it holds at most its limit
 * of unwritten text, counts what it drops and says so once it can, and a write that fails costs
 * the lines of that write only. The child-process view (a stuck stdout reader, SIGTERM) is in
 * test/reliability/stuck-log-reader.test.ts.
 */

const dir = mkdtempSync(join(tmpdir(), "accessd-log-output-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const notice = (dropped: number) => `${JSON.stringify({ msg: "dropped", droppedLines: dropped })}\n`;
const line = (n: number) => `${JSON.stringify({ msg: "line", n, pad: "x".repeat(30) })}\n`;

describe("LogOutput", () => {
  it("holds at most its limit while a write is under way, drops and counts the rest, and writes a notice before the next line", async () => {
    const path = join(dir, "bounded.log");
    const fd = openSync(path, "w");
    const output = new LogOutput(fd, 1_000, notice);
    // Written in one go: the first line goes to write(2) at once, the others wait in memory.
    for (let n = 0; n < 100; n++) output.write(line(n));
    const held = Math.floor(1_000 / line(0).length); // what fits beside the first line in flight, about
    expect(output.droppedLines).toBeGreaterThanOrEqual(100 - held - 1);
    expect(output.droppedLines).toBeLessThanOrEqual(100 - held + 1);
    await output.drained(1_000);
    output.write(line(100));
    await output.drained(1_000);
    closeSync(fd);

    const written = readFileSync(path, "utf8").trimEnd().split("\n").map((text) => JSON.parse(text) as { msg: string; n?: number; droppedLines?: number });
    const kept = 100 - output.droppedLines;
    expect(written.slice(0, kept).map((entry) => entry.n)).toEqual(Array.from({ length: kept }, (_, n) => n));
    expect(written.slice(kept)).toEqual([{ msg: "dropped", droppedLines: output.droppedLines }, expect.objectContaining({ n: 100 })]);
  });

  it("counts the lines of a failing write (ENOSPC) as dropped and tries every later write", async () => {
    const fd = openSync("/dev/full", "w");
    const output = new LogOutput(fd, 1_000_000, notice);
    try {
      output.write(line(0) + line(1));
      await output.drained(1_000);
      expect(output.droppedLines).toBe(2);
      output.write(line(2));
      await output.drained(1_000);
      output.write(line(3));
      await output.drained(1_000);
      expect(output.droppedLines).toBe(4);
    } finally {
      closeSync(fd);
    }
  });
});
