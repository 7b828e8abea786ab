/**
 * Writes openapi.json (repository root) from the generated descriptors: part of `npm run generate`,
 * and CI fails when the committed file differs from what this produces.
 */
import { writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { configDefaults } from "../src/config.js";
import { buildOpenApi, renderOpenApi } from "../src/openapi/index.js";
import { contractServices } from "./contract-services.js";

const target = fileURLToPath(new URL("../openapi.json", import.meta.url));
const document = buildOpenApi({ baseUrl: configDefaults.baseUrl, services: await contractServices() });
writeFileSync(target, renderOpenApi(document));
console.log(`wrote ${target}`);
