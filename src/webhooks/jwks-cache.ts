import { createLocalJWKSet, createRemoteJWKSet, customFetch, type FetchImplementation, type JSONWebKeySet, type RemoteJWKSet } from "jose";
import { isIP } from "node:net";
import { systemClock, type Clock } from "../clock.js";
import type { Logger } from "../logger.js";

export interface JwksCacheOptions {
  /** A fetch (connect, headers and body) that takes longer is abandoned: 401, not a hang. */
  timeoutMs: number;
  /** After a successful fetch, an unknown `kid` triggers a refetch only once this has passed. */
  cooldownMs: number;
  /**
   * After a failed fetch, the URL is not fetched again before this has passed: requests meanwhile
   * are refused for the same reason (jose remembers only successes).
   */
  failureCooldownMs: number;
  /** Keys are refetched when older than this. */
  maxAgeMs: number;
  /** A JWKS document larger than this is refused. */
  maxBytes: number;
  /** Most distinct JWKS URLs kept; beyond it the cache starts over. */
  maxUrls: number;
  /** ACCESSD_JWKS_ALLOW_HTTP: http URLs on loopback hosts may be fetched (else https only). */
  allowHttp: boolean;
}

export const defaultJwksCacheOptions: JwksCacheOptions = {
  timeoutMs: 2_000,
  cooldownMs: 30_000,
  failureCooldownMs: 5_000,
  maxAgeMs: 10 * 60_000,
  maxBytes: 64 * 1024,
  maxUrls: 1_000,
  allowHttp: false,
};

export interface JwksCacheDeps {
  /** Times the failure cooldown. */
  clock: Clock;
  /** Told each failed fetch, with its detail, for the operator (the sender is told less). */
  log?: Logger;
}

/** One jose remote key set per JWKS URL, shared by every listener that names it. */
export class JwksCache {
  private readonly sets = new Map<string, RemoteJWKSet>();
  private readonly options: JwksCacheOptions;
  private readonly fetchCapped: FetchImplementation;
  private readonly clock: Clock;
  private readonly log: Logger | undefined;
  /** Until when each URL's unusable key was reported (reportUnusableKey). */
  private readonly unusableKeyReported = new Map<string, number>();

  constructor(options: Partial<JwksCacheOptions> = {}, deps: Partial<JwksCacheDeps> = {}) {
    this.options = { ...defaultJwksCacheOptions, ...options };
    this.fetchCapped = cappedFetch(this.options.maxBytes);
    this.clock = deps.clock ?? systemClock;
    this.log = deps.log;
  }

  get(url: string): RemoteJWKSet {
    let set = this.sets.get(url);
    if (set === undefined) {
      if (this.sets.size >= this.options.maxUrls) this.sets.clear();
      set = createRemoteJWKSet(new URL(url), {
        timeoutDuration: this.options.timeoutMs,
        cooldownDuration: this.options.cooldownMs,
        cacheMaxAge: this.options.maxAgeMs,
        [customFetch]: this.fetchRememberingFailure(),
      });
      this.sets.set(url, set);
    }
    return set;
  }

  /**
   * The capped fetch of one URL, which remembers its last failure for `failureCooldownMs` and
   * throws it again meanwhile without fetching: otherwise anyone who knows a listener id could
   * make accessd fetch a failing JWKS once per request.
   */
  private fetchRememberingFailure(): FetchImplementation {
    let failure: { error: unknown; untilMs: number } | undefined;
    return async (url, init) => {
      // (A memory ending further off than the cooldown is from before the clock stepped back: over.)
      if (failure !== undefined && within(failure.untilMs - this.clock.now(), this.options.failureCooldownMs)) throw failure.error;
      try {
        // A listener saved while ACCESSD_JWKS_ALLOW_HTTP was on keeps its http URL: once the
        // variable is off, its keys are not fetched in clear any more (they were, silently).
        if (!jwksTransportAllowed(new URL(url), this.options.allowHttp)) throw new JwksHttpNotAllowedError();
        const response = await this.fetchCapped(url, init);
        failure = undefined;
        return response;
      } catch (e) {
        failure = { error: e, untilMs: this.clock.now() + this.options.failureCooldownMs };
        this.log?.warn(
          { jwksUrl: withoutCredentials(url), err: e, retryInMs: this.options.failureCooldownMs },
          "JWKS fetch failed: the webhooks of listeners naming it are refused, without fetching it again, for retryInMs",
        );
        throw e;
      }
    };
  }

  /**
   * A key of the JWKS at `url` that was fetched but cannot be imported (WebCrypto's DataError:
   * an Ed25519 `x` that is no key, an EC point off its curve), which no fetch failure logs: said
   * once a `maxAgeMs` for each URL, so that the operator learns why its webhooks are refused.
   */
  reportUnusableKey(url: string, error: unknown): void {
    const now = this.clock.now();
    if (within((this.unusableKeyReported.get(url) ?? 0) - now, this.options.maxAgeMs)) return;
    if (this.unusableKeyReported.size >= this.options.maxUrls) this.unusableKeyReported.clear();
    this.unusableKeyReported.set(url, now + this.options.maxAgeMs);
    this.log?.warn({ jwksUrl: withoutCredentials(url), err: error }, "JWKS key cannot be imported: the webhooks it should verify are refused (jwks_invalid)");
  }
}

/** Whether a memory with `remainingMs` left of at most `spanMs` still holds: more left than it ever had means the clock stepped back. */
function within(remainingMs: number, spanMs: number): boolean {
  return remainingMs > 0 && remainingMs <= spanMs;
}

/** Whether a JWKS may be fetched from `url`: https, or http on a loopback host when allowed. */
export function jwksTransportAllowed(url: URL, allowHttp: boolean): boolean {
  return url.protocol === "https:" || (url.protocol === "http:" && allowHttp && isLoopback(url.hostname));
}

function isLoopback(hostname: string): boolean {
  const host = hostname.replace(/^\[|\]$/g, "");
  if (host === "localhost") return true;
  if (isIP(host) === 4) return host.startsWith("127.");
  return host === "::1";
}

/** An http JWKS URL while ACCESSD_JWKS_ALLOW_HTTP is off (or on a host that is no loopback). */
export class JwksHttpNotAllowedError extends Error {
  constructor() {
    super("the JWKS URL is http, which ACCESSD_JWKS_ALLOW_HTTP does not allow now: https only");
    this.name = "JwksHttpNotAllowedError";
  }
}

/** The URL to log: no user info or query, which might hold a credential. */
function withoutCredentials(url: string): string {
  const parsed = new URL(url);
  return `${parsed.origin}${parsed.pathname}`;
}

export class JwksTooLargeError extends Error {
  constructor(readonly limit: number) {
    super(`the JWKS document is larger than ${limit} bytes`);
    this.name = "JwksTooLargeError";
  }
}

/** The JWKS URL answered with a status other than 200. */
export class JwksHttpStatusError extends Error {
  constructor(readonly status: number) {
    super(`the JWKS URL answered HTTP ${status}`);
    this.name = "JwksHttpStatusError";
  }
}

/** The JWKS document is not JSON. */
export class JwksNotJsonError extends Error {
  constructor() {
    super("the JWKS document is not JSON");
    this.name = "JwksNotJsonError";
  }
}

/**
 * fetch that reads at most `limit` bytes of the body (jose's timeout signal covers the reading
 * too), and names what is wrong with an answer that is not a JSON key set, so that the delivery
 * log can tell a JWKS that is down from one that answers badly.
 */
function cappedFetch(limit: number): FetchImplementation {
  return async (url, init) => {
    const response = await fetch(url, init);
    if (response.status !== 200) {
      await response.body?.cancel();
      throw new JwksHttpStatusError(response.status);
    }
    const declared = Number(response.headers.get("content-length"));
    if (Number.isFinite(declared) && declared > limit) {
      await response.body?.cancel();
      throw new JwksTooLargeError(limit);
    }
    const chunks: Uint8Array[] = [];
    let size = 0;
    if (response.body !== null) {
      for await (const chunk of response.body) {
        size += chunk.byteLength;
        if (size > limit) throw new JwksTooLargeError(limit);
        chunks.push(chunk);
      }
    }
    const document = Buffer.concat(chunks, size);
    let json: unknown;
    try {
      json = JSON.parse(document.toString("utf8"));
    } catch {
      throw new JwksNotJsonError();
    }
    // JSON that is not a key set fails here (JWKSInvalid), as a fetch, so that it is remembered as
    // one; jose would find it only after the fetch.
    createLocalJWKSet(json as JSONWebKeySet);
    return new Response(document, { status: response.status, headers: response.headers });
  };
}
