import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from "prom-client";
import { oauthErrorCodes } from "../auth/oauth-error.js";

export interface MetricsOptions {
  /**
   * Node process metrics (event-loop lag, heap, GC, CPU) from prom-client's default collectors.
   * On by default; they sample continuously, so tests that do not look at them may turn them off.
   */
  processMetrics?: boolean;
}

/** prom-client default metrics that are gauges with a counter's `_total` suffix. */
const gaugesNamedLikeCounters = new Set(["nodejs_active_handles_total", "nodejs_active_requests_total", "nodejs_active_resources_total"]);

/** The wire protocols API operations are counted under. */
const apiProtocols = ["grpc", "grpc-web", "connect", "rest"];

/** The token endpoint's outcomes (the OAuth error codes it answers, and `issued`). */
const tokenOutcomes = ["issued", ...oauthErrorCodes];

export interface RequestObservation {
  protocol: string;
  /** `<package>.<Service>.<Method>`, the operation name of the contract. */
  operation: string;
  /** Connect code name: `ok`, `not_found`, ... */
  code: string;
  seconds: number;
}

/**
 * Every Prometheus metric accessd exposes, on one registry owned by this object (no global
 * registry: two servers in one process, as in tests, do not share counters). Other modules get
 * this object from `main.ts` and call the `record*` / `observe*` functions; none of them needs
 * to know prom-client.
 */
export class Metrics {
  readonly registry = new Registry();
  private readonly requests: Counter<"protocol" | "operation" | "code">;
  private readonly duration: Histogram<"protocol" | "operation">;
  private readonly webhookVerdicts: Counter<"reason" | "status">;
  private readonly tokenRequests: Counter<"outcome">;
  private executionsByStateSource: (() => Readonly<Record<string, number>>) | undefined;
  private executionsFinishedSource: (() => Readonly<Record<string, number>>) | undefined;
  private queueDepthSource: (() => number) | undefined;
  private droppedLogLinesSource: (() => number) | undefined;
  private eventRecordsSource: { records: () => number; bytes: () => number } | undefined;

  constructor(options: MetricsOptions = {}) {
    const registers = [this.registry];
    this.requests = new Counter({
      name: "accessd_requests_total",
      help: "API operations served, by wire protocol (grpc, grpc-web, connect, rest), operation and outcome code.",
      labelNames: ["protocol", "operation", "code"],
      registers,
    });
    this.duration = new Histogram({
      name: "accessd_request_duration_seconds",
      help: "Time to answer an API operation (streams: until the stream ends), by protocol and operation.",
      labelNames: ["protocol", "operation"],
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
      registers,
    });
    this.webhookVerdicts = new Counter({
      name: "accessd_webhook_verdicts_total",
      help: "Inbound webhook requests by verdict reason and HTTP status.",
      labelNames: ["reason", "status"],
      registers,
    });
    this.tokenRequests = new Counter({
      name: "accessd_token_requests_total",
      help: "Token endpoint requests by outcome: issued, or the RFC 6749 error answered (invalid_client, slow_down, ...).",
      labelNames: ["outcome"],
      registers,
    });
    // Present from the start, so that an alert on a rate of refusals has a series to read (a
    // series born at 1 is missed by increase() and rate(): the first failure after a start).
    for (const outcome of tokenOutcomes) this.tokenRequests.inc({ outcome }, 0);
    this.webhookVerdicts.inc({ reason: "store_unavailable", status: "503" }, 0);
    const self = this;
    new Gauge({
      name: "accessd_automation_executions",
      help: "Automation executions in the store, by state (PENDING, RUNNING, SUCCEEDED, FAILED).",
      labelNames: ["state"],
      registers,
      collect() {
        this.reset();
        const counts = self.executionsByStateSource?.() ?? {};
        for (const [state, count] of Object.entries(counts)) this.set({ state }, count);
      },
    });
    new Counter({
      name: "accessd_automation_executions_finished_total",
      help: "Automation executions that ended SUCCEEDED or FAILED since the process started (the retention, ACCESSD_EXECUTION_RETENTION, does not lower it).",
      labelNames: ["state"],
      registers,
      collect() {
        this.reset();
        const totals = self.executionsFinishedSource?.() ?? {};
        for (const [state, count] of Object.entries(totals)) this.inc({ state }, count);
      },
    });
    new Gauge({
      name: "accessd_automation_queue_depth",
      help: "Automation executions accepted but not yet finished (waiting or running).",
      registers,
      collect() {
        this.set(self.queueDepthSource?.() ?? 0);
      },
    });
    new Gauge({
      name: "accessd_webhook_event_records",
      help: "Webhook event records kept for the duplicate check (the (listener, Webhook-Event-Id) pairs of the last ACCESSD_EVENT_RETENTION), each also held in memory.",
      registers,
      collect() {
        this.set(self.eventRecordsSource?.records() ?? 0);
      },
    });
    new Gauge({
      name: "accessd_webhook_event_keys_bytes",
      help: "Memory held by the in-memory index of those pairs (it grows and shrinks with them).",
      registers,
      collect() {
        this.set(self.eventRecordsSource?.bytes() ?? 0);
      },
    });
    new Counter({
      name: "accessd_log_lines_dropped_total",
      help: "Log lines dropped: stdout was not read fast enough (the lines held for it reached ACCESSD_LOG_BUFFER_MIB), or their write failed.",
      registers,
      collect() {
        this.reset();
        this.inc(self.droppedLogLinesSource?.() ?? 0);
      },
    });
    if (options.processMetrics ?? true) {
      // prom-client's defaults, less its gauges named like counters (`nodejs_active_handles_total`
      // and the like: `promtool check metrics` refuses them; `nodejs_active_handles` and the
      // others stay, by type).
      const defaults = new Registry();
      collectDefaultMetrics({ register: defaults });
      for (const { name } of defaults.getMetricsAsArray()) {
        const metric = defaults.getSingleMetric(name);
        if (metric !== undefined && !gaugesNamedLikeCounters.has(name)) this.registry.registerMetric(metric);
      }
    }
  }

  /**
   * Starts each operation's `unavailable` count (503: the store could not be written) at 0 on
   * every protocol, the series the README names for alerts: present before the first failure.
   */
  startUnavailableAtZero(operations: Iterable<string>): void {
    for (const operation of operations) {
      for (const protocol of apiProtocols) this.requests.inc({ protocol, operation, code: "unavailable" }, 0);
    }
  }

  /** One API operation answered (the metrics interceptor calls this for every protocol). */
  recordRequest(observation: RequestObservation): void {
    const { protocol, operation, code, seconds } = observation;
    this.requests.inc({ protocol, operation, code });
    this.duration.observe({ protocol, operation }, seconds);
  }

  /** One inbound webhook request answered: `reason` is the pipeline's verdict code (`accepted`, `signature_mismatch`, ...). */
  recordWebhookVerdict(reason: string, status: number): void {
    this.webhookVerdicts.inc({ reason, status: String(status) });
  }

  /** One token endpoint request answered: `issued`, or the RFC 6749 error code of its refusal. */
  recordTokenRequest(outcome: string): void {
    this.tokenRequests.inc({ outcome });
  }

  /** Where scrapes read the stored executions per state (e.g. a COUNT ... GROUP BY state query). */
  observeExecutionsByState(source: () => Readonly<Record<string, number>>): void {
    this.executionsByStateSource = source;
  }

  /** Where scrapes read how many executions have finished in each state (a count that only grows). */
  observeExecutionsFinished(source: () => Readonly<Record<string, number>>): void {
    this.executionsFinishedSource = source;
  }

  /** Where scrapes read the number of executions waiting or running. */
  observeQueueDepth(source: () => number): void {
    this.queueDepthSource = source;
  }

  /** Where scrapes read how many event records the duplicate check holds, and the bytes of its index. */
  observeEventRecords(records: () => number, bytes: () => number): void {
    this.eventRecordsSource = { records, bytes };
  }

  /** Where scrapes read how many log lines were dropped since start. */
  observeDroppedLogLines(source: () => number): void {
    this.droppedLogLinesSource = source;
  }

  /** The Prometheus text exposition of every metric. */
  async exposition(): Promise<{ contentType: string; body: string }> {
    return { contentType: this.registry.contentType, body: await this.registry.metrics() };
  }
}
