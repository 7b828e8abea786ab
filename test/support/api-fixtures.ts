import { expect } from "vitest";
import type { TestServer } from "./test-server.js";

/** An automation execution's step as the REST API answers it (proto3 JSON). */
export interface StepJson {
  name: string;
  state: string;
  output?: unknown;
  error?: string;
}

/** An automation execution as the REST API answers it (proto3 JSON). */
export interface ExecutionJson {
  id: string;
  automationId: string;
  automationVersion?: number;
  state: string;
  trigger?: unknown;
  steps: StepJson[];
  error?: string;
}

/** Resources created over REST for a test, asserting each create answered 200. */

export async function createApp(server: TestServer, displayName = "Billing"): Promise<string> {
  const res = await server.call("POST", "/api/v1/apps", { displayName });
  expect(res.status).toBe(200);
  const body = (await res.json()) as { app: { id: string } };
  return body.app.id;
}

export async function createEntitlement(server: TestServer, appId: string, displayName = "Admin"): Promise<string> {
  const res = await server.call("POST", `/api/v1/apps/${appId}/entitlements`, { displayName });
  expect(res.status).toBe(200);
  const body = (await res.json()) as { appEntitlement: { id: string } };
  return body.appEntitlement.id;
}

export async function createUser(server: TestServer, displayName = "Ada Lovelace", email = ""): Promise<string> {
  const res = await server.call("POST", "/api/v1/users", { displayName, email });
  expect(res.status).toBe(200);
  const body = (await res.json()) as { user: { id: string } };
  return body.user.id;
}

export function ownersPath(appId: string, entitlementId: string): string {
  return `/api/v1/apps/${appId}/entitlements/${entitlementId}/owners`;
}

/** Every owner's user id, walking all pages of the owners listing. */
export async function listOwnerIds(server: TestServer, appId: string, entitlementId: string): Promise<string[]> {
  const ids: string[] = [];
  let token = "";
  do {
    const res = await server.call("GET", `${ownersPath(appId, entitlementId)}?page_size=100&page_token=${token}`);
    expect(res.status).toBe(200);
    const body = (await res.json()) as { list: { id: string }[]; nextPageToken: string };
    ids.push(...body.list.map((u) => u.id));
    token = body.nextPageToken;
  } while (token !== "");
  return ids;
}

/** Status and parsed JSON body of a response, for one-line exact assertions. */
export async function answer(res: Response): Promise<{ status: number; body: unknown }> {
  const text = await res.text();
  return { status: res.status, body: text === "" ? undefined : (JSON.parse(text) as unknown) };
}
