import { pino, type Logger } from "pino";
import type { LogLevel } from "./config.js";

export type { Logger };

/**
 * JSON logs on stdout. Headers that carry credentials are redacted wherever they appear, so a
 * careless `log.info({ headers })` cannot leak a token or a webhook signature.
 */
export function createLogger(level: LogLevel, destination?: NodeJS.WritableStream): Logger {
  const options = {
    level,
    base: { service: "accessd" },
    redact: {
      paths: [
        "*.authorization",
        "*.headers.authorization",
        "*.headers['webhook-signature']",
        "*.client_secret",
        "*.clientSecret",
        "*.secret",
      ],
      censor: "[redacted]",
    },
  };
  return destination === undefined ? pino(options) : pino(options, destination);
}
