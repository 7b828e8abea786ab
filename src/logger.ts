import { pino, type Logger } from "pino";
import type { LogLevel } from "./config.js";
import { defaultLogBufferBytes, LogOutput } from "./log-output.js";

export type { Logger };

/** What pino writes its lines to: stdout (LogOutput), or a stream given by a test. */
interface LineDestination {
  write(line: string): unknown;
  flush?(callback?: (error?: Error) => void): void;
  flushSync?(): void;
}

/**
 * The logger's destination: passes each line on, except inside `logInOneWrite`, where the lines
 * are held and then passed on as one string: one write of many lines costs little more than one
 * of a single line (measured when the destination was pino's sonic-boom, before LogOutput: 3.9 us
 * a line when many lines come together, against 1.4 us when they are written as one; issue 7,
 * bench/README.md).
 */
class LineHolder implements LineDestination {
  private held: string[] | undefined;

  constructor(readonly destination: LineDestination) {}

  write(line: string): void {
    if (this.held === undefined) this.destination.write(line);
    else this.held.push(line);
  }

  /** Runs `log` with the lines it writes held, then writes them at once (also when `log` throws). */
  inOneWrite(log: () => void): void {
    if (this.held !== undefined) return log(); // already holding: the outer call writes them
    this.held = [];
    try {
      log();
    } finally {
      const lines = this.held;
      this.held = undefined;
      if (lines.length > 0) this.destination.write(lines.join(""));
    }
  }

  /** pino's `logger.flush()`: the destination's, when it has one. */
  flush(callback?: (error?: Error) => void): void {
    if (typeof this.destination.flush === "function") this.destination.flush(callback);
    else callback?.();
  }

  /** What pino calls after a `fatal` line: the destination's, when it has one. */
  flushSync(): void {
    this.destination.flushSync?.();
  }
}

/**
 * JSON logs on stdout. Secrets are kept out of log objects by construction (log calls name the
 * fields they write; bodies, tokens and secrets are never among them). As a safety net, the
 * top-level fields that would carry a credential are redacted, so a careless `log.info({ headers })`
 * cannot leak a token or a webhook signature. Only exact paths: a wildcard path (`*.secret`) makes
 * pino walk every logged object, 8.5 us per line against 2.5 us (bench/RESULTS.md, issue 7).
 */
export function createLogger(level: LogLevel, destination?: NodeJS.WritableStream, options: { bufferBytes?: number } = {}): Logger {
  const pinoOptions = {
    level,
    base: { service: "accessd" },
    redact: {
      paths: [
        "authorization",
        "headers.authorization",
        'headers["webhook-signature"]',
        "req.headers.authorization",
        'req.headers["webhook-signature"]',
        "client_secret",
        "clientSecret",
        "secret",
      ],
      censor: "[redacted]",
    },
  };
  return pino(pinoOptions, new LineHolder(destination ?? stdoutOutput(options.bufferBytes ?? defaultLogBufferBytes)));
}

let stdout: LogOutput | undefined;

/** The process's one writer of stdout (every logger without a destination shares it). */
function stdoutOutput(bufferBytes: number): LogOutput {
  if (stdout === undefined) {
    const output = new LogOutput(process.stdout.fd, bufferBytes, droppedLinesNotice);
    process.once("exit", () => output.flushAtExit());
    stdout = output;
  }
  stdout.setLimit(bufferBytes);
  return stdout;
}

/** The line written where lines were dropped, once the output takes lines again (pino's shape, level warn). */
function droppedLinesNotice(droppedLines: number): string {
  return `${JSON.stringify({
    level: 40,
    time: Date.now(),
    service: "accessd",
    droppedLines,
    msg: "log lines dropped: the log output was not read fast enough (the lines held for it reached ACCESSD_LOG_BUFFER_MIB), or their write failed",
  })}\n`;
}

function outputOf(logger: Logger): LineDestination | undefined {
  const holder = (logger as unknown as Record<symbol, unknown>)[pino.symbols.streamSym];
  return holder instanceof LineHolder ? holder.destination : undefined;
}

/** Resolves once the lines logged so far are written to stdout, or after `withinMs` (a stuck reader). */
export function flushLogs(logger: Logger, withinMs: number): Promise<void> {
  const output = outputOf(logger);
  return output instanceof LogOutput ? output.drained(withinMs) : Promise.resolve();
}

/** Log lines dropped: stdout not read fast enough, or a failed write (0 for a logger with another destination). */
export function droppedLogLines(logger: Logger): number {
  const output = outputOf(logger);
  return output instanceof LogOutput ? output.droppedLines : 0;
}

/**
 * Runs `log`; the lines it logs through `logger` (or a child of it) reach the destination in one
 * write, after `log` returned. For the many lines of one unit of work, such as the log steps of
 * one batch of the automation worker.
 */
export function logInOneWrite(logger: Logger, log: () => void): void {
  const destination = (logger as unknown as Record<symbol, unknown>)[pino.symbols.streamSym];
  if (destination instanceof LineHolder) destination.inOneWrite(log);
  else log();
}
