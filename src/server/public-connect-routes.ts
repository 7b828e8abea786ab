import type { ConnectHandlers } from "./connect-handlers.js";
import type { RawRoute } from "./http-server.js";
import { protocolOfContentType } from "./request-context.js";

/**
 * Serves the RPCs of a second Connect router as raw routes. Health and reflection live on their own
 * router, whose interceptors leave out authorization: probes and `grpcurl`/`buf curl` carry no
 * token, while the API router stays fail-closed for every RPC it has.
 */
export function publicConnectRoutes(connect: ConnectHandlers): RawRoute[] {
  return connect.handlers.map((handler) => ({
    path: handler.requestPath,
    handle(req, res, facts) {
      facts.protocol = protocolOfContentType(req.headers["content-type"]);
      return connect.handle(req, res, handler.requestPath, facts);
    },
  }));
}
