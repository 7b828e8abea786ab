import { describe, expect, it } from "vitest";
import { ThreadShare, watchHeldThread } from "../src/event-loop.js";
import { busyFor } from "./support/busy-thread.js";

describe("ThreadShare", () => {
  it("rests after each piece so the pieces take at most their share of the elapsed time", async () => {
    const share = new ThreadShare(0.25);
    const started = performance.now();
    for (let i = 0; i < 10; i++) await share.piece(() => busyFor(2));
    // 20 ms of work at a quarter of the thread: at least 80 ms in all (a turn alone would be ~20).
    expect(performance.now() - started).toBeGreaterThanOrEqual(0.95 * 80);
  });

  it("owes the rest of pieces shorter than a timer's millisecond until it adds up, and returns each piece's value", async () => {
    const share = new ThreadShare(0.5, 5);
    const values: number[] = [];
    const started = performance.now();
    for (let i = 0; i < 20; i++) values.push(await share.piece(() => (busyFor(0.5), i)));
    expect(values).toEqual([...Array(20).keys()]);
    // 10 ms of work at half the thread: about 10 ms of rest, taken in sleeps of 5 ms or more.
    expect(performance.now() - started).toBeGreaterThanOrEqual(0.95 * 20);
  });

  it("lets requests in between pieces that owe less than a sleep (a turn of the event loop)", async () => {
    const share = new ThreadShare(0.9, 1_000);
    let turns = 0;
    const tick = (): void => {
      turns++;
    };
    for (let i = 0; i < 3; i++) {
      setImmediate(tick);
      await share.piece(() => undefined);
    }
    expect(turns).toBe(3);
  });

  it("counts at most maxPieceMs of a piece as its work (a 60 s pause of the process inside one owed 9 minutes of rest at a tenth)", async () => {
    const share = new ThreadShare(0.1, 5, 20);
    const started = performance.now();
    await share.piece(() => busyFor(60)); // as if paused: 60 ms, counted 20, rests 180 (not 540)
    expect(performance.now() - started).toBeLessThan(450);
    expect(performance.now() - started).toBeGreaterThanOrEqual(0.95 * (60 + 180));
  });

  it("refuses a share outside (0, 1]", () => {
    for (const bad of [0, -0.1, 1.5, Number.NaN]) expect(() => new ThreadShare(bad)).toThrow(RangeError);
    expect(() => new ThreadShare(1)).not.toThrow();
  });
});

describe("watchHeldThread", () => {
  it("says in a line how long the thread was held past the threshold (a 60 s pause of the process left no line)", async () => {
    const lines: { heldMs: number }[] = [];
    const stop = watchHeldThread({ warn: (fields) => lines.push(fields as { heldMs: number }) }, 300, 50);
    try {
      await new Promise((r) => setTimeout(r, 200));
      busyFor(1_000);
      await new Promise((r) => setTimeout(r, 200));
      // The hold less at most one tick (a tick of half the threshold under-said it by up to half).
      expect(lines.some((line) => line.heldMs >= 940 && line.heldMs <= 1_200), JSON.stringify(lines)).toBe(true);
    } finally {
      stop();
    }
  });
});
