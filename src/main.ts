import type { AddressInfo } from "node:net";
import { registerApiServices } from "./api/index.js";
import { systemClock, type Clock } from "./clock.js";
import type { Config } from "./config.js";
import type { Logger } from "./logger.js";
import { PageTokenCodec } from "./pagination/index.js";
import { ConnectHandlers } from "./server/connect-handlers.js";
import { HttpServer } from "./server/http-server.js";
import { loggingInterceptor } from "./server/logging-interceptor.js";
import { RestTranscoder } from "./server/rest-transcoder.js";
import { Store } from "./store/store.js";

export interface Accessd {
  address: AddressInfo;
  /** http://host:port of the listening socket. */
  url: string;
  store: Store;
  config: Config;
  /** Graceful stop: drain requests, close the store. Safe to call twice. */
  close(): Promise<void>;
}

export interface StartOptions {
  clock?: Clock;
  /** An already opened store (tests); otherwise `config.database` is opened. */
  store?: Store;
}

/** The composition root: config -> store -> services -> server. */
export async function startAccessd(config: Config, log: Logger, options: StartOptions = {}): Promise<Accessd> {
  const clock = options.clock ?? systemClock;
  const store = options.store ?? Store.open(config.database);
  const pageTokens = new PageTokenCodec(store.settings.secret("page_token_key"));

  const connect = new ConnectHandlers({
    interceptors: [loggingInterceptor(log)],
    maxBodyBytes: config.apiMaxBodyBytes,
    log,
    routes: (router) => registerApiServices(router, { store, clock, pageTokens }),
  });
  const rest = new RestTranscoder(connect.handlers, { maxBodyBytes: config.apiMaxBodyBytes });
  const server = new HttpServer({
    connect,
    rest,
    rawRoutes: [],
    ready: () => store.ping(),
    log,
    requestTimeoutMs: config.requestTimeoutMs,
  });

  const address = await server.listen(config.port, config.host);
  const host = address.family === "IPv6" ? `[${address.address}]` : address.address;
  log.info({ address: address.address, port: address.port, database: config.database }, "accessd listening");

  let closing: Promise<void> | undefined;
  return {
    address,
    url: `http://${host}:${address.port}`,
    store,
    config,
    close() {
      closing ??= (async () => {
        await server.close();
        store.close();
        log.info("accessd stopped");
      })();
      return closing;
    },
  };
}
