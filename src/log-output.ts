import { write, writeSync } from "node:fs";

/** The most log text the server holds while its output is not being read (configDefaults.logBufferBytes). */
export const defaultLogBufferBytes = 16 * 1024 * 1024;

/** How long a graceful stop waits for the held log lines to be written before the process exits. */
export const shutdownLogFlushMs = 2_000;

/** Joined lines handed to one write(2), at most (more is written in the next one). */
const chunkChars = 1024 * 1024;

/** A full non-blocking pipe (EAGAIN): try again this much later. */
const retryAfterFullMs = 10;

/** A line saying how many lines were dropped before it, queued where the gap is. */
interface Notice {
  text: string;
  dropped: number;
}

/**
 * Log lines on a file descriptor (stdout), written in the background and never waited for by
 * the code that logs. What a reader does not take fast enough is held in memory, up to
 * `limitChars`; past that, lines are dropped and counted, and once there is room again a line
 * saying how many were lost is written first (`noticeLine`). A write that fails (the reader gone:
 * EPIPE; a full disk behind a redirect: ENOSPC) loses its lines, counted the same way, and the
 * next one is tried: the server goes on, and its logs come back when the output does.
 *
 * Why not pino's own destination (sonic-boom): it holds any amount of unread output (a log
 * reader that stops, such as a stuck log shipper, grew the server from 220 to 355 MB in 30 s
 * of API load, and on until it would run out of memory), and at exit it writes what it holds synchronously,
 * retrying for good: with the reader stuck, or gone (EPIPE, retried every 100 ms), a SIGTERM
 * never ended the process, which kept the database's serving lock so that no new server could
 * start. Here a graceful stop waits at most `shutdownLogFlushMs` (`drained`), and the exit hook
 * writes only while the output takes lines at once.
 */
export class LogOutput {
  private queue: (string | Notice)[] = [];
  private queuedChars = 0;
  /** The bytes being written (handed to write(2)), and how many of them are written. */
  private inFlight: Buffer | undefined;
  private inFlightWritten = 0;
  /** In the bytes being written: how many notice lines, and the drops they report. */
  private inFlightNotices = 0;
  private inFlightNoticeDropped = 0;
  private droppedSinceNotice = 0;
  private droppedTotal = 0;
  private drainWaiters: (() => void)[] = [];

  constructor(
    private readonly fd: number,
    private limitChars: number,
    private readonly noticeLine: (droppedLines: number) => string,
  ) {}

  /** Lines dropped since start: not read fast enough, or their write failed (the /metrics counter). */
  get droppedLines(): number {
    return this.droppedTotal;
  }

  setLimit(limitChars: number): void {
    this.limitChars = limitChars;
  }

  /** Queues `text` (one or more whole lines) for writing; drops it when the held output is at its limit. */
  write(text: string): void {
    if (this.held() + text.length > this.limitChars) {
      this.dropped(countLines(text));
      return;
    }
    if (this.droppedSinceNotice > 0) {
      const notice = { text: this.noticeLine(this.droppedSinceNotice), dropped: this.droppedSinceNotice };
      this.droppedSinceNotice = 0;
      this.queue.push(notice);
      this.queuedChars += notice.text.length;
    }
    this.queue.push(text);
    this.queuedChars += text.length;
    if (this.inFlight === undefined) this.writeNextChunk();
  }

  /** Resolves once everything queued is written (or failed), or `withinMs` passed. */
  drained(withinMs: number): Promise<void> {
    if (this.inFlight === undefined) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, withinMs);
      this.drainWaiters.push(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }

  /** pino's `logger.flush(callback)`: calls back once drained (or after `shutdownLogFlushMs`). */
  flush(callback?: (error?: Error) => void): void {
    void this.drained(shutdownLogFlushMs).then(() => callback?.());
  }

  /** pino's synchronous flush: what the exit hook does. */
  flushSync(): void {
    this.flushAtExit();
  }

  /**
   * At exit (no event loop left): writes what is queued, synchronously, while no background
   * write is pending (one pending means the reader is slow or stuck) and only as long as the
   * output takes it at once; anything else is left unwritten rather than hang the exit.
   */
  flushAtExit(): void {
    if (this.inFlight !== undefined || this.queue.length === 0) return;
    const bytes = Buffer.from(this.queue.map(textOf).join(""));
    this.queue = [];
    this.queuedChars = 0;
    let written = 0;
    try {
      while (written < bytes.length) written += writeSync(this.fd, bytes, written, bytes.length - written);
    } catch {
      // EAGAIN (full), EPIPE (gone): what is left is not written.
    }
  }

  private held(): number {
    return this.queuedChars + (this.inFlight === undefined ? 0 : this.inFlight.length - this.inFlightWritten);
  }

  private dropped(lines: number): void {
    this.droppedSinceNotice += lines;
    this.droppedTotal += lines;
  }

  private writeNextChunk(): void {
    if (this.queue.length === 0) {
      this.inFlight = undefined;
      this.releaseDrainWaiters();
      return;
    }
    let chars = 0;
    let count = 0;
    this.inFlightNotices = 0;
    this.inFlightNoticeDropped = 0;
    while (count < this.queue.length && (count === 0 || chars + textOf(this.queue[count]!).length <= chunkChars)) {
      const entry = this.queue[count]!;
      if (typeof entry !== "string") {
        this.inFlightNotices++;
        this.inFlightNoticeDropped += entry.dropped;
      }
      chars += textOf(entry).length;
      count++;
    }
    const chunk = this.queue.slice(0, count);
    this.queue = count === this.queue.length ? [] : this.queue.slice(count);
    this.queuedChars -= chars;
    this.inFlight = Buffer.from(chunk.map(textOf).join(""));
    this.inFlightWritten = 0;
    this.writeInFlight();
  }

  private readonly writeInFlight = (): void => {
    const bytes = this.inFlight!;
    write(this.fd, bytes, this.inFlightWritten, bytes.length - this.inFlightWritten, null, (error, written) => {
      if (error?.code === "EAGAIN") {
        setTimeout(this.writeInFlight, retryAfterFullMs).unref();
        return;
      }
      if (error !== null) {
        // Lost: its lines count as dropped, and (unless part of it was written) the notices it
        // carried report theirs again with the next one.
        const whole = this.inFlightWritten === 0;
        const unwritten = bytes.subarray(this.inFlightWritten).toString();
        this.dropped(Math.max(countLines(unwritten) - (whole ? this.inFlightNotices : 0), 0));
        if (whole) this.droppedSinceNotice += this.inFlightNoticeDropped;
        this.writeNextChunk();
        return;
      }
      this.inFlightWritten += written;
      if (this.inFlightWritten < bytes.length) this.writeInFlight();
      else this.writeNextChunk();
    });
  };

  private releaseDrainWaiters(): void {
    const waiters = this.drainWaiters;
    this.drainWaiters = [];
    for (const resolve of waiters) resolve();
  }
}

function textOf(entry: string | Notice): string {
  return typeof entry === "string" ? entry : entry.text;
}

function countLines(text: string): number {
  let lines = 0;
  for (let at = text.indexOf("\n"); at !== -1; at = text.indexOf("\n", at + 1)) lines++;
  return Math.max(lines, 1);
}
