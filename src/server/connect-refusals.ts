import { createAsyncIterable, type UniversalServerResponse } from "@connectrpc/connect/protocol";
import { brotliDecompressSync, gunzipSync } from "node:zlib";
import { Code, ConnectError, type Interceptor, type StreamResponse } from "@connectrpc/connect";
import { codeName, codeOfName } from "./outcome-codes.js";
import { requestFactsKey } from "./request-context.js";

/**
 * connect-es's messages, with code `internal`, for a request body that is not valid protobuf
 * binary, does not decompress, or has a message flagged compressed with no encoding named: the
 * client's mistake, not the server's (the last filled the error log for anyone without a token).
 */
const malformedRequestBody = /^(parse binary: |decompression failed|received compressed envelope, but do not know how to decompress)/;

/**
 * True for connect-es's `internal` error of a request message that does not decode (see
 * malformedRequestBody): the client's mistake, which the log must not take for the server's.
 */
export function isMalformedRequestMessage(error: unknown): error is ConnectError {
  return error instanceof ConnectError && error.code === Code.Internal && malformedRequestBody.test(error.rawMessage);
}

/**
 * A streaming call's request messages are decoded inside the call, where no refusal of a unary
 * body (asApiRefusal) reaches: a reflection stream or a Health Watch whose message does not decode
 * ended `internal` over Connect too. Over Connect that is `invalid_argument`, as its unary calls
 * answer (and connect-go); gRPC and gRPC-Web keep `internal`, as grpc-go answers it. Innermost
 * interceptor, so the log and the metrics see the code answered.
 */
export function malformedStreamMessageInterceptor(): Interceptor {
  return (next) => async (req) => {
    if (!req.stream || req.contextValues.get(requestFactsKey).protocol !== "connect") return next(req);
    const asInvalidArgument = (e: unknown): unknown =>
      isMalformedRequestMessage(e) ? new ConnectError(e.rawMessage, Code.InvalidArgument, e.metadata) : e;
    let res: StreamResponse;
    try {
      res = (await next(req)) as StreamResponse;
    } catch (e) {
      throw asInvalidArgument(e);
    }
    const messages = res.message;
    return {
      ...res,
      message: (async function* () {
        try {
          yield* messages;
        } catch (e) {
          throw asInvalidArgument(e);
        }
      })(),
    };
  };
}

/**
 * Brings the Connect handlers' refusals of malformed requests in line with the rest of the API:
 * connect-es answers an undecodable binary or compressed body with 500 `internal`, and an
 * unsupported Content-Type (415) or HTTP method (405) with an empty body. Those become 400
 * `invalid_argument`, and 415/405/505 (a bidirectional stream over HTTP/1.1) with Connect's JSON
 * error shape. Anything else passes as is.
 */
export async function asApiRefusal(res: UniversalServerResponse, procedure: string): Promise<UniversalServerResponse> {
  if (res.body === undefined && res.status === 415) {
    return jsonError(
      res,
      415,
      Code.InvalidArgument,
      `${procedure} takes Connect (application/json or application/proto; a stream application/connect+json or +proto), gRPC (application/grpc) or gRPC-Web (application/grpc-web)`,
    );
  }
  if (res.body === undefined && res.status === 505) {
    // connect-es's answer to a bidirectional stream (reflection) over HTTP/1.1, which has no body.
    return jsonError(res, 505, Code.Unimplemented, `${procedure} is a bidirectional stream, which needs HTTP/2`);
  }
  if (res.body === undefined && res.status === 405) {
    // RFC 9110 15.5.6: a 405 names the methods the target takes.
    return jsonError(res, 405, Code.Unimplemented, `${procedure} does not accept this HTTP method; use POST`, { allow: "POST" });
  }
  const unaryJsonError =
    res.status === 500 &&
    res.body !== undefined &&
    res.header?.get("content-type") === "application/json" &&
    !res.header.has("content-encoding");
  if (!unaryJsonError || res.body === undefined) return res;
  const chunks: Uint8Array[] = [];
  for await (const chunk of res.body) chunks.push(chunk);
  const bytes = Buffer.concat(chunks);
  const error = parseError(bytes);
  if (error?.code === codeName(Code.Internal) && malformedRequestBody.test(error.message)) {
    return jsonError(res, 400, Code.InvalidArgument, error.message);
  }
  return { ...res, body: createAsyncIterable([bytes]) };
}

/**
 * The code of an answer connect-es gave before any interceptor ran (a body it could not parse, a
 * Content-Type or method it does not take), for the metrics and the log: gRPC's `grpc-status`,
 * else the Connect JSON error's code, read from its body (an error body is small), which is
 * returned for writing. Undefined for an answer that is no error.
 */
export async function refusalWithCode(res: UniversalServerResponse): Promise<{ response: UniversalServerResponse; code: Code | undefined }> {
  const grpcStatus = res.header?.get("grpc-status") ?? res.trailer?.get("grpc-status");
  if (grpcStatus !== null && grpcStatus !== undefined) {
    return { response: res, code: grpcStatus === "0" ? undefined : codeOfGrpcStatus(grpcStatus) };
  }
  const contentType = res.header?.get("content-type") ?? "";
  const grpcWeb = contentType.startsWith("application/grpc-web");
  if (res.status < 400 && !grpcWeb) return { response: res, code: undefined };
  const json = contentType.startsWith("application/json");
  if (res.body === undefined || !(json || grpcWeb)) return { response: res, code: res.status < 400 ? undefined : Code.Unknown };
  const chunks: Uint8Array[] = [];
  for await (const chunk of res.body) chunks.push(chunk);
  const bytes = Buffer.concat(chunks);
  const response = { ...res, body: createAsyncIterable([bytes]) };
  // Compressed for a client that accepts it: a Connect error body by Content-Encoding, a gRPC-Web
  // frame of 1 KiB or more (its flag's 0x01 bit) by Grpc-Encoding.
  if (grpcWeb) return { response, code: grpcWebTrailerStatus(bytes, res.header?.get("grpc-encoding") ?? null) };
  const error = parseError(decompressed(bytes, res.header?.get("content-encoding") ?? null) ?? Buffer.alloc(0));
  return { response, code: error === undefined ? Code.Unknown : codeOfName(error.code) };
}

/** `bytes` decoded from `encoding` (gzip, br, or none); undefined when they do not decode. */
function decompressed(bytes: Buffer, encoding: string | null): Buffer | undefined {
  try {
    if (encoding === null || encoding === "identity") return bytes;
    if (encoding === "gzip") return gunzipSync(bytes);
    if (encoding === "br") return brotliDecompressSync(bytes);
  } catch {
    // not what it says it is
  }
  return undefined;
}

/**
 * gRPC-Web's status: in a trailer frame at the end of the body (flag 0x80, then header lines),
 * under an HTTP 200. Undefined for OK or no trailer frame.
 */
function grpcWebTrailerStatus(body: Buffer, encoding: string | null): Code | undefined {
  for (let at = 0; at + 5 <= body.length; ) {
    const flags = body[at] ?? 0;
    const length = body.readUInt32BE(at + 1);
    if (flags & 0x80) {
      const frame = body.subarray(at + 5, at + 5 + length);
      const text = (flags & 0x01 ? decompressed(frame, encoding) : frame)?.toString("latin1");
      if (text === undefined) return Code.Unknown;
      const status = /(?:^|\r\n)grpc-status:\s*(\d+)/i.exec(text)?.[1];
      return status === undefined || status === "0" ? undefined : codeOfGrpcStatus(status);
    }
    at += 5 + length;
  }
  return undefined;
}

function jsonError(res: UniversalServerResponse, status: number, code: Code, message: string, extraHeaders: Record<string, string> = {}): UniversalServerResponse {
  const body = Buffer.from(JSON.stringify({ code: codeName(code), message }));
  const header = new Headers(res.header);
  for (const [name, value] of Object.entries(extraHeaders)) header.set(name, value);
  header.set("content-type", "application/json");
  header.set("content-length", String(body.byteLength));
  return { status, header, body: createAsyncIterable([body]) };
}

function parseError(bytes: Uint8Array): { code: string; message: string } | undefined {
  try {
    const value = JSON.parse(Buffer.from(bytes).toString("utf8")) as { code?: unknown; message?: unknown };
    return typeof value.code === "string" && typeof value.message === "string"
      ? { code: value.code, message: value.message }
      : undefined;
  } catch {
    return undefined;
  }
}

/** A non-zero `grpc-status` as a Code; Unknown for a value that is none (gRPC's own rule). */
function codeOfGrpcStatus(status: string): Code {
  const n = Number(status);
  return Number.isInteger(n) && n >= Code.Canceled && n <= Code.Unauthenticated ? (n as Code) : Code.Unknown;
}
