import { createContextKey } from "@connectrpc/connect";

export type WireProtocol = "rest" | "connect" | "grpc" | "grpc-web";

/** Per-request facts the HTTP layer knows and interceptors and handlers need. */
export interface RequestFacts {
  requestId: string;
  protocol: WireProtocol;
  /** The TCP peer address (never a forwarded header). */
  peerAddress: string;
}

export const requestFactsKey = createContextKey<RequestFacts>({
  requestId: "",
  protocol: "connect",
  peerAddress: "",
});

export function protocolOfContentType(contentType: string | null | undefined): WireProtocol {
  if (contentType == null) return "connect";
  if (contentType.startsWith("application/grpc-web")) return "grpc-web";
  if (contentType.startsWith("application/grpc")) return "grpc";
  return "connect";
}
