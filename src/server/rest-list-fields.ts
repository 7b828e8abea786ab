import type { DescMessage } from "@bufbuild/protobuf";
import { createAsyncIterable, readAllBytes, type UniversalServerResponse } from "@connectrpc/connect/protocol";

/**
 * REST answers always carry the top-level repeated fields of the response (`"list": []` on an
 * empty page), as the contract shows them. proto3 JSON omits empty repeated fields, and
 * `alwaysEmitImplicit` would fill every response with defaults, so only these are added, and
 * only to REST: Connect and gRPC clients decode with the schema and need no such help.
 *
 * Expects an uncompressed body (the transcoder does not forward Accept-Encoding to the handler).
 */
export async function withRepeatedFieldsPresent(
  response: UniversalServerResponse,
  output: DescMessage,
): Promise<UniversalServerResponse> {
  const repeated = output.fields.filter((f) => f.fieldKind === "list" || f.fieldKind === "map");
  if (response.status !== 200 || response.body === undefined || repeated.length === 0) return response;
  if ((response.header?.get("content-encoding") ?? "identity") !== "identity") return response;
  const bytes = await readAllBytes(response.body, Number.MAX_SAFE_INTEGER);
  const json = JSON.parse(new TextDecoder().decode(bytes)) as Record<string, unknown>;
  const missing = repeated.filter((f) => !(f.jsonName in json));
  if (missing.length === 0) return { ...response, body: createAsyncIterable([bytes]) };
  const empty = missing.map((f) => [f.jsonName, f.fieldKind === "list" ? [] : {}]);
  const body = new TextEncoder().encode(JSON.stringify({ ...Object.fromEntries(empty), ...json }));
  const header = new Headers(response.header);
  header.set("content-length", String(body.byteLength));
  return { ...response, header, body: createAsyncIterable([body]) };
}
