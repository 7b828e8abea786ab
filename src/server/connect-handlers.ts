import type { UniversalHandler, UniversalServerResponse } from "@connectrpc/connect/protocol";
import { Code, ConnectError, createConnectRouter, createContextValues, type ConnectRouter, type Interceptor } from "@connectrpc/connect";
import {
  compressionBrotli,
  compressionGzip,
  universalRequestFromNodeRequest,
  universalResponseToNodeResponse,
} from "@connectrpc/connect-node";
import type { Logger } from "../logger.js";
import { asApiRefusal, refusalWithCode } from "./connect-refusals.js";
import { writeJsonError } from "./json-error.js";
import type { NodeRequest, NodeResponse } from "./node-http.js";
import { noteAnsweredCode } from "./outcome-codes.js";
import { grpcMessageHeader } from "./protocol-error.js";
import { operationName } from "./operation-name.js";
import { requestFactsKey, type RequestFacts } from "./request-context.js";

export interface ConnectHandlersOptions {
  interceptors: Interceptor[];
  maxBodyBytes: number;
  routes: (router: ConnectRouter) => void;
  log: Logger;
}

/**
 * The Connect router's universal handlers (gRPC, gRPC-Web and Connect for every registered RPC),
 * indexed by request path, plus the Node glue that serves them.
 */
export class ConnectHandlers {
  readonly handlers: readonly UniversalHandler[];
  private readonly byPath: Map<string, UniversalHandler>;
  /** Each RPC's operation name (`package.Service.Method`) by request path, built once. */
  private readonly operations: Map<string, string>;

  constructor(private readonly options: ConnectHandlersOptions) {
    const router = createConnectRouter({
      interceptors: options.interceptors,
      readMaxBytes: options.maxBodyBytes,
      acceptCompression: [compressionGzip, compressionBrotli],
      // An unknown JSON field is a 400 that names it: silently dropping `userID` hides typos.
      jsonOptions: { ignoreUnknownFields: false },
    });
    options.routes(router);
    this.handlers = router.handlers;
    this.byPath = new Map(router.handlers.map((h) => [h.requestPath, h]));
    this.operations = new Map(router.handlers.map((h) => [h.requestPath, operationName(h.method)]));
  }

  /** The operation (`package.Service.Method`) the path names, if it names an RPC (`/package.Service/Method`). */
  operationOf(path: string): string | undefined {
    return this.operations.get(path);
  }

  async handle(req: NodeRequest, res: NodeResponse, path: string, facts: RequestFacts): Promise<void> {
    const handler = this.byPath.get(path);
    if (handler === undefined) {
      writeJsonError(res, Code.NotFound, `no procedure ${path}`);
      return;
    }
    const uReq = universalRequestFromNodeRequest(
      req,
      res,
      undefined,
      createContextValues().set(requestFactsKey, facts),
    );
    try {
      let uRes = await asApiRefusal(await handler(uReq), path);
      // Answered already: the request deadline cut the body with 408 while connect-es read it.
      if (res.headersSent) return;
      if (facts.observed !== true) {
        // Refused before the interceptors (they count and log every call they see): its code, for
        // the HTTP layer's count and line.
        const refusal = await refusalWithCode(uRes);
        uRes = refusal.response;
        if (refusal.code !== undefined) noteAnsweredCode(res, refusal.code);
      }
      await universalResponseToNodeResponse(facts.protocol === "grpc" ? withSpecGrpcMessage(uRes) : uRes, res);
    } catch (e) {
      if (ConnectError.from(e).code === Code.Aborted) return; // the client went away
      this.options.log.error({ err: e, procedure: path }, "writing the response failed");
    }
  }
}

/**
 * The gRPC response with its `grpc-message` percent-encoded as the gRPC spec says (only `%` and
 * bytes outside 0x20-0x7E), instead of connect-es's `encodeURIComponent`, which also encodes
 * spaces, `:`, `/`, `,` and the like. Both are valid, but grpc-js decodes the message with
 * `decodeURI`, which leaves `%3A`, `%2F`, `%2C`... in place: its users read
 * `missing bearer token%3A send Authorization%3A Bearer ...`. The message sits in the headers of
 * a trailers-only answer, otherwise in the trailers, which are filled once the body is sent.
 */
function withSpecGrpcMessage(response: UniversalServerResponse): UniversalServerResponse {
  respellGrpcMessage(response.header);
  const { body, trailer } = response;
  if (trailer === undefined) return response;
  if (body === undefined || body instanceof Uint8Array) {
    respellGrpcMessage(trailer);
    return response;
  }
  return {
    ...response,
    body: (async function* () {
      yield* body;
      respellGrpcMessage(trailer);
    })(),
  };
}

function respellGrpcMessage(headers: Headers | undefined): void {
  const message = headers?.get("grpc-message");
  if (message === null || message === undefined) return;
  let text: string;
  try {
    text = decodeURIComponent(message);
  } catch {
    return; // not connect-es's encoding: leave it as it is
  }
  headers?.set("grpc-message", grpcMessageHeader(text));
}
