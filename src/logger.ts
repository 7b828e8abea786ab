import { pino, type Logger } from "pino";
import type { LogLevel } from "./config.js";

export type { Logger };

/**
 * JSON logs on stdout. Secrets are kept out of log objects by construction (log calls name the
 * fields they write; bodies, tokens and secrets are never among them). As a safety net, the
 * top-level fields that would carry a credential are redacted, so a careless `log.info({ headers })`
 * cannot leak a token or a webhook signature. Only exact paths: a wildcard path (`*.secret`) makes
 * pino walk every logged object, 8.5 us per line against 2.5 us (bench/RESULTS.md, issue 7).
 */
export function createLogger(level: LogLevel, destination?: NodeJS.WritableStream): Logger {
  const options = {
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
  return destination === undefined ? pino(options) : pino(options, destination);
}
