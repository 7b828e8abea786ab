import { Code, ConnectError, type ServiceImpl } from "@connectrpc/connect";
import { Health, HealthCheckResponse_ServingStatus as Status } from "../../../gen/grpc/health/v1/health_pb.js";

export interface HealthOptions {
  /** Aborted when shutdown begins: from then on every answer is NOT_SERVING. */
  shutdown: AbortSignal;
  /** Whether requests can be served at all (the store answers). */
  ready: () => boolean;
  /** Services whose health may be asked for by name; "" (the server as a whole) always may. */
  services: readonly string[];
  /** Most Watch streams open at once (see defaultMaxWatches). */
  maxWatches?: number;
}

/**
 * Watch needs no token (probes), and a stream stays open until the client or the shutdown ends
 * it, at some 60 KB and (over HTTP/1.1) a descriptor each: an unauthenticated client that opened
 * 320 connections of 256 watches took the server to 3.3 GB and left it unable to answer for
 * minutes. Probes need a handful; past this many a Watch is refused (RESOURCE_EXHAUSTED) at once.
 */
export const defaultMaxWatches = 1_000;

/**
 * grpc.health.v1.Health, as Kubernetes gRPC probes and load balancers use it. Every service shares
 * the server's status: they live and die together in one process.
 */
export function healthService(options: HealthOptions): ServiceImpl<typeof Health> {
  const known = new Set(["", ...options.services]);
  const status = (): Status => (options.shutdown.aborted || !options.ready() ? Status.NOT_SERVING : Status.SERVING);
  const maxWatches = options.maxWatches ?? defaultMaxWatches;
  /**
   * The open watches' wake-ups. One listener on the shutdown signal for all of them: a listener
   * each made adding one cost more the more were open (32,000 took 5 s).
   */
  const watchers = new Set<() => void>();
  options.shutdown.addEventListener("abort", () => {
    for (const wake of watchers) wake();
  }, { once: true });

  return {
    check(request) {
      if (!known.has(request.service)) throw new ConnectError(`unknown service ${request.service}`, Code.NotFound);
      return { status: status() };
    },
    list() {
      const current = status();
      return { statuses: Object.fromEntries([...known].map((name) => [name, { status: current }])) };
    },
    /**
     * Sends the current status, then NOT_SERVING when shutdown begins and ends the stream, so that
     * an open watch never holds the graceful drain.
     */
    async *watch(request, context) {
      if (watchers.size >= maxWatches) {
        throw new ConnectError(`${maxWatches} health watches are open already; poll Check instead`, Code.ResourceExhausted);
      }
      let wake = () => {};
      const woken = new Promise<"shutdown" | "client">((resolve) => {
        wake = () => resolve("shutdown");
        context.signal.addEventListener("abort", () => resolve("client"), { once: true });
      });
      watchers.add(wake);
      try {
        const first = known.has(request.service) ? status() : Status.SERVICE_UNKNOWN;
        yield { status: first };
        // Shutdown may have begun while the first answer waited to be taken.
        const endedBy = context.signal.aborted ? "client" : options.shutdown.aborted ? "shutdown" : await woken;
        if (endedBy === "shutdown" && first !== Status.NOT_SERVING) yield { status: Status.NOT_SERVING };
        // A watch that reached the client's deadline (grpc-timeout, connect-timeout-ms) ends with
        // DEADLINE_EXCEEDED, as the log and the metrics count it; it ended OK, as if the server
        // had closed it. A client that went away takes no answer.
        if (endedBy === "client") {
          const reason = ConnectError.from(context.signal.reason);
          if (reason.code === Code.DeadlineExceeded) throw reason;
        }
      } finally {
        watchers.delete(wake);
      }
    },
  };
}
