import { oauthErrorCodes } from "../auth/oauth-error.js";
import type { Schema } from "./json-schema.js";

/**
 * The two routes that are not RPCs, documented by hand from the spec: the inbound webhook
 * (spec 4.2, 5.2, 7.1) and the OAuth 2.0 token endpoint (spec 5.1).
 */
export function fixedPaths(): Record<string, Record<string, Schema>> {
  return {
    "/api/v1/webhooks/incoming/{listener_id}": { post: webhookOperation() },
    "/auth/v1/token": { post: tokenOperation() },
  };
}

export const fixedSchemas: Readonly<Record<string, Schema>> = {
  WebhookAccepted: {
    type: "object",
    properties: {
      eventId: { type: "string", format: "uuid", description: "The Webhook-Event-Id of the request." },
      executionId: { type: "string", description: "The automation execution the event started." },
    },
    required: ["eventId", "executionId"],
  },
  TokenResponse: {
    type: "object",
    properties: {
      access_token: { type: "string" },
      token_type: { type: "string", const: "Bearer" },
      expires_in: { type: "integer", description: "Lifetime in seconds." },
    },
    required: ["access_token", "token_type", "expires_in"],
  },
  OAuthError: {
    type: "object",
    description: "RFC 6749 section 5.2 error.",
    properties: {
      error: {
        type: "string",
        enum: [...oauthErrorCodes],
      },
      error_description: { type: "string" },
    },
    required: ["error"],
  },
};

const errorContent = { "application/json": { schema: { $ref: "#/components/schemas/Error" } } };

function webhookOperation(): Schema {
  const header = (name: string, required: boolean, description: string, schema: Schema): Schema => ({
    name,
    in: "header",
    required,
    description,
    schema,
  });
  return {
    operationId: "ReceiveIncomingWebhook",
    summary: "Receive an inbound webhook that triggers an automation",
    description:
      "Starts the automation that owns the listener with the JSON body as `ctx.trigger`. HMAC listeners: " +
      "`Webhook-Signature` is base64url (no padding) HMAC-SHA256 over `<timestamp>.<event_id>.<raw body>`, " +
      "keyed with the secret text as given; several space-separated signatures are accepted during rotation. " +
      "JWT listeners: `Authorization: Bearer <JWT>` with claims sub (base URL), aud (this endpoint's URL), " +
      "exp (at most 10 minutes ahead), jti (= Webhook-Event-Id), htm (POST) and htb_s256 (base64url SHA-256 " +
      "of the body), signed with RS256, ES256 or EdDSA by a key of the listener's JWKS.",
    tags: ["Webhook"],
    security: [{ webhookSignature: [] }, { webhookJwt: [] }],
    parameters: [
      { name: "listener_id", in: "path", required: true, description: "The listener's identifier.", schema: { type: "string" } },
      // Content-Type is the request body's media type, and Authorization (JWT listeners) is the
      // webhookJwt security scheme: OpenAPI 3.1 ignores header parameters by those names.
      header("Webhook-Timestamp", true, "Unix time in seconds; within 5 minutes of the server time.", {
        type: "string",
        pattern: "^(0|[1-9][0-9]*)$",
      }),
      header("Webhook-Event-Id", true, "UUID v4 identifying the event; a repeat on the same listener is a 409.", {
        type: "string",
        format: "uuid",
      }),
      header("Webhook-Signature", false, "HMAC listeners only: base64url (no padding) HMAC-SHA256 signature(s).", {
        type: "string",
      }),
    ],
    requestBody: {
      required: true,
      description: "Any JSON value, at most 64 KB; `Content-Type: application/json` (a charset parameter, if any, must be UTF-8).",
      content: { "application/json": { schema: {} } },
    },
    responses: {
      "200": {
        description: "Request accepted and automation triggered.",
        content: { "application/json": { schema: { $ref: "#/components/schemas/WebhookAccepted" } } },
      },
      "400": {
        description: "Missing header, timestamp outside the 5-minute window, event id not a UUID v4, or invalid JSON.",
        content: errorContent,
      },
      "401": { description: "HMAC signature mismatch, JWT verification failed or expired, or missing authentication header.", content: errorContent },
      "403": { description: "Source IP not in the allowed CIDR list while IP restrictions are enabled.", content: errorContent },
      "404": { description: "Unknown listener, or its automation is not published or its trigger is disabled (nothing runs).", content: errorContent },
      "409": { description: "Duplicate event id for the listener; already processed (idempotency).", content: errorContent },
      "408": { description: "The body did not arrive within the request timeout.", content: errorContent },
      "413": { description: "Body larger than 64 KB.", content: errorContent },
      "503": {
        description: "The store cannot record the event now (nothing was recorded, nothing runs); send it again later.",
        headers: retryAfter,
        content: errorContent,
      },
      default: { $ref: "#/components/responses/Error" },
    },
  };
}

const retryAfter = { "Retry-After": { description: "Seconds to wait before trying again.", schema: { type: "integer" } } };

function tokenOperation(): Schema {
  const form: Schema = {
    type: "object",
    properties: {
      grant_type: { type: "string", const: "client_credentials" },
      client_id: { type: "string" },
      client_secret: { type: "string", description: "client_secret_post authentication." },
      client_assertion_type: { type: "string", const: "urn:ietf:params:oauth:client-assertion-type:jwt-bearer" },
      client_assertion: { type: "string", description: "private_key_jwt authentication (RFC 7523)." },
    },
    required: ["grant_type", "client_id"],
  };
  const oauthError = { "application/json": { schema: { $ref: "#/components/schemas/OAuthError" } } };
  return {
    operationId: "IssueAccessToken",
    summary: "Issue an access token (OAuth 2.0 client credentials)",
    description: "Client credentials go in the body (form-encoded or JSON), never in headers.",
    tags: ["Authentication"],
    security: [],
    requestBody: {
      required: true,
      content: { "application/x-www-form-urlencoded": { schema: form }, "application/json": { schema: form } },
    },
    responses: {
      "200": {
        description: "An access token.",
        content: { "application/json": { schema: { $ref: "#/components/schemas/TokenResponse" } } },
      },
      "400": { description: "Malformed request or unsupported grant type.", content: oauthError },
      "401": { description: "Client authentication failed.", content: oauthError },
      "408": { description: "The body did not arrive within the request timeout (error invalid_request).", content: oauthError },
      "413": { description: "Body larger than the token endpoint accepts.", content: oauthError },
      "415": { description: "A compressed body (Content-Encoding other than identity).", content: oauthError },
      "429": {
        description: "Too many failed attempts for this client id or source address (error slow_down).",
        headers: retryAfter,
        content: oauthError,
      },
      "503": { description: "The store is unavailable (error temporarily_unavailable).", headers: retryAfter, content: oauthError },
      // A failure of the server itself: the API's error shape.
      default: { $ref: "#/components/responses/Error" },
    },
  };
}
