import { Code, ConnectError, type ServiceImpl } from "@connectrpc/connect";
import { Health, HealthCheckResponse_ServingStatus as Status } from "../../../gen/grpc/health/v1/health_pb.js";

export interface HealthOptions {
  /** Aborted when shutdown begins: from then on every answer is NOT_SERVING. */
  shutdown: AbortSignal;
  /** Whether requests can be served at all (the store answers). */
  ready: () => boolean;
  /** Services whose health may be asked for by name; "" (the server as a whole) always may. */
  services: readonly string[];
}

/**
 * grpc.health.v1.Health, as Kubernetes gRPC probes and load balancers use it. Every service shares
 * the server's status: they live and die together in one process.
 */
export function healthService(options: HealthOptions): ServiceImpl<typeof Health> {
  const known = new Set(["", ...options.services]);
  const status = (): Status => (options.shutdown.aborted || !options.ready() ? Status.NOT_SERVING : Status.SERVING);

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
      yield { status: known.has(request.service) ? status() : Status.SERVICE_UNKNOWN };
      if (options.shutdown.aborted) return;
      const stoppedBy = await firstAbort(options.shutdown, context.signal);
      if (stoppedBy === options.shutdown) yield { status: Status.NOT_SERVING };
    },
  };
}

function firstAbort(...signals: AbortSignal[]): Promise<AbortSignal> {
  return new Promise((resolve) => {
    const controller = new AbortController();
    for (const signal of signals) {
      if (signal.aborted) {
        resolve(signal);
        return;
      }
      signal.addEventListener(
        "abort",
        () => {
          controller.abort();
          resolve(signal);
        },
        { once: true, signal: controller.signal },
      );
    }
  });
}
