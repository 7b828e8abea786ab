import { createContextKey, type ConnectError } from "@connectrpc/connect";
import type { VerifiedToken } from "../auth/access-tokens.js";
import type { NodeResponse } from "./node-http.js";

export type WireProtocol = "rest" | "connect" | "grpc" | "grpc-web";

/** Per-request facts the HTTP layer knows and interceptors and handlers need. */
export interface RequestFacts {
  requestId: string;
  protocol: WireProtocol;
  /** The TCP peer address (never a forwarded header). */
  peerAddress: string;
  /** When the request arrived (performance.now()): a call's deadline counts from then (passedDeadlineInterceptor). */
  receivedAt?: number;
  /**
   * The operation (`package.Service.Method`) once the route names one: a Connect or gRPC path the
   * server serves, a REST route that matched. Unset for a path that names none.
   */
  operation?: string;
  /**
   * Set by the metrics interceptor when a call reaches it: from then on the interceptors count and
   * log the call. An API request answered before that (a REST body that does not parse, a Connect
   * body connect-es refuses, an unknown method) is counted and logged by the HTTP layer instead
   * (`HttpServer`'s `onUnobservedAnswer`), so that every API answer is in the metrics and the log.
   */
  observed?: boolean;
  /** The caller's client id, once the authorization interceptor has verified its token (for the log). */
  clientId?: string;
  /**
   * The API request's bearer token as checked before its body was read (`verifyBearer`): the
   * verified token, or the error refusing it (the body is then not decoded, and the authorization
   * interceptor throws the error). Unset where no route checked it (the interceptor checks then).
   */
  bearer?: VerifiedToken | ConnectError;
  /**
   * Set by the request deadline when it cut the request (its body late): the call's outcome is
   * then `deadline_exceeded`, what its client was answered, whatever its signal says (`canceled`).
   */
  cutByDeadline?: boolean;
  /**
   * When the last message of a streaming request body arrived (performance.now()), noted by a
   * handler that reads a stream of messages (reflection): the request deadline then times the gap
   * between messages, not the whole body, which such a stream keeps open for as long as it is used.
   */
  streamedMessageAt?: number;
  /**
   * How a route that answers in an error shape of its own (the token endpoint: RFC 6749's) writes
   * the request deadline's 408; unset, the deadline answers in the API's shape for the protocol.
   */
  answerLateBody?: (res: NodeResponse, message: string, headers: Record<string, string>) => void;
}

/**
 * The HTTP layer sets a fresh object for every request; the default (calls made without it, in
 * tests) is frozen, so that what interceptors note on it (`observed`, `clientId`) cannot leak from
 * one call to the next.
 */
export const requestFactsKey = createContextKey<RequestFacts>(
  Object.freeze({
    requestId: "",
    protocol: "connect",
    peerAddress: "",
  }),
);

/** Notes `fields` on the request's facts, unless they are the frozen default (see requestFactsKey). */
export function noteRequestFacts(facts: RequestFacts, fields: Pick<RequestFacts, "observed" | "clientId" | "streamedMessageAt">): void {
  if (!Object.isFrozen(facts)) Object.assign(facts, fields);
}

export function protocolOfContentType(contentType: string | null | undefined): WireProtocol {
  if (contentType == null) return "connect";
  const mediaType = contentType.toLowerCase(); // media types are case-insensitive (RFC 9110 8.3.1)
  if (mediaType.startsWith("application/grpc-web")) return "grpc-web";
  if (mediaType.startsWith("application/grpc")) return "grpc";
  return "connect";
}

/**
 * The protocol of a request on an RPC path (Connect, gRPC, gRPC-Web: the routes set it), for
 * writeErrorInProtocol; undefined for REST and webhooks (`rest`, the HTTP layer's default).
 */
export function rpcProtocolOf(facts: Pick<RequestFacts, "protocol">): WireProtocol | undefined {
  return facts.protocol === "rest" ? undefined : facts.protocol;
}
