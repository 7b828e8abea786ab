import { Code, ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import { noteRequestFacts, requestFactsKey } from "../request-context.js";
import { ServerReflection as ServerReflectionV1 } from "../../../gen/grpc/reflection/v1/reflection_pb.js";
import { ServerReflection as ServerReflectionV1Alpha } from "../../../gen/grpc/reflection/v1alpha/reflection_pb.js";
import type { DescriptorIndex } from "./descriptor-index.js";

/** A reflection request of either protocol version (v1 and v1alpha share the shape). */
interface ReflectionRequest {
  host: string;
  messageRequest:
    | { case: "fileByFilename" | "fileContainingSymbol" | "allExtensionNumbersOfType" | "listServices"; value: string }
    | { case: "fileContainingExtension"; value: { containingType: string; extensionNumber: number } }
    | { case: undefined; value?: undefined };
}

type ReflectionAnswer =
  | { case: "fileDescriptorResponse"; value: { fileDescriptorProto: Uint8Array[] } }
  | { case: "allExtensionNumbersResponse"; value: { baseTypeName: string; extensionNumber: number[] } }
  | { case: "listServicesResponse"; value: { service: { name: string }[] } }
  | { case: "errorResponse"; value: { errorCode: number; errorMessage: string } };

/**
 * How many reflection streams may be open at once. They need no token, and a stream that sends a
 * message now and then is kept for as long as it likes (the request deadline times the gap between
 * messages), so, as health Watches, they are capped; past it a stream is refused with
 * RESOURCE_EXHAUSTED. `grpcurl` and `buf curl` open one for each invocation.
 */
export const defaultMaxReflectionStreams = 1_000;

/** The reflection streams open now, shared by v1 and v1alpha, and their cap. */
export class ReflectionStreams {
  private open = 0;
  constructor(
    readonly max = defaultMaxReflectionStreams,
    /**
     * Aborted when a stop's grace for open connections is over (until then they are served, as
     * every request is): open streams end (their clients connect again, to the next server)
     * instead of holding the graceful drain for its 10 s (one grpcui or IDE window left open made
     * every deploy 11 s of downtime and a warn line).
     */
    private readonly shutdown: AbortSignal = new AbortController().signal,
  ) {
    // One listener for every stream (a listener each would pass Node's warning at 11).
    shutdown.addEventListener("abort", () => {
      for (const stop of this.stoppers) stop();
    });
  }

  /** The open streams' wake-ups at shutdown. */
  private readonly stoppers = new Set<() => void>();

  /**
   * Runs one stream: one answer per request, each request's arrival noted on the request's facts
   * (see RequestFacts.streamedMessageAt).
   */
  async *serve<Q extends ReflectionRequest, A>(requests: AsyncIterable<Q>, context: HandlerContext, reply: (request: Q) => A): AsyncGenerator<A> {
    if (this.open >= this.max) {
      throw new ConnectError(`${this.max} reflection streams are open already; close one, or try again later`, Code.ResourceExhausted);
    }
    this.open++;
    let stop = (): void => {};
    const stopping = new Promise<"shutdown">((resolve) => (stop = () => resolve("shutdown")));
    if (this.shutdown.aborted) stop();
    this.stoppers.add(stop);
    const iterator = requests[Symbol.asyncIterator]();
    try {
      const facts = context.values.get(requestFactsKey);
      for (;;) {
        const next = await Promise.race([iterator.next(), stopping]);
        // Ended as a Health Watch is at shutdown: cleanly (UNAVAILABLE read as a failing store, an
        // error line with a stack for each).
        if (next === "shutdown" || next.done === true) return;
        noteRequestFacts(facts, { streamedMessageAt: performance.now() });
        yield reply(next.value);
      }
    } finally {
      this.stoppers.delete(stop);
      this.open--;
    }
  }
}

/**
 * grpc.reflection.v1 ServerReflectionInfo: one answer per request on the bidi stream. Problems
 * with a single request (unknown symbol) are answered in-stream with an ErrorResponse, as gRPC's
 * own implementations do, so the stream stays usable.
 */
export function serverReflectionV1(index: DescriptorIndex, streams = new ReflectionStreams()): ServiceImpl<typeof ServerReflectionV1> {
  return {
    serverReflectionInfo: (requests, context) =>
      streams.serve(requests, context, (request) => ({ validHost: request.host, originalRequest: request, messageResponse: answer(index, request) })),
  };
}

/** The same service under grpc.reflection.v1alpha, which older clients (grpcurl < 1.9) speak. */
export function serverReflectionV1Alpha(index: DescriptorIndex, streams = new ReflectionStreams()): ServiceImpl<typeof ServerReflectionV1Alpha> {
  return {
    serverReflectionInfo: (requests, context) =>
      streams.serve(requests, context, (request) => ({ validHost: request.host, originalRequest: request, messageResponse: answer(index, request) })),
  };
}

function answer(index: DescriptorIndex, request: ReflectionRequest): ReflectionAnswer {
  const { messageRequest } = request;
  switch (messageRequest.case) {
    case "listServices":
      return { case: "listServicesResponse", value: { service: index.serviceNames.map((name) => ({ name })) } };
    case "fileByFilename":
      return files(index.fileByName(messageRequest.value), `file ${messageRequest.value} not found`);
    case "fileContainingSymbol":
      return files(index.fileContainingSymbol(messageRequest.value), `symbol ${messageRequest.value} not found`);
    case "fileContainingExtension": {
      const { containingType, extensionNumber } = messageRequest.value;
      return files(
        index.fileContainingExtension(containingType, extensionNumber),
        `extension ${extensionNumber} of ${containingType} not found`,
      );
    }
    case "allExtensionNumbersOfType": {
      const numbers = index.extensionNumbersOf(messageRequest.value);
      if (numbers === undefined) return error(Code.NotFound, `type ${messageRequest.value} not found`);
      return { case: "allExtensionNumbersResponse", value: { baseTypeName: messageRequest.value, extensionNumber: numbers } };
    }
    default:
      return error(Code.InvalidArgument, "the request names no reflection query");
  }
}

function files(found: Uint8Array[] | undefined, notFound: string): ReflectionAnswer {
  if (found === undefined) return error(Code.NotFound, notFound);
  return { case: "fileDescriptorResponse", value: { fileDescriptorProto: found } };
}

function error(code: Code, message: string): ReflectionAnswer {
  return { case: "errorResponse", value: { errorCode: code, errorMessage: message } };
}
