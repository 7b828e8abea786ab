/**
 * The baseline for Add-owner throughput: the same serving stack as accessd (httpolyglot HTTP/1.1 +
 * h2c on one port, our HttpServer dispatch, the Connect router, the REST transcoder) with a no-op
 * AppEntitlementOwners.Add (answers `{}`): no interceptors (no auth, logging, metrics), no store.
 * The gap between this and accessd's Add is what accessd itself costs per call.
 *
 * Run as a child process by bench/api.ts: `node --import tsx bench/support/noop-server.ts`;
 * prints the port on stdout.
 */
import { createWriteStream } from "node:fs";
import { AppEntitlementOwners } from "../../gen/svc/api/app/v1/app_entitlement_owners_pb.js";
import { createLogger } from "../../src/logger.js";
import { ConnectHandlers } from "../../src/server/connect-handlers.js";
import { HttpServer } from "../../src/server/http-server.js";
import { RestTranscoder } from "../../src/server/rest-transcoder.js";

const log = createLogger("info", createWriteStream("/dev/null"));
const connect = new ConnectHandlers({
  interceptors: [],
  maxBodyBytes: 1024 * 1024,
  log,
  routes: (router) => router.service(AppEntitlementOwners, { add: () => ({}) }),
});
const server = new HttpServer({
  connect,
  rest: new RestTranscoder(connect.handlers, { maxBodyBytes: 1024 * 1024 }),
  rawRoutes: [],
  ready: () => true,
  log,
  requestTimeoutMs: 30_000,
});
const address = await server.listen(0, "127.0.0.1");
process.stdout.write(`${address.port}\n`);
process.once("SIGTERM", () => {
  void server.close().then(() => process.exit(0));
});
