import { readdirSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { ScalarType, type DescField, type DescMessage, type DescService } from "@bufbuild/protobuf";
import { Validator } from "@seriousme/openapi-schema-validator";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { contractServices } from "../scripts/contract-services.js";
import { configDefaults } from "../src/config.js";
import { buildOpenApi, renderOpenApi } from "../src/openapi/index.js";
import { httpBindingsOf, type HttpBinding } from "../src/server/http-bindings.js";
import { startTestServer, type TestServer } from "./support/test-server.js";

interface Parameter {
  name: string;
  in: string;
  required?: boolean;
  description?: string;
  schema: { type?: string | string[]; $ref?: string; items?: unknown };
}
interface Operation {
  operationId: string;
  parameters?: Parameter[];
  requestBody?: { content: Record<string, { schema: { $ref?: string; properties?: Record<string, unknown> } }> };
  responses: Record<string, unknown>;
  security?: unknown[];
}
interface Document {
  openapi: string;
  servers: { url: string }[];
  security: unknown[];
  paths: Record<string, Record<string, Operation>>;
  components: {
    schemas: Record<string, { properties?: Record<string, { type?: unknown; format?: string; $ref?: string; enum?: unknown[] }>; required?: string[] }>;
    securitySchemes: Record<string, Record<string, unknown>>;
  };
}

const committedText = readFileSync(new URL("../openapi.json", import.meta.url), "utf8");
const committed = JSON.parse(committedText) as Document;

/** One `google.api.http` rule as written in a .proto file (additional_bindings count as rules of their own). */
interface ProtoHttpRule {
  /** `<package>.<Service>.<Rpc>`, the operationId the document should give it. */
  rpc: string;
  method: string;
  path: string;
}

const protoDir = fileURLToPath(new URL("../proto/", import.meta.url));

/** The text from the `{` at `open` to its matching `}`. */
function balancedBlock(text: string, open: number): string {
  let depth = 0;
  for (let i = open; i < text.length; i++) {
    if (text[i] === "{") depth++;
    else if (text[i] === "}" && --depth === 0) return text.slice(open, i + 1);
  }
  throw new Error(`unbalanced braces from offset ${open}`);
}

/**
 * Every google.api.http rule in the .proto sources under proto/, read from the text itself:
 * independent of gen/, of src/openapi and of the descriptors the server registers.
 */
function protoHttpRules(): ProtoHttpRule[] {
  const files = readdirSync(protoDir, { recursive: true, encoding: "utf8" }).filter((f) => f.endsWith(".proto"));
  const rules: ProtoHttpRule[] = [];
  for (const file of files) {
    const text = readFileSync(protoDir + file, "utf8")
      .replace(/\/\*[\s\S]*?\*\//g, "")
      .replace(/\/\/[^\n]*/g, "");
    const pkg = /^\s*package\s+([\w.]+)\s*;/m.exec(text)?.[1] ?? "";
    let service = "";
    let rpc = "";
    for (const m of text.matchAll(/\bservice\s+(\w+)\s*\{|\brpc\s+(\w+)\s*\(|option\s*\(\s*google\.api\.http\s*\)\s*=\s*\{/g)) {
      if (m[1] !== undefined) service = m[1];
      else if (m[2] !== undefined) rpc = m[2];
      else {
        const block = balancedBlock(text, (m.index ?? 0) + m[0].length - 1);
        const name = `${pkg}.${service}.${rpc}`;
        for (const p of block.matchAll(/\b(get|put|post|delete|patch)\s*:\s*"([^"]*)"/g)) {
          rules.push({ rpc: name, method: (p[1] ?? "").toUpperCase(), path: p[2] ?? "" });
        }
        for (const p of block.matchAll(/\bcustom\s*:?\s*\{\s*kind\s*:\s*"([^"]*)"\s*,?\s*path\s*:\s*"([^"]*)"/g)) {
          rules.push({ rpc: name, method: (p[1] ?? "").toUpperCase(), path: p[2] ?? "" });
        }
      }
    }
  }
  return rules;
}

/** A path with its variables blanked: `/api/v1/users/{user.id}` and `/api/v1/users/{id}` are one route. */
const routeShape = (path: string): string => path.replace(/\{[^}]+\}/g, "{}");

const httpMethods = ["get", "put", "post", "delete", "patch", "head", "options", "trace"];

/** Every operation of a document as "METHOD shape operationId". */
function documentedOperations(document: Document): string[] {
  return Object.entries(document.paths).flatMap(([path, item]) =>
    Object.entries(item)
      .filter(([method]) => httpMethods.includes(method))
      .map(([method, operation]) => `${method.toUpperCase()} ${routeShape(path)} ${operation.operationId}`),
  );
}

let services: DescService[];
let server: TestServer;
let served: Document;
beforeAll(async () => {
  services = await contractServices();
  server = await startTestServer({ baseUrl: "https://tenant.example.com" });
  const res = await fetch(`${server.url}/openapi.json`); // no token: client generators fetch it bare
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toBe("application/json");
  served = (await res.json()) as Document;
});
afterAll(() => server.close());

function specData(document: Document): Parameters<Validator["validate"]>[0] {
  return structuredClone(document) as unknown as Parameters<Validator["validate"]>[0];
}

/** Where a binding's operation is documented: same path shape (variables may be renamed), same method. */
function operationOf(document: Document, binding: HttpBinding): { path: string; operation: Operation | undefined } {
  const shape = (p: string): string => p.replace(/\{[^}]+\}/g, "{}");
  const path = Object.keys(document.paths).find((p) => shape(p) === shape(binding.path.replace(/=\*\}/g, "}")));
  return { path: path ?? "(none)", operation: path === undefined ? undefined : document.paths[path]?.[binding.method.toLowerCase()] };
}

function fieldAt(message: DescMessage, fieldPath: string[]): DescField {
  let current = message;
  let field: DescField | undefined;
  for (const name of fieldPath) {
    field = current.fields.find((f) => f.name === name);
    if (field === undefined) throw new Error(`no field ${fieldPath.join(".")}`);
    if (field.fieldKind === "message") current = field.message;
  }
  if (field === undefined) throw new Error("empty field path");
  return field;
}

function expectedType(field: DescField): string | undefined {
  if (field.fieldKind !== "scalar") return undefined;
  switch (field.scalar) {
    case ScalarType.STRING:
    case ScalarType.BYTES:
    case ScalarType.INT64:
    case ScalarType.UINT64:
      return "string";
    case ScalarType.BOOL:
      return "boolean";
    case ScalarType.INT32:
    case ScalarType.UINT32:
      return "integer";
    default:
      return "number";
  }
}

/** Checks one google.api.http rule against the document: method, path and query parameters with types, body. */
function expectDocumented(document: Document, binding: HttpBinding): void {
  const where = `${binding.method} ${binding.path} (${binding.rpc.parent.typeName}.${binding.rpc.name})`;
  const { operation } = operationOf(document, binding);
  expect(operation, where).toBeDefined();
  if (operation === undefined) return;
  expect(operation.operationId, where).toBe(`${binding.rpc.parent.typeName}.${binding.rpc.name}`);
  const params = operation.parameters ?? [];

  const variables = [...binding.path.matchAll(/\{([^}=]+)(=\*)?\}/g)].map((m) => m[1] ?? "");
  const pathParams = params.filter((p) => p.in === "path");
  expect(pathParams.length, where).toBe(variables.length);
  variables.forEach((variable, i) => {
    const param = pathParams[i];
    expect(param?.required, where).toBe(true);
    // The variable keeps its name, or (OpenAPI forbids two paths of one shape) names its field.
    expect(param?.name === variable || param?.description === `The request field \`${variable}\`.`, where).toBe(true);
    expect(param?.schema.type, where).toBe(expectedType(fieldAt(binding.rpc.input, variable.split("."))));
  });

  if (binding.body === "*") {
    expect(operation.requestBody?.content["application/json"], where).toBeDefined();
    expect(params.filter((p) => p.in === "query"), where).toEqual([]);
  } else {
    expect(operation.requestBody, where).toBeUndefined();
    const bound = new Set(variables);
    for (const field of binding.rpc.input.fields) {
      if (bound.has(field.name) || (field.fieldKind !== "scalar" && field.fieldKind !== "enum")) continue;
      const param = params.find((p) => p.in === "query" && p.name === field.name);
      expect(param, `${where}: query parameter ${field.name}`).toBeDefined();
      const type = expectedType(field);
      if (type !== undefined) expect(param?.schema.type, `${where}: ${field.name}`).toBe(type);
      else expect(param?.schema.$ref, `${where}: ${field.name}`).toBe(`#/components/schemas/${field.enum?.typeName ?? ""}`);
    }
  }
  expect(Object.keys(operation.responses), where).toEqual(expect.arrayContaining(["200", "400", "401", "403"]));
}

describe("/openapi.json", () => {
  it("validates as OpenAPI 3.1", async () => {
    const validator = new Validator();
    const result = await validator.validate(specData(served));
    expect(result.errors).toBeUndefined();
    expect(result.valid).toBe(true);
    expect(validator.version).toBe("3.1");
    expect(await new Validator().validate(specData(committed))).toEqual({ valid: true });
  });

  it("answers HEAD like GET without the body, and 405 with Allow: GET, HEAD to other methods", async () => {
    const head = await fetch(`${server.url}/openapi.json`, { method: "HEAD" });
    expect(head.status).toBe(200);
    expect(await head.text()).toBe("");
    const post = await fetch(`${server.url}/openapi.json`, { method: "POST" });
    expect(post.status).toBe(405);
    expect(post.headers.get("allow")).toBe("GET, HEAD");
    expect(await post.json()).toEqual({ code: "unimplemented", message: "POST is not allowed on /openapi.json; use GET, HEAD" });
  });

  it("documents every google.api.http rule of every contract service with its method and parameters", () => {
    const bindings = services.flatMap((s) => httpBindingsOf(s));
    expect(bindings.length).toBe(protoHttpRules().length); // every rule of the proto sources, not an empty directory
    expect(bindings.map((b) => `${b.method} ${b.path}`)).toContain(
      "POST /api/v1/apps/{app_id}/entitlements/{entitlement_id}/owners",
    );
    for (const binding of bindings) expectDocumented(committed, binding);
  });

  it("has exactly one operation per google.api.http rule of the proto sources, besides the token and webhook endpoints", () => {
    const rules = protoHttpRules();
    expect(rules.length).toBeGreaterThan(0);
    const expected = [
      ...rules.map((r) => `${r.method} ${routeShape(r.path)} ${r.rpc}`),
      "POST /api/v1/webhooks/incoming/{} ReceiveIncomingWebhook",
      "POST /auth/v1/token IssueAccessToken",
    ].sort();
    expect(new Set(expected).size).toBe(expected.length); // no two rules share a method and route
    expect(documentedOperations(committed).sort()).toEqual(expected);
    expect(documentedOperations(served).sort()).toEqual(expected);
  });

  it("serves every REST route of the running server, as documented in the committed file", () => {
    const running = [...new Set(server.rpcs.map((rpc) => rpc.parent))].flatMap((s) => httpBindingsOf(s));
    expect(running.length).toBeGreaterThan(0);
    for (const binding of running) {
      expectDocumented(served, binding);
      const { path } = operationOf(served, binding);
      expect(served.paths[path]?.[binding.method.toLowerCase()]).toEqual(committed.paths[path]?.[binding.method.toLowerCase()]);
    }
  });

  it("is what `npm run generate` writes (the committed file is not stale)", () => {
    const regenerated = renderOpenApi(buildOpenApi({ baseUrl: configDefaults.baseUrl, services }));
    expect(committedText).toBe(regenerated);
  });

  it("describes the add-owner body and responses with proto3 JSON (camelCase) names", () => {
    const add = served.paths["/api/v1/apps/{app_id}/entitlements/{entitlement_id}/owners"]?.["post"];
    expect(add?.parameters?.map((p) => [p.name, p.in, p.schema.type])).toEqual([
      ["app_id", "path", "string"],
      ["entitlement_id", "path", "string"],
    ]);
    expect(add?.requestBody?.content["application/json"]?.schema.properties).toEqual({ userId: { type: ["string", "null"] } });
    const app = served.components.schemas["svc.api.app.v1.App"]?.properties;
    expect(app?.["displayName"]).toEqual({ type: "string" });
    expect(app?.["createdAt"]).toMatchObject({ type: "string", format: "date-time" });
    const list = served.components.schemas["svc.api.app.v1.ListAppEntitlementsResponse"]?.properties;
    expect(Object.keys(list ?? {})).toEqual(["list", "nextPageToken"]);
  });

  it("marks readOnly exactly the fields a REST body never sets (field_behavior OUTPUT_ONLY, and IDENTIFIER: the path carries ids)", () => {
    const readOnly = (type: string) =>
      Object.entries(served.components.schemas[type]?.properties ?? {})
        .filter(([, schema]) => (schema as { readOnly?: boolean }).readOnly === true)
        .map(([name]) => name);
    expect(readOnly("svc.api.app.v1.App")).toEqual(["id", "createdAt", "updatedAt"]);
    expect(readOnly("svc.api.app.v1.AppEntitlement")).toEqual(["id", "appId", "createdAt", "updatedAt"]);
    expect(readOnly("svc.api.user.v1.User")).toEqual(["id", "createdAt", "updatedAt"]);
    expect(readOnly("svc.api.automations.v1.Automation")).toEqual(["id", "published", "triggerEnabled", "version", "createdAt", "updatedAt"]);
    expect(readOnly("svc.api.automations.v1.WebhookTrigger")).toEqual(["listenerId", "endpointUrl"]);
  });

  it("and the server does ignore them: an Update naming another app's id and times changes the app of its path, a Create keeps its own listener", async () => {
    const ids = await Promise.all(["first", "second"].map(async (name) => {
      const res = await server.call("POST", "/api/v1/apps", { displayName: name });
      return ((await res.json()) as { app: { id: string } }).app.id;
    }));
    const update = await server.call("POST", `/api/v1/apps/${ids[0]}`, {
      app: { id: ids[1], description: "changed", createdAt: "2001-01-01T00:00:00Z" },
      updateMask: "description",
    });
    expect(update.status).toBe(200);
    const [first, second] = await Promise.all(
      ids.map(async (id) => ((await (await server.call("GET", `/api/v1/apps/${id}`)).json()) as { app: { description: string; createdAt: string } }).app),
    );
    expect([first?.description, second?.description ?? ""]).toEqual(["changed", ""]);
    expect(first?.createdAt).not.toBe("2001-01-01T00:00:00Z");
    const created = await server.call("POST", "/api/v1/automations", {
      displayName: "its own listener",
      trigger: { webhook: { authMethod: "HMAC", listenerId: "mine", endpointUrl: "http://elsewhere.example/x" } },
      steps: [{ name: "note", log: { messageCel: "'x'" } }],
    });
    const { automation } = (await created.json()) as { automation: { trigger: { webhook: { listenerId: string; endpointUrl: string } } } };
    expect(automation.trigger.webhook.listenerId).not.toBe("mine");
    expect(automation.trigger.webhook.endpointUrl).toBe(`https://tenant.example.com/api/v1/webhooks/incoming/${automation.trigger.webhook.listenerId}`);
  });

  it("requires a body, and lists required fields, exactly where the server refuses a request without them (field_behavior REQUIRED)", async () => {
    const required = (type: string) => served.components.schemas[type]?.required ?? [];
    expect(required("svc.api.automations.v1.AutomationStep")).toEqual(["name"]);
    expect(required("svc.api.automations.v1.WebhookTrigger")).toEqual(["authMethod"]);
    expect(required("svc.api.automations.v1.EntitlementOwnerAction")).toEqual(["appIdCel", "entitlementIdCel", "userIdCel"]);
    const withBodies = Object.entries(served.paths).flatMap(([path, item]) =>
      Object.entries(item).flatMap(([method, op]) =>
        op.requestBody === undefined || op.operationId === "ReceiveIncomingWebhook" || op.operationId === "IssueAccessToken"
          ? []
          : [{ path, method, op, body: op.requestBody as { required: boolean; content: Record<string, { schema: { required?: string[]; $ref?: string } }> } }],
      ),
    );
    const needingBodies = withBodies.filter(({ body }) => body.required);
    expect(needingBodies.map(({ op }) => op.operationId).sort()).toEqual([
      "svc.api.app.v1.AppEntitlements.Create",
      "svc.api.app.v1.Apps.Create",
      "svc.api.automations.v1.Automations.Create",
      "svc.api.iam.v1.Clients.Create",
      "svc.api.user.v1.Users.Create",
    ]);
    for (const { path, method, op, body } of withBodies) {
      const schema = body.content["application/json"]?.schema;
      const fields = schema?.required ?? required(schema?.$ref?.replace("#/components/schemas/", "") ?? "");
      expect(fields.length > 0, op.operationId).toBe(body.required);
      if (!body.required) continue;
      // Without a body (read as {}): a 400 naming a required field.
      const url = path.replace("{app_id}", "some-app").replace("{id}", "some-id");
      const res = await fetch(`${server.url}${url}`, { method: method.toUpperCase(), headers: server.headers });
      const { message } = (await res.json()) as { message: string };
      expect(res.status, op.operationId).toBe(400);
      expect(fields.some((field) => message.includes(field)), `${op.operationId}: ${message}`).toBe(true);
    }
    // And an operation without one takes none: Publish with no body at all.
    const automation = await server.call("POST", "/api/v1/automations", { displayName: "no body", trigger: { manual: {} }, steps: [] });
    const { automation: { id } } = (await automation.json()) as { automation: { id: string } };
    const published = await fetch(`${server.url}/api/v1/automations/${id}/publish`, { method: "POST", headers: server.headers });
    expect(published.status).toBe(200);
  });

  it("documents the 404 of Clients.Create, whose user is named in the body", async () => {
    const create = served.paths["/api/v1/iam/clients"]?.["post"];
    expect(Object.keys(create?.responses ?? {})).toContain("404");
    const res = await server.call("POST", "/api/v1/iam/clients", { displayName: "orphan", userId: "no-such-user" });
    expect(res.status).toBe(404);
  });

  it("documents the refusals of a body (408, 413 with Execute's own limit, 415) and the store's 503 on the operations that have them, as the server answers them", async () => {
    const execute = served.paths["/api/v1/automations/{id}/execute"]?.["post"];
    const createApp = served.paths["/api/v1/apps"]?.["post"];
    const listApps = served.paths["/api/v1/apps"]?.["get"];
    expect(Object.keys(createApp?.responses ?? {})).toEqual(expect.arrayContaining(["408", "413", "415", "503"]));
    expect(Object.keys(listApps?.responses ?? {})).toContain("503");
    expect(Object.keys(listApps?.responses ?? {})).not.toContain("413"); // no body
    expect(execute?.responses?.["413"]).toMatchObject({ description: "The request body is larger than 66560 bytes (this operation's limit)." });
    const tooLarge = await fetch(`${server.url}/api/v1/automations/x/execute`, {
      method: "POST",
      headers: { ...server.headers, "content-type": "application/json" },
      body: JSON.stringify({ context: { s: "x".repeat(66_560) } }),
    });
    expect(tooLarge.status).toBe(413);
    const notJson = await fetch(`${server.url}/api/v1/apps`, { method: "POST", headers: { ...server.headers, "content-type": "text/plain" }, body: "x" });
    expect(notJson.status).toBe(415);
  });

  it("declares every page's list and nextPageToken required, the token a string (spec 2.5: empty on the last page, never null)", () => {
    const pages = Object.entries(served.components.schemas).filter(([, schema]) => schema.properties?.["nextPageToken"] !== undefined);
    expect(pages.length).toBeGreaterThanOrEqual(8);
    for (const [name, schema] of pages) {
      expect({ name, required: schema.required, token: schema.properties?.["nextPageToken"]?.type }).toEqual({
        name,
        required: ["list", "nextPageToken"],
        token: "string",
      });
    }
  });

  it("declares bearer and OAuth client-credentials security with the token URL under the base URL", () => {
    expect(served.servers).toEqual([{ url: "https://tenant.example.com" }]);
    expect(served.security).toEqual([{ bearerAuth: [] }, { oauth: [] }]);
    expect(served.components.securitySchemes["bearerAuth"]).toMatchObject({ type: "http", scheme: "bearer" });
    expect(served.components.securitySchemes["oauth"]).toMatchObject({
      type: "oauth2",
      flows: { clientCredentials: { tokenUrl: "https://tenant.example.com/auth/v1/token", scopes: {} } },
    });
    expect(served.paths["/auth/v1/token"]?.["post"]?.security).toEqual([]);
  });

  it("documents every status of the token endpoint, with Retry-After on 429 and 503", () => {
    const token = served.paths["/auth/v1/token"]?.["post"] as { responses: Record<string, { headers?: Record<string, unknown> }> };
    expect(Object.keys(token.responses).sort()).toEqual(["200", "400", "401", "408", "413", "415", "429", "503", "default"]);
    expect(Object.keys(token.responses["429"]?.headers ?? {})).toEqual(["Retry-After"]);
    expect(Object.keys(token.responses["503"]?.headers ?? {})).toEqual(["Retry-After"]);
  });

  it("lists exactly the OAuth error codes the token endpoint answers, temporarily_unavailable (its 503) among them", () => {
    const oauthError = served.components.schemas["OAuthError"];
    expect(oauthError?.properties?.["error"]?.enum).toEqual([
      "invalid_request",
      "invalid_client",
      "unsupported_grant_type",
      "slow_down",
      "temporarily_unavailable",
    ]);
  });

  it("documents the webhook endpoint with its headers and status codes", () => {
    const webhook = served.paths["/api/v1/webhooks/incoming/{listener_id}"]?.["post"];
    expect(webhook).toBeDefined();
    // Not Content-Type (the body's media type) nor Authorization (the webhookJwt scheme): OpenAPI
    // 3.1 ignores header parameters by those names, and a generator may make them required literals.
    expect(webhook?.parameters?.map((p) => [p.name, p.in, p.required])).toEqual([
      ["listener_id", "path", true],
      ["Webhook-Timestamp", "header", true],
      ["Webhook-Event-Id", "header", true],
      ["Webhook-Signature", "header", false],
    ]);
    // The server refuses a timestamp with leading zeros: so does the pattern.
    const timestamp = new RegExp((webhook?.parameters?.[1]?.schema as { pattern: string }).pattern);
    expect(["0", "1700000000"].map((t) => timestamp.test(t))).toEqual([true, true]);
    expect(["01700000000", "", "-1", "1.5"].some((t) => timestamp.test(t))).toBe(false);
    expect(Object.keys(webhook?.responses ?? {})).toEqual(["200", "400", "401", "403", "404", "408", "409", "413", "503", "default"]);
    expect(webhook?.requestBody?.content["application/json"]).toBeDefined();
    expect(webhook?.security).toEqual([{ webhookSignature: [] }, { webhookJwt: [] }]);
  });
});
