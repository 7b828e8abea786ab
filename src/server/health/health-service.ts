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
   * each made adding one cost more the more were open (32,000 took 5 s). While any is open, the
   * status is read every statusPollMs and each watch woken when it changed (the store found
   * damaged, and ready again: a watch said nothing of either).
   */
  const watchers = new Set<(why: Wake) => void>();
  /** The status the poll last read (set when it starts): what a change is a change from. */
  let lastStatus: Status | undefined;
  let poll: NodeJS.Timeout | undefined;
  const watchStatus = (): void => {
    if (poll !== undefined) return;
    lastStatus = status();
    poll = setInterval(() => {
      const now = status();
      if (now === lastStatus) return;
      lastStatus = now;
      for (const wake of watchers) wake("changed");
    }, statusPollMs).unref();
  };
  options.shutdown.addEventListener("abort", () => {
    for (const wake of watchers) wake("shutdown");
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
     * Sends the current status, and the new one whenever it changes; NOT_SERVING when shutdown
     * begins, and ends the stream, so that an open watch never holds the graceful drain.
     */
    async *watch(request, context) {
      if (watchers.size >= maxWatches) {
        throw new ConnectError(`${maxWatches} health watches are open already; poll Check instead`, Code.ResourceExhausted);
      }
      const wakes = new WakeQueue();
      const wake = (why: Wake): void => wakes.push(why);
      context.signal.addEventListener("abort", () => wake("client"), { once: true });
      watchers.add(wake);
      try {
        const serviceKnown = known.has(request.service);
        let sent = serviceKnown ? status() : Status.SERVICE_UNKNOWN;
        // (The poll's own last status is left as it is: set here, a watch opened just after a
        // change hid it from every watch open before.)
        if (serviceKnown) watchStatus();
        yield { status: sent };
        for (;;) {
          // Shutdown may have begun, or the client gone, while an answer waited to be taken.
          const why = context.signal.aborted ? "client" : options.shutdown.aborted ? "shutdown" : await wakes.next();
          if (why === "shutdown") {
            if (sent !== Status.NOT_SERVING) yield { status: Status.NOT_SERVING };
            return;
          }
          if (why === "client") {
            // A watch that reached the client's deadline (grpc-timeout, connect-timeout-ms) ends
            // with DEADLINE_EXCEEDED, as the log and the metrics count it; it ended OK, as if the
            // server had closed it. A client that went away takes no answer.
            const reason = ConnectError.from(context.signal.reason);
            if (reason.code === Code.DeadlineExceeded) throw reason;
            return;
          }
          const now = serviceKnown ? status() : sent;
          if (now !== sent) {
            sent = now;
            yield { status: now };
          }
        }
      } finally {
        watchers.delete(wake);
        if (watchers.size === 0 && poll !== undefined) {
          clearInterval(poll);
          poll = undefined;
        }
      }
    },
  };
}

/** How often open watches' status is read (a SELECT 1 and a flag). */
export const statusPollMs = 1_000;

type Wake = "shutdown" | "client" | "changed";

/** A watch's wake-ups, kept while it is not waiting (the most pressing one: a shutdown, a client gone, a change). */
class WakeQueue {
  private pending: Wake | undefined;
  private waiting: ((why: Wake) => void) | undefined;

  push(why: Wake): void {
    const waiting = this.waiting;
    if (waiting !== undefined) {
      this.waiting = undefined;
      waiting(why);
      return;
    }
    const rank = { changed: 0, client: 1, shutdown: 2 };
    if (this.pending === undefined || rank[why] > rank[this.pending]) this.pending = why;
  }

  next(): Promise<Wake> {
    const pending = this.pending;
    if (pending !== undefined) {
      this.pending = undefined;
      return Promise.resolve(pending);
    }
    return new Promise((resolve) => (this.waiting = resolve));
  }
}
