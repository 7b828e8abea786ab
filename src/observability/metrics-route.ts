import type { RawRoute } from "../server/http-server.js";
import { refuseMethod } from "../server/json-error.js";
import type { Metrics } from "./metrics.js";

/** `GET /metrics`: the Prometheus text exposition, unauthenticated like /healthz (scrapers carry no token). */
export function metricsRoute(metrics: Metrics): RawRoute {
  return {
    path: "/metrics",
    async handle(req, res) {
      if (req.method !== "GET" && req.method !== "HEAD") {
        refuseMethod(res, req.method, "/metrics", ["GET"]);
        return;
      }
      const { contentType, body } = await metrics.exposition();
      res.writeHead(200, { "content-type": contentType, "content-length": Buffer.byteLength(body) });
      if (req.method === "HEAD") res.end();
      else res.end(body);
    },
  };
}
