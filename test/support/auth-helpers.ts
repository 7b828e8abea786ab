import * as grpc from "@grpc/grpc-js";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { SignJWT, exportJWK, generateKeyPair, type CryptoKey, type JWK } from "jose";
import { ListUsersRequestSchema, ListUsersResponseSchema, type ListUsersResponse } from "../../gen/svc/api/user/v1/user_pb.js";
import { expect } from "vitest";
import type { TestServer } from "./test-server.js";

export const jwtBearer = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";

export interface TokenAnswer {
  status: number;
  headers: Headers;
  body: Record<string, unknown>;
}

/** POST /auth/v1/token with the parameters form-encoded or as JSON. */
export async function requestToken(
  server: TestServer,
  params: Record<string, string>,
  encoding: "form" | "json" = "form",
  headers: Record<string, string> = {},
): Promise<TokenAnswer> {
  const res = await fetch(`${server.url}/auth/v1/token`, {
    method: "POST",
    headers: {
      "content-type": encoding === "form" ? "application/x-www-form-urlencoded" : "application/json",
      ...headers,
    },
    body: encoding === "form" ? new URLSearchParams(params).toString() : JSON.stringify(params),
  });
  return { status: res.status, headers: res.headers, body: (await res.json()) as Record<string, unknown> };
}

export interface ClientKey {
  alg: "EdDSA" | "ES256" | "RS256";
  privateKey: CryptoKey;
  publicJwk: JWK;
}

export async function newClientKey(alg: ClientKey["alg"] = "EdDSA"): Promise<ClientKey> {
  const { privateKey, publicKey } = await generateKeyPair(alg, { extractable: true });
  return { alg, privateKey, publicJwk: await exportJWK(publicKey) };
}

/** A client registered through the API with a public key (private_key_jwt). */
export async function createKeyClient(server: TestServer, alg: ClientKey["alg"] = "EdDSA"): Promise<{ clientId: string; key: ClientKey }> {
  const key = await newClientKey(alg);
  const user = await server.call("POST", "/api/v1/users", { displayName: "key user", roles: ["READ_ONLY"] });
  const userId = ((await user.json()) as { user: { id: string } }).user.id;
  const res = await server.call("POST", "/api/v1/iam/clients", { displayName: "key client", userId, publicJwk: key.publicJwk });
  expect(res.status).toBe(200);
  const body = (await res.json()) as { client: { id: string; authMethod: string }; clientSecret?: string };
  expect(body.client.authMethod).toBe("PRIVATE_KEY_JWT");
  expect(body.clientSecret ?? "").toBe("");
  return { clientId: body.client.id, key };
}

/** An RFC 7523 client assertion; `claims` override the defaults (times in seconds). */
export function signAssertion(
  key: ClientKey,
  clientId: string,
  audience: string,
  nowMs: number,
  claims: { exp?: number; nbf?: number; jti?: string; iss?: string; sub?: string; aud?: string } = {},
): Promise<string> {
  const now = Math.floor(nowMs / 1000);
  return new SignJWT(claims.nbf === undefined ? {} : { nbf: claims.nbf })
    .setProtectedHeader({ alg: key.alg })
    .setIssuer(claims.iss ?? clientId)
    .setSubject(claims.sub ?? clientId)
    .setAudience(claims.aud ?? audience)
    .setIssuedAt(now)
    .setExpirationTime(claims.exp ?? now + 60)
    .setJti(claims.jti ?? crypto.randomUUID())
    .sign(key.privateKey);
}

/** Users.List over gRPC with @grpc/grpc-js (its own HTTP/2 stack, h2c to the one port). */
export function grpcListUsers(server: TestServer, authorization: string | undefined): Promise<ListUsersResponse> {
  const client = new grpc.Client(`${server.address.address}:${server.address.port}`, grpc.credentials.createInsecure());
  const md = new grpc.Metadata();
  if (authorization !== undefined) md.set("authorization", authorization);
  return new Promise<ListUsersResponse>((resolve, reject) => {
    client.makeUnaryRequest(
      "/svc.api.user.v1.Users/List",
      (m: ReturnType<typeof create<typeof ListUsersRequestSchema>>) => Buffer.from(toBinary(ListUsersRequestSchema, m)),
      (bytes: Buffer) => fromBinary(ListUsersResponseSchema, bytes),
      create(ListUsersRequestSchema, {}),
      md,
      {},
      (err, value) => {
        if (err !== null) reject(err);
        else if (value === undefined) reject(new Error("no response message"));
        else resolve(value);
      },
    );
  }).finally(() => client.close());
}

/** Calls an RPC over the Connect protocol (JSON) with the given headers. */
export async function connectCall(
  server: TestServer,
  procedure: string,
  headers: Record<string, string>,
  body: unknown = {},
): Promise<{ status: number; headers: Headers; body: Record<string, unknown> }> {
  const res = await fetch(`${server.url}/${procedure}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify(body),
  });
  return { status: res.status, headers: res.headers, body: (await res.json()) as Record<string, unknown> };
}
