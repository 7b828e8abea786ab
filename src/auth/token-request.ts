import { fromJsonString } from "@bufbuild/protobuf";
import { StructSchema } from "@bufbuild/protobuf/wkt";
import { OAuthError } from "./oauth-error.js";

/** The token request's parameters, from a form-encoded or JSON body; every value a string. */
export type TokenParameters = ReadonlyMap<string, string>;

/** The parameters the token endpoint reads (src/auth/token-endpoint.ts); RFC 6749 3.2 ignores the rest. */
const readParameters = new Set(["grant_type", "client_id", "client_secret", "client_assertion", "client_assertion_type", "scope"]);

/**
 * Parses the body by its Content-Type: `application/x-www-form-urlencoded` (RFC 6749) or
 * `application/json`. A parameter given twice is an invalid_request (RFC 6749 section 3.2), and so
 * is a JSON value that is not a string for a parameter the endpoint reads; a JSON `null` is the
 * parameter omitted, and a parameter the endpoint does not read is ignored whatever its type
 * (RFC 6749 3.2: "MUST ignore unrecognized request parameters").
 */
export function parseTokenRequest(contentType: string | undefined, body: Buffer): TokenParameters {
  const mediaType = (contentType ?? "").split(";")[0]?.trim().toLowerCase() ?? "";
  if (mediaType === "application/x-www-form-urlencoded") return parseForm(body.toString("utf8"));
  if (mediaType === "application/json") return parseJson(body.toString("utf8"));
  throw new OAuthError(
    "invalid_request",
    "Content-Type must be application/x-www-form-urlencoded or application/json",
  );
}

function parseForm(text: string): TokenParameters {
  const params = new Map<string, string>();
  for (const [name, value] of new URLSearchParams(text)) {
    if (params.has(name)) throw new OAuthError("invalid_request", `parameter ${name} is given more than once`);
    params.set(name, value);
  }
  return params;
}

function parseJson(text: string): TokenParameters {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw new OAuthError("invalid_request", "request body is not valid JSON");
  }
  if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) {
    throw new OAuthError("invalid_request", "request body must be a JSON object");
  }
  const params = new Map<string, string>();
  for (const [name, value] of Object.entries(parsed)) {
    if (typeof value === "string") params.set(name, value);
    else if (value !== null && readParameters.has(name)) throw new OAuthError("invalid_request", `parameter ${name} must be a string`);
  }
  // JSON.parse keeps the last of a name given twice; protobuf-es's JSON reader refuses the repeat.
  // Anything else it refuses is in a value nobody reads (a number out of range, say): ignored.
  try {
    fromJsonString(StructSchema, text);
  } catch (e) {
    if ((e as Error).message.includes("duplicate object key")) throw new OAuthError("invalid_request", "a parameter is given more than once");
  }
  return params;
}

/** A required, non-empty parameter. */
export function requireParameter(params: TokenParameters, name: string): string {
  const value = params.get(name);
  if (value === undefined || value === "") throw new OAuthError("invalid_request", `parameter ${name} is required`);
  return value;
}
