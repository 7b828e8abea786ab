export { apiVersion, buildOpenApi, type OpenApiOptions } from "./build-openapi.js";
export { httpBindingsOf, type HttpBinding } from "../server/http-bindings.js";
export type { Schema } from "./json-schema.js";
export { openApiRoute, renderOpenApi } from "./openapi-route.js";
