import { configDefaults, type Config } from "../../src/config.js";
import { createLogger } from "../../src/logger.js";
import { startAccessd, type Accessd } from "../../src/main.js";

export interface TestServer extends Accessd {
  /** Headers every API request of a test should carry (the Authorization header, once auth exists). */
  headers: Record<string, string>;
  /** fetch against the server, with `headers` added; a JSON `json` body sets Content-Type. */
  call(method: string, path: string, json?: unknown, extraHeaders?: Record<string, string>): Promise<Response>;
}

/** A real accessd on an ephemeral port of 127.0.0.1, over an in-memory database. */
export async function startTestServer(overrides: Partial<Config> = {}): Promise<TestServer> {
  const config: Config = {
    ...configDefaults,
    port: 0,
    database: ":memory:",
    logLevel: "silent",
    ...overrides,
  };
  const accessd = await startAccessd(config, createLogger(config.logLevel));
  const headers: Record<string, string> = {};
  return Object.assign(accessd, {
    headers,
    call(method: string, path: string, json?: unknown, extraHeaders: Record<string, string> = {}) {
      return fetch(accessd.url + path, {
        method,
        headers: {
          ...headers,
          ...(json === undefined ? {} : { "content-type": "application/json" }),
          ...extraHeaders,
        },
        body: json === undefined ? undefined : typeof json === "string" ? json : JSON.stringify(json),
      });
    },
  });
}
