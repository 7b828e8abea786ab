import type { RawRoute } from "../server/http-server.js";
import { refuseMethod } from "../server/json-error.js";
import type { Schema } from "./json-schema.js";

/** `GET /openapi.json`: the document, rendered once, served without a token (client generators fetch it). */
export function openApiRoute(document: Schema): RawRoute {
  const body = renderOpenApi(document);
  return {
    path: "/openapi.json",
    async handle(req, res) {
      if (req.method !== "GET" && req.method !== "HEAD") {
        refuseMethod(res, req.method, "/openapi.json", ["GET"]);
        return;
      }
      res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
      if (req.method === "HEAD") res.end();
      else res.end(body);
    },
  };
}

/** The committed file's text for a document: the route and `npm run generate` render alike. */
export function renderOpenApi(document: Schema): string {
  return JSON.stringify(document, null, 2) + "\n";
}
