export { buildOpenApi, type OpenApiOptions } from "./build-openapi.js";
export type { Schema } from "./json-schema.js";
export { openApiRoute, renderOpenApi } from "./openapi-route.js";
