import { randomUUID } from "node:crypto";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { signHmacWebhook } from "../../src/webhooks/index.js";
import { scratch } from "../support/scratch.js";
import { createHmacListener, serveProcess, until, type HmacListener, type ServedProcess } from "../support/served-process.js";

/**
 * accessd logs to stdout, and whatever reads it (a terminal, a container runtime, a log shipper)
 * can stop reading: a stuck shipper, a full disk behind it, a pipe nobody drains. The server must
 * neither grow without bound holding the unread lines nor hang on them: it keeps at most
 * ACCESSD_LOG_BUFFER_MIB of lines, counts what it drops (and says so in the log once it can), and
 * a SIGTERM ends it in bounded time whatever the reader does, so that the database's serving lock
 * is released for the next start.
 */

const { tempDir, track } = scratch("accessd-stuck-log-");

/**
 * Twelve log steps whose lines carry the event's 50,000-character note, cut to 4,096 characters
 * (an automation log line's most): an event writes some 49 KB of log, 21 events pass 1 MiB.
 */
const loudSteps = Array.from({ length: 12 }, (_, i) => ({ name: `say${i}`, log: { messageCel: "ctx.trigger.note" } }));
const note = "n".repeat(50_000);

async function postEvent(served: ServedProcess, hook: HmacListener, text = note): Promise<number> {
  const body = JSON.stringify({ note: text });
  const headers = signHmacWebhook({ url: hook.endpointUrl, body: Buffer.from(body), eventId: randomUUID() }, hook.secret);
  const res = await fetch(served.url + hook.path, { method: "POST", headers: { ...headers }, body });
  await res.text();
  return res.status;
}

async function metric(served: ServedProcess, name: string): Promise<number> {
  const text = await (await fetch(`${served.url}/metrics`)).text();
  const value = new RegExp(`^${name} (\\d+)$`, "m").exec(text)?.[1];
  if (value === undefined) throw new Error(`${name} is not in /metrics`);
  return Number(value);
}

/** Serves with a 1 MiB log buffer and a loud listener, then stops reading the server's stdout. */
async function serveWithStuckReader(): Promise<{ served: ServedProcess; hook: HmacListener }> {
  const served = await serveProcess({ ACCESSD_DATABASE: join(tempDir(), "accessd.db"), ACCESSD_LOG_BUFFER_MIB: "1" });
  track(served.cli);
  const hook = await createHmacListener(served, "Loud", loudSteps);
  served.cli.child.stdout?.pause(); // the reader stops: the pipe fills, and the server holds what follows
  return { served, hook };
}

/** 80 events (3.9 MB of log lines), all accepted and run. */
async function floodLog(served: ServedProcess, hook: HmacListener): Promise<void> {
  for (let i = 0; i < 80; i++) expect(await postEvent(served, hook)).toBe(200);
  await until("every execution ran", async () => (await metric(served, "accessd_automation_queue_depth")) === 0);
}

/** The lines of the server's stdout so far that end with a newline (a write can arrive in parts). */
function completeLines(served: ServedProcess): string[] {
  return served.cli.stdout().split("\n").slice(0, -1);
}

/**
 * Once the reader is back, the megabyte the server held drains through the pipe over some tens of
 * milliseconds, and an event whose lines come before there is room for them is dropped too
 * (counted, as any other): the first event after it was lost in about one run of six (a 30 s
 * timeout in CI). Sends small events until one's lines are all written; returns how many were
 * sent and the last one's marker.
 */
async function sendUntilOneIsWrittenWhole(served: ServedProcess, hook: HmacListener): Promise<{ sent: number; lastMarker: string }> {
  for (let sent = 1; sent <= 20; sent++) {
    const marker = `after the reader came back (${sent})`;
    expect(await postEvent(served, hook, marker)).toBe(200);
    const writtenWhole = () => completeLines(served).filter((line) => line.includes(marker)).length === loudSteps.length;
    const written = await until(`event ${sent}'s lines are written`, writtenWhole, 1_000).then(() => true, () => false);
    if (written) return { sent, lastMarker: marker };
  }
  throw new Error("none of 20 events sent after the reader came back had its lines written");
}

describe("a stuck log reader", () => {
  it("holds at most ACCESSD_LOG_BUFFER_MIB of lines, counts and reports what it drops, and goes on serving", async () => {
    const { served, hook } = await serveWithStuckReader();
    await floodLog(served, hook);

    // 3.9 MB of lines against 1 MiB held and the pipe's own buffer: most of them are dropped.
    const dropped = await metric(served, "accessd_log_lines_dropped_total");
    expect(dropped).toBeGreaterThanOrEqual(40);
    expect((await fetch(`${served.url}/healthz`)).status).toBe(200);

    // The reader comes back: the held lines arrive, then the notice of how many were lost, then new lines.
    served.cli.child.stdout?.resume();
    const { sent, lastMarker } = await sendUntilOneIsWrittenWhole(served, hook);
    const lines = completeLines(served);
    const droppedInAll = await metric(served, "accessd_log_lines_dropped_total");
    const notices = lines.filter((line) => line.includes('"droppedLines"'));
    const parsed = notices.map((line) => JSON.parse(line) as { level: number; droppedLines: number; msg: string });
    // A notice is written whenever there is room again after drops (maybe between two floods of drops too).
    expect(parsed.reduce((sum, notice) => sum + notice.droppedLines, 0)).toBe(droppedInAll);
    for (const notice of parsed) {
      expect(notice).toEqual({ level: 40, time: expect.any(Number), service: "accessd", droppedLines: expect.any(Number), msg: expect.stringContaining("ACCESSD_LOG_BUFFER_MIB") });
    }
    expect(lines.findIndex((line) => line.includes(lastMarker))).toBeGreaterThan(lines.indexOf(notices.at(-1)!));
    // Every line is either written or counted as dropped.
    expect(lines.filter((line) => line.includes('"automation log"')).length + droppedInAll).toBe((80 + sent) * loudSteps.length);
  });

  it("does not keep a SIGTERM from ending the process, while the reader is stuck and after it went away", async () => {
    const { served, hook } = await serveWithStuckReader();
    await floodLog(served, hook);

    const stopping = Date.now();
    served.cli.child.kill("SIGTERM");
    // The reader goes away while the server is stopping with lines still held (EPIPE from then on).
    setTimeout(() => served.cli.child.stdout?.destroy(), 500);
    expect(await served.cli.exited).toEqual({ code: 0, signal: null });
    // The drain, and at most 2 s waiting for the log lines to be read.
    expect(Date.now() - stopping).toBeLessThan(6_000);
  });
});
