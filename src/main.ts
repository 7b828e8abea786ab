import type { AddressInfo } from "node:net";
import type { DescMethod } from "@bufbuild/protobuf";
import BetterSqlite3 from "better-sqlite3";
import { apiBodyLimits, registerApiServices } from "./api/index.js";
import { enqueueExecution, ExecutionWorker, ProgramCache } from "./automations/index.js";
import {
  AccessTokens,
  authorizationInterceptor,
  ensureBootstrapClient,
  FailureLimiter,
  RequiredRoles,
  tokenEndpoint,
  verifyBearer,
} from "./auth/index.js";
import { systemClock, type Clock } from "./clock.js";
import { ConfigError, type Config } from "./config.js";
import { droppedLogLines, type Logger } from "./logger.js";
import { PageTokenCodec } from "./pagination/index.js";
import { Metrics } from "./observability/metrics.js";
import { metricsInterceptor } from "./observability/metrics-interceptor.js";
import { metricsRoute } from "./observability/metrics-route.js";
import { networkOfHostBits, parseCidr } from "./server/cidr.js";
import { passedDeadlineInterceptor } from "./server/deadline-interceptor.js";
import { reusedWhenSlow } from "./observability/reused-when-slow.js";
import { buildOpenApi, openApiRoute } from "./openapi/index.js";
import { ConnectHandlers } from "./server/connect-handlers.js";
import { HttpServer } from "./server/http-server.js";
import { loggingInterceptor, logUnobservedAnswer } from "./server/logging-interceptor.js";
import { malformedStreamMessageInterceptor } from "./server/connect-refusals.js";
import { storeUnavailableInterceptor } from "./server/store-unavailable.js";
import { publicConnectRoutes } from "./server/public-connect-routes.js";
import { registerPublicServices } from "./server/public-services.js";
import { RestTranscoder } from "./server/rest-transcoder.js";
import { continueIdsAfter, idTime } from "./store/ids.js";
import { ServingLock } from "./store/serving-lock.js";
import { DatabaseOpenError, refuseNonFileDatabase, Store } from "./store/store.js";
import { watchHeldThread } from "./event-loop.js";
import { startHousekeeping, type Housekeeping } from "./jobs/housekeeping.js";
import { accessdVersion } from "./version.js";
import { checkDataKey, holdsSealedSecrets, modeOpenToOthers, resolveDataKey } from "./store/data-key.js";
import { createWebhooks } from "./webhooks/index.js";

export interface Accessd {
  address: AddressInfo;
  /** http://host:port of the listening socket. */
  url: string;
  store: Store;
  config: Config;
  /** The automation worker (tests await `worker.whenIdle()`). */
  worker: ExecutionWorker;
  /** Every RPC the server serves (for tests that walk the contract). */
  rpcs: readonly DescMethod[];
  /** The Prometheus metrics served at /metrics. */
  metrics: Metrics;
  /** The expiry job (tests run a pass with `housekeeping.runOnce()`). */
  housekeeping: Housekeeping;
  /** Graceful stop: drain requests, close the store. Safe to call twice. */
  close(): Promise<void>;
}

export interface StartOptions {
  clock?: Clock;
  /** An already opened store (tests); otherwise `config.database` is opened. */
  store?: Store;
  /** Metrics to record into (tests); otherwise a new registry with process metrics. */
  metrics?: Metrics;
  /** How long close() lets in-flight requests finish before it cuts them (tests); 10 s otherwise. */
  shutdownDeadlineMs?: number;
}

/** The error line of the first damaged page met in a spell (Store.noteDamage). */
export const damagedDatabaseMessage =
  "the database file is damaged, or the disk failed a read of it: /readyz answers 503 until a minute passes without it; if it goes on, stop the server and restore the database from a backup (README, Operating it)";

/**
 * The composition root: config -> store -> services -> server. Opening `config.database` itself,
 * it first takes the database's serving lock (DatabaseInUseError when another process serves it)
 * and releases it after close(). A start that fails (a ConfigError such as the wrong data key, the
 * port taken) closes the store it opened and releases the lock before it throws.
 */
export async function startAccessd(config: Config, log: Logger, options: StartOptions = {}): Promise<Accessd> {
  if (options.store !== undefined) return startOnStore(config, log, options.store, options, () => {});
  refuseNonFileDatabase(config.database); // before the lock makes `<folder>.lock` beside a folder
  const lock = ServingLock.acquire(config.database);
  let store: Store | undefined;
  try {
    store = Store.open(config.database, {
      backgroundCheckpoints: {
        onError: (err) => log.warn({ err }, "WAL checkpoint thread failed; checkpointing on commit instead"),
        onCheckpointFailed: (err) => {
          log.warn({ err }, "WAL checkpoint failed; trying again every second");
          store?.noteDamage(err);
        },
        onCheckpointsResumed: () => log.info("WAL checkpoints succeed again"),
      },
    });
    return await startOnStore(config, log, store, options, () => lock.release());
  } catch (e) {
    await store?.close();
    lock.release();
    // A file damaged past its header opens, and fails the first read of a damaged page
    // ("database disk image is malformed"): say which file.
    throw e instanceof BetterSqlite3.SqliteError ? new DatabaseOpenError(config.database, e) : e;
  }
}

/**
 * How far ahead of the clock the newest record may be for new ids to continue after it. The
 * retentions of the delivery log and of executions read their ids' times: past this, new records
 * would be kept that much longer, and listings are left out of order instead.
 */
const maxIdContinuationMs = 7 * 86_400_000;

/** New ids sort after the newest record's, when it is ahead of the clock by at most maxIdContinuationMs (ids.ts continueIdsAfter); said. */
function continueIdsAfterNewest(store: Store, clock: Clock, log: Logger): void {
  const newest = store.newestId();
  const newestMs = newest === undefined ? undefined : idTime(newest);
  if (newest === undefined || newestMs === undefined || newestMs - clock.now() <= 60_000) return;
  const continued = newestMs - clock.now() <= maxIdContinuationMs;
  if (continued) continueIdsAfter(newest);
  log.warn(
    { newestRecordAt: new Date(newestMs).toISOString(), clock: new Date(clock.now()).toISOString(), continued },
    continued
      ? "the newest record was made at a time still to come by this clock (it stepped back, or was ahead): new ids continue after it, so listings stay in creation order"
      : "the newest record was made more than 7 days ahead of this clock: new ids sort before it until the clock passes it (the retentions read ids' times)",
  );
}

async function startOnStore(config: Config, log: Logger, store: Store, options: StartOptions, afterClose: () => void): Promise<Accessd> {
  const clock = options.clock ?? systemClock;
  // A file restored without removing its old -wal, or overwritten while served, opens and
  // serves; only the pages a read, a write or a checkpoint touches fail. Said at the first of
  // each spell, and not ready while it lasts.
  store.onDamaged = (err) =>
    log.error(
      { err, database: config.database },
      damagedDatabaseMessage,
    );
  continueIdsAfterNewest(store, clock, log);
  const pageTokens = new PageTokenCodec(store.settings.secret("page_token_key"));
  const metrics = options.metrics ?? new Metrics();
  // One read for both (reused alike when slow): the finished totals stay consistent with the
  // counts. They count from what is stored now, before the worker starts (about 65 ms a million).
  const storedAtStart = store.executions.countByState();
  // The duplicate check's (listener, event id) pairs, read into memory before the server listens
  // (about 1.8 s for 1.3 million records) rather than by the first webhook.
  const eventRecords = store.webhooks.events.readKeys();
  const executionCounts = reusedWhenSlow(() => store.executions.countsWithFinishedTotals(storedAtStart));
  metrics.observeExecutionsByState(() => executionCounts().stored);
  metrics.observeExecutionsFinished(() => executionCounts().finished);
  metrics.observeQueueDepth(reusedWhenSlow(() => store.executions.countUnfinished()));
  metrics.observeDroppedLogLines(() => droppedLogLines(log));
  metrics.observeEventRecords(() => store.webhooks.events.size, () => store.webhooks.events.keysBytes);
  const programs = new ProgramCache();
  const worker = new ExecutionWorker({ store, clock, log, programs, stepDelayMs: config.testStepDelayMs });
  // Secrets at rest (webhook secrets, token signing keys) are sealed under the data key; a key that
  // is missing or not the database's stops the start here (ConfigError), before anything is sealed.
  const dataKey = resolveDataKey(config.dataKey, config.database, { holdsSealedSecrets: holdsSealedSecrets(store) });
  const openMode = dataKey.keyFile === undefined ? undefined : modeOpenToOthers(dataKey.keyFile);
  if (openMode !== undefined) {
    log.warn(
      { keyFile: dataKey.keyFile, mode: openMode.toString(8).padStart(4, "0") },
      "the data key file is open to group or others: whoever reads it opens every secret of a copy of the database; make it mode 0600",
    );
  }
  // A file made by an older build (0644 under a usual umask) keeps its mode: say so.
  const databaseMode = config.database === ":memory:" ? undefined : modeOpenToOthers(config.database);
  if (databaseMode !== undefined) {
    log.warn(
      { database: config.database, mode: databaseMode.toString(8).padStart(4, "0") },
      "the database file is open to group or others: it holds personal data, webhook bodies and the hashes of client secrets; make it (and its -wal and -shm) mode 0600",
    );
  }
  // A range of every address (`0.0.0.0/0`, `::/0`) lets any sender name its own source address,
  // past IP-restricted listeners and the token endpoint's limits: accepted, and said.
  const everyAddress = config.trustedProxies.filter((cidr) => parseCidr(cidr)?.prefix === 0);
  if (everyAddress.length > 0) {
    log.warn(
      { trustedProxies: everyAddress },
      "ACCESSD_TRUSTED_PROXIES trusts every address (0.0.0.0/0 every IPv4 peer, ::/0 every IPv6 one): any such sender's X-Forwarded-For is believed (IP-restricted listeners and the token endpoint's limits see what it says); name the proxies' own ranges",
    );
  }
  // Matched as its network: `10.0.0.1/8` trusts all of 10.0.0.0/8, where one proxy was likely meant.
  const withHostBits = config.trustedProxies.filter((cidr) => networkOfHostBits(cidr) !== undefined);
  if (withHostBits.length > 0) {
    log.warn(
      { trustedProxies: withHostBits, trustedNetworks: withHostBits.map(networkOfHostBits) },
      "ACCESSD_TRUSTED_PROXIES names a range with host bits set, which trusts its whole network: write the network (trustedNetworks) if that is meant, or the proxy's own address",
    );
  }
  const webhooks = createWebhooks({
    store,
    clock,
    log,
    baseUrl: config.baseUrl,
    trustedProxies: config.trustedProxies,
    jwksAllowHttp: config.jwksAllowHttp,
    cipher: dataKey.cipher,
    listeners: {
      find: (listenerId) => store.automations.findByListenerId(listenerId),
      writes: () => store.automations.listenerWrites(),
    },
    enqueueExecution: (request) => enqueueExecution(store, clock.now(), request),
    handOffExecution: (execution, triggerBytes) => worker.handOff(execution, triggerBytes),
    onVerdict: (reason, status) => metrics.recordWebhookVerdict(reason, status),
  });
  const automations = { worker, programs, webhookHooks: webhooks.hooks, baseUrl: config.baseUrl };
  const shutdown = new AbortController(); // health answers NOT_SERVING from the first moment of close()
  const streamsEnd = new AbortController(); // reflection streams end once the stop's grace is over

  checkDataKey(store, dataKey, () => webhooks.secrets.keyOpensStoredSecrets());
  const retiredKeys = AccessTokens.deleteRetiredKeys(store, clock);
  if (retiredKeys.length > 0) log.info({ kids: retiredKeys }, "deleted token signing keys replaced more than a day ago");
  const tokens = await AccessTokens.load(store, { baseUrl: config.baseUrl, ttlMs: config.tokenTtlMs, clock, cipher: dataKey.cipher });
  log.info({ kid: tokens.signingKid }, "access tokens signed with key");
  if (config.bootstrapClient !== undefined) {
    const { clientId } = config.bootstrapClient;
    const outcome = await ensureBootstrapClient(store, clock, config.bootstrapClient);
    if (outcome === "secret-differs") {
      log.warn(
        { clientId, outcome },
        "bootstrap Super Admin client: ACCESSD_BOOTSTRAP_CLIENT_SECRET is not this existing client's secret and was not used " +
          "(the client keeps its secret; to replace it, delete the client, or stop the server and run `accessd bootstrap`)",
      );
    } else if (outcome === "deleted") {
      log.warn(
        { clientId, outcome },
        "bootstrap Super Admin client: this client was deleted and ACCESSD_BOOTSTRAP_CLIENT_SECRET is the secret it had, so it is not " +
          "created again (a deleted client stays revoked; to create it anew, give the variable a new secret)",
      );
    } else {
      log.info({ clientId, outcome }, "bootstrap Super Admin client");
    }
  }
  const requiredRoles = new RequiredRoles();
  // Every API call's token is checked before its body is read, so no body is decoded for a caller
  // without one (authorization-interceptor.ts).
  const checkBearer = (authorization: string | null) => verifyBearer(authorization, tokens);
  const connect = new ConnectHandlers({
    // Logging outermost, so refused calls (401/403) are logged too; a failing store is UNAVAILABLE
    // (503) in the log, the metrics and the answer, also when the principal's read fails;
    // authorization before every handler.
    interceptors: [
      loggingInterceptor(log),
      metricsInterceptor(metrics),
      storeUnavailableInterceptor((e) => store.noteDamage(e)),
      authorizationInterceptor({ tokens, principalOf: (id) => store.clients.principalOf(id), requiredRoles }),
      passedDeadlineInterceptor(),
    ],
    maxBodyBytes: config.apiMaxBodyBytes,
    checkBearer,
    log,
    routes: (router) => registerApiServices(router, { store, clock, pageTokens, automations }, webhooks.secrets),
  });
  metrics.startUnavailableAtZero(connect.operationNames());
  const rpcs = connect.handlers.map((h) => h.method);
  requiredRoles.register(rpcs);
  if (requiredRoles.undeclared.length > 0) {
    log.warn({ operations: requiredRoles.undeclared }, "RPCs without a required_role option are refused");
  }
  const rest = new RestTranscoder(connect.handlers, { maxBodyBytes: config.apiMaxBodyBytes, checkBearer, bodyLimits: apiBodyLimits });
  const apiServices = [...new Set(connect.handlers.map((h) => h.service))];
  // Health and reflection answer without a token (probes, grpcurl): their own router, no authorization.
  const publicConnect = new ConnectHandlers({
    interceptors: [loggingInterceptor(log), metricsInterceptor(metrics), malformedStreamMessageInterceptor(), passedDeadlineInterceptor()],
    maxBodyBytes: config.apiMaxBodyBytes,
    log,
    routes: (router) =>
      registerPublicServices(router, { apiServices, shutdown: shutdown.signal, streamsEnd: streamsEnd.signal, ready: () => store.ping() }),
  });
  const server = new HttpServer({
    onShutdownGraceOver: () => streamsEnd.abort(),
    connect,
    rest,
    rawRoutes: [
      ...publicConnectRoutes(publicConnect),
      metricsRoute(metrics),
      webhooks.route,
      openApiRoute(buildOpenApi({ baseUrl: config.baseUrl, services: apiServices })),
      tokenEndpoint({
        store,
        tokens,
        clock,
        baseUrl: config.baseUrl,
        log,
        limiter: new FailureLimiter({ maxFailures: 10, windowMs: 60_000, clock }),
        trustedProxies: config.trustedProxies,
        onOutcome: (outcome) => metrics.recordTokenRequest(outcome),
      }),
    ],
    ready: () => store.ping(),
    onRouteFailed: (e) => store.noteDamage(e),
    log,
    requestTimeoutMs: config.requestTimeoutMs,
    onUnobservedAnswer: (answer) => {
      const { facts, code, seconds } = answer;
      metrics.recordRequest({ protocol: facts.protocol, operation: facts.operation ?? "unknown", code, seconds });
      logUnobservedAnswer(log, answer);
    },
  });

  const address = await server.listen(config.port, config.host).catch((e: unknown) => {
    throw listenFailure(e, config.host, config.port);
  });
  const host = address.family === "IPv6" ? `[${address.address}]` : address.address;
  // The base URL names the tokens' issuer and the webhook endpoints: logged, so a change shows.
  // eventRecords: the (listener, event id) pairs the duplicate check holds in memory, read at start.
  log.info(
    {
      version: accessdVersion,
      pid: process.pid,
      address: address.address,
      port: address.port,
      database: config.database,
      baseUrl: config.baseUrl,
      eventRecords,
    },
    "accessd listening",
  );
  worker.start();
  const housekeeping = startHousekeeping({
    store,
    clock,
    log,
    eventRetentionMs: config.eventRetentionMs,
    executionRetentionMs: config.executionRetentionMs,
  });
  const stopHeldThreadWatch = watchHeldThread(log);

  let closing: Promise<void> | undefined;
  return {
    address,
    url: `http://${host}:${address.port}`,
    store,
    config,
    worker,
    rpcs,
    metrics,
    housekeeping,
    close() {
      closing ??= (async () => {
        shutdown.abort();
        housekeeping.stop();
        stopHeldThreadWatch();
        await server.close(options.shutdownDeadlineMs);
        await worker.stop(); // the running step finishes; the store closes after it
        await store.close();
        afterClose();
        log.info("accessd stopped");
      })();
      return closing;
    },
  };
}

/**
 * A failed listen as the operator can act on it: the variable to change, not only Node's error
 * (`getaddrinfo ENOTFOUND 999.999.999.999`, exit 1). An address that is none of this machine's is
 * a configuration error (exit 2); a port in use or not allowed, a start that failed (exit 1).
 */
function listenFailure(e: unknown, host: string, port: number): unknown {
  const code = (e as NodeJS.ErrnoException).code;
  const message = e instanceof Error ? e.message : String(e);
  if (code === "ENOTFOUND" || code === "EAI_AGAIN" || code === "EAI_NONAME" || code === "EADDRNOTAVAIL") {
    return new ConfigError("ACCESSD_HOST", `${host} is not an address this machine can listen on (${message})`);
  }
  if (code === "EADDRINUSE") return new Error(`cannot listen on ${host}:${port}: something else listens there (ACCESSD_HOST, ACCESSD_PORT)`, { cause: e });
  if (code === "EACCES") return new Error(`cannot listen on ${host}:${port}: not allowed (ACCESSD_PORT; ports below 1024 need privileges)`, { cause: e });
  return e;
}
