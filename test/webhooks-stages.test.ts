import { randomUUID } from "node:crypto";
import { Readable, Writable } from "node:stream";
import cron from "node-cron";
import { describe, expect, it, vi } from "vitest";
import type { WebhookTriggerConfig } from "../src/automations/trigger-config.js";
import { ManualClock } from "../src/clock.js";
import { ConfigError, loadConfig } from "../src/config.js";
import { createLogger } from "../src/logger.js";
import { v7 as uuidv7 } from "uuid";
import { type Housekeeping, housekeepingChunkRows, housekeepingThreadShare, startHousekeeping } from "../src/jobs/housekeeping.js";
import { isStoreUnavailable, StoredDataUnreadableError } from "../src/store/store-errors.js";
import { Store } from "../src/store/store.js";
import { busyFor } from "./support/busy-thread.js";
import { readCappedBody, type BodySource } from "../src/webhooks/body-reader.js";
import { DeliveryLog } from "../src/webhooks/delivery-log.js";
import { checkEventId } from "../src/webhooks/event-id.js";
import { hmacDigest, hmacKey, hmacSignature, verifyHmacSignature } from "../src/webhooks/hmac-signature.js";
import type { DeliveryFacts } from "../src/webhooks/pipeline.js";
import { Rejection } from "../src/webhooks/rejection.js";
import { SecretCipher } from "../src/store/secret-cipher.js";
import { maxSecretsInGrace, WebhookSecretStore } from "../src/webhooks/secret-store.js";
import { SourceIpResolver } from "../src/server/source-ip.js";
import { checkTimestamp } from "../src/webhooks/timestamp-window.js";
import { validateWebhookTrigger } from "../src/webhooks/trigger-validation.js";
import { webhookTriggerHooks } from "../src/webhooks/webhook-trigger-hooks.js";
import { eventRecordsOf } from "./support/store-fixtures.js";

const body = Buffer.from('{"user":"u-1"}');

function source(chunks: Iterable<Buffer>, declaredLength?: number): BodySource {
  // Byte mode, one chunk buffered at a time: as a socket delivers a request body.
  return { declaredLength, stream: Readable.from(chunks, { objectMode: false, highWaterMark: 1 }) };
}

describe("HMAC signature (spec 5.2)", () => {
  it("signs <timestamp>.<event_id>.<body> with the secret text as key, base64url without padding", async () => {
    const { createHmac } = await import("node:crypto");
    const secret = "c2VjcmV0LXRleHQtbm90LWRlY29kZWQ";
    const expected = createHmac("sha256", Buffer.from(secret, "utf8"))
      .update(`1700000000.3b241101-e2bb-4255-8caf-4136c566a962.${body.toString()}`)
      .digest("base64url");
    expect(hmacSignature(secret, "1700000000", "3b241101-e2bb-4255-8caf-4136c566a962", body)).toBe(expected);
    expect(expected).not.toMatch(/=/);
  });

  it("accepts any valid signature of a space-separated list and refuses a list of bad ones", () => {
    const key = hmacKey("s1");
    const good = hmacSignature("s1", "1", "e", body);
    const bad = hmacSignature("s2", "1", "e", body);
    expect(verifyHmacSignature([key], `${bad} ${good}`, "1", "e", body)).toBeUndefined();
    expect(verifyHmacSignature([key], `${bad} garbage`, "1", "e", body)?.reason).toBe("signature_mismatch");
    expect(verifyHmacSignature([key], undefined, "1", "e", body)?.reason).toBe("signature_missing");
  });

  it("says how a signature is misspelt when none of the values given is base64url of a digest (they read 'does not match', as a wrong key)", () => {
    const key = hmacKey("s1");
    const digest = hmacDigest(key, "1", "e", body);
    const refusal = (header: string) => {
      const rejection = verifyHmacSignature([key], header, "1", "e", body);
      return [rejection?.reason, rejection?.message.replace(/^.*\(43 characters of A-Z, a-z, 0-9, - and _\): /, "")];
    };
    expect(refusal(digest.toString("base64"))).toEqual(["signature_malformed", expect.stringMatching(/^got 44 characters with = padding|with \+ or \//)]);
    expect(refusal(digest.toString("hex"))).toEqual(["signature_malformed", "got 64 hexadecimal digits (encode the digest's bytes as base64url instead)"]);
    expect(refusal(`sha256=${digest.toString("base64url")}`)).toEqual(["signature_malformed", "got a prefix (sha256=) before the digest: send the digest alone"]);
    expect(refusal(digest.toString("base64url").slice(0, 42))).toEqual(["signature_malformed", "got 42 characters"]);
    // Well spelt but of another key: the signature does not match.
    expect(refusal(hmacSignature("s2", "1", "e", body))[0]).toBe("signature_mismatch");
  });

  it("takes only the canonical spelling of a digest: the last character's two unused bits are zero (another spelling was a second valid signature)", () => {
    const key = hmacKey("s1");
    const good = hmacSignature("s1", "1", "e", body);
    const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    const last = alphabet.indexOf(good.slice(-1));
    const sameDigest = good.slice(0, 42) + alphabet[last + 1]; // differs in the unused bits only
    expect(Buffer.from(sameDigest, "base64url").equals(Buffer.from(good, "base64url"))).toBe(true);
    expect(verifyHmacSignature([key], good, "1", "e", body)).toBeUndefined();
    expect(verifyHmacSignature([key], sameDigest, "1", "e", body)?.reason).toBe("signature_malformed");
  });
});

describe("timestamp window and event id", () => {
  const now = 1_700_000_000_000;
  it("accepts 300 s either way and refuses 301 s", () => {
    expect(checkTimestamp("1699999700", now)).toBeUndefined();
    expect(checkTimestamp("1700000300", now)).toBeUndefined();
    expect(checkTimestamp("1699999699", now)?.reason).toBe("timestamp_out_of_window");
    expect(checkTimestamp("1700000301", now)?.reason).toBe("timestamp_out_of_window");
    expect(checkTimestamp("17e8", now)?.reason).toBe("timestamp_invalid");
    expect(checkTimestamp("-5", now)?.reason).toBe("timestamp_invalid");
    expect(checkTimestamp("01700000000", now)?.reason).toBe("timestamp_invalid"); // one spelling per instant
    expect(checkTimestamp("001700000000", now)?.reason).toBe("timestamp_invalid");
  });

  it("accepts only UUID v4 and records it in lower case", () => {
    expect(checkEventId("3B241101-E2BB-4255-8CAF-4136C566A962")).toBe("3b241101-e2bb-4255-8caf-4136c566a962");
    expect(checkEventId("c232ab00-9414-11ec-b3c8-9f6bdeced846")).toBeInstanceOf(Rejection); // v1
    expect(checkEventId("3b241101-e2bb-4255-7caf-4136c566a962")).toBeInstanceOf(Rejection); // bad variant
    expect(checkEventId("not-a-uuid")).toBeInstanceOf(Rejection);
  });
});

describe("capped body reader", () => {
  it("reads 65,536 bytes and refuses 65,537, from the stream or the declared length", async () => {
    const ok = await readCappedBody(source([Buffer.alloc(40_000), Buffer.alloc(25_536)]));
    expect(ok).not.toBeInstanceOf(Rejection);
    const streamed = await readCappedBody(source([Buffer.alloc(40_000), Buffer.alloc(25_537)]));
    expect((streamed as Rejection).status).toBe(413);
    let pulled = 0;
    const declared = await readCappedBody(
      source(
        (function* () {
          pulled++;
          yield Buffer.alloc(1);
        })(),
        65_537,
      ),
    );
    expect((declared as Rejection).status).toBe(413);
    expect(pulled).toBe(0);
  });

  it("answers a body already cut (destroyed) as incomplete at once: its events are past, and listeners added now would wait for good", async () => {
    const cut = source([Buffer.alloc(10)]);
    cut.stream.on("error", () => {});
    cut.stream.destroy(new Error("cut by the request deadline"));
    await new Promise((resolve) => setImmediate(resolve)); // its 'error' and 'close' are emitted
    const result = await Promise.race([readCappedBody(cut), new Promise((resolve) => setTimeout(() => resolve("waiting"), 500))]);
    expect(result).toBeInstanceOf(Rejection);
    expect((result as Rejection).reason).toBe("body_incomplete");
  });

  it("stops reading at the chunk that crosses the cap", async () => {
    let pulled = 0;
    const result = await readCappedBody(
      source(
        (function* () {
          for (let i = 0; i < 100; i++) {
            pulled++;
            yield Buffer.alloc(16_384);
          }
        })(),
      ),
    );
    expect((result as Rejection).status).toBe(413);
    // The fifth chunk crosses the cap; the stream reads at most one chunk ahead of it.
    expect(pulled).toBeLessThanOrEqual(6);
    await new Promise((resolve) => setImmediate(resolve));
    expect(pulled).toBeLessThanOrEqual(6);
  });
});

describe("capped body reader, bodies that end early", () => {
  it("answers 400 body_incomplete when the stream fails or closes before its end, and never waits forever", async () => {
    const failing = new Readable({ read() {} });
    const failed = readCappedBody({ declaredLength: 10, stream: failing });
    failing.push(Buffer.from("01234"));
    failing.destroy(new Error("aborted"));
    expect(await failed).toMatchObject({ status: 400, reason: "body_incomplete" });

    const closing = new Readable({ read() {} });
    const closed = readCappedBody({ declaredLength: undefined, stream: closing });
    closing.push(Buffer.from("01234"));
    closing.destroy();
    expect(await closed).toMatchObject({ status: 400, reason: "body_incomplete" });
  });
});

describe("source IP", () => {
  it("ignores X-Forwarded-For from an untrusted peer", () => {
    const resolver = new SourceIpResolver(["10.0.0.0/8"]);
    expect(resolver.resolve("127.0.0.1", "10.1.2.3")).toBe("127.0.0.1");
    expect(new SourceIpResolver([]).resolve("::ffff:127.0.0.1", "10.1.2.3")).toBe("127.0.0.1");
  });

  it("takes the right-most untrusted hop from a trusted proxy", () => {
    const resolver = new SourceIpResolver(["127.0.0.0/8", "10.0.0.0/8"]);
    expect(resolver.resolve("127.0.0.1", "203.0.113.9")).toBe("203.0.113.9");
    expect(resolver.resolve("127.0.0.1", "198.51.100.1, 203.0.113.9, 10.0.0.2")).toBe("203.0.113.9");
    expect(resolver.resolve("127.0.0.1", "[2001:db8::1]:443")).toBe("2001:db8::1");
    expect(resolver.resolve("127.0.0.1", "garbage")).toBe("garbage");
  });
});

describe("trigger validation", () => {
  const hmac = { kind: "webhook" as const, listenerId: "l", authMethod: "HMAC" as const, jwksUrl: "", ipRestrictionEnabled: false, allowedCidrs: [] };
  const jwt = { ...hmac, authMethod: "JWT" as const, jwksUrl: "https://keys.example.com/jwks.json" };

  it("refuses an invalid CIDR with 400 naming it", () => {
    expect(() => validateWebhookTrigger({ ...hmac, ipRestrictionEnabled: true, allowedCidrs: ["10.0.0.0/33"] }, { jwksAllowHttp: false })).toThrow(
      /allowedCidrs\[0\] "10.0.0.0\/33"/,
    );
    expect(() => validateWebhookTrigger({ ...hmac, ipRestrictionEnabled: true, allowedCidrs: ["10.0.0.0/8", "::1/128"] }, { jwksAllowHttp: false })).not.toThrow();
  });

  it("accepts https JWKS URLs, and http only on loopback with ACCESSD_JWKS_ALLOW_HTTP", () => {
    expect(() => validateWebhookTrigger(jwt, { jwksAllowHttp: false })).not.toThrow();
    const local = { ...jwt, jwksUrl: "http://127.0.0.1:9999/jwks" };
    expect(() => validateWebhookTrigger(local, { jwksAllowHttp: false })).toThrow(/https/);
    expect(() => validateWebhookTrigger(local, { jwksAllowHttp: true })).not.toThrow();
    expect(() => validateWebhookTrigger({ ...jwt, jwksUrl: "http://example.com/jwks" }, { jwksAllowHttp: true })).toThrow(/loopback/);
    // A JWT trigger without a JWKS URL never gets here: reading the trigger refuses it
    // (automations-resource.test.ts, "trigger.webhook.jwksUrl is required for JWT listeners").
  });
});

describe("webhook trigger hooks", () => {
  it("touch no secret when a trigger that is not HMAC is saved, and drop them when an HMAC trigger stops being one", () => {
    const store = Store.open(":memory:");
    const secrets = new WebhookSecretStore(store.webhooks.secrets, new SecretCipher(Buffer.alloc(32, 7)), new ManualClock(1_700_000_000_000));
    const hooks = webhookTriggerHooks({ secrets, deliveries: store.webhooks.deliveries, jwksAllowHttp: false });
    const hmac: WebhookTriggerConfig = { kind: "webhook", listenerId: "l1", authMethod: "HMAC", jwksUrl: "", ipRestrictionEnabled: false, allowedCidrs: [] };
    const jwt: WebhookTriggerConfig = { ...hmac, authMethod: "JWT", jwksUrl: "https://keys.example.com/jwks" };
    const remove = vi.spyOn(secrets, "remove");
    expect(hooks.saved("a1", { kind: "manual" }, undefined)).toBeUndefined();
    expect(hooks.saved("a1", jwt, { kind: "manual" })).toBeUndefined();
    expect(remove).not.toHaveBeenCalled(); // other automations' cached keys stay cached
    expect(hooks.saved("a1", hmac, jwt)).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(hooks.saved("a1", { kind: "manual" }, hmac)).toBeUndefined();
    expect(remove).toHaveBeenCalledWith("a1");
    expect(store.db.prepare("SELECT count(*) FROM webhook_secrets").pluck().get()).toBe(0);
  });
});

describe("secret store", () => {
  it("keeps secrets sealed at rest and honours the rotation grace period", () => {
    const store = Store.open(":memory:");
    const clock = new ManualClock(1_700_000_000_000);
    const secrets = new WebhookSecretStore(store.webhooks.secrets, new SecretCipher(Buffer.alloc(32, 7)), clock);
    const first = secrets.replace("a1");
    expect(first).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(Buffer.from(first, "base64url")).toHaveLength(32);
    const sealed = store.db.prepare("SELECT sealed FROM webhook_secrets").pluck().all() as Buffer[];
    expect(sealed.some((s) => s.includes(Buffer.from(first)))).toBe(false);

    const sign = (secret: string) => hmacSignature(secret, "1", "e", body);
    const accepts = (secret: string) => verifyHmacSignature(secrets.validKeys("a1"), sign(secret), "1", "e", body) === undefined;
    const { secret: second } = secrets.rotate("a1", 60_000);
    expect(accepts(first)).toBe(true);
    expect(accepts(second)).toBe(true);
    clock.advance(60_000);
    expect(accepts(first)).toBe(false);
    expect(accepts(second)).toBe(true);
    store.close();
  });

  it("keeps at most ten rotated-out secrets in grace, the newest, so a bad signature costs at most eleven HMACs (4,000 rotations cost 150 ms a request)", () => {
    const store = Store.open(":memory:");
    const clock = new ManualClock(1_700_000_000_000);
    const secrets = new WebhookSecretStore(store.webhooks.secrets, new SecretCipher(Buffer.alloc(32, 7)), clock);
    const issued = [secrets.replace("a1")];
    for (let i = 0; i < 15; i++) {
      clock.advance(1_000);
      issued.push(secrets.rotate("a1", 86_400_000).secret);
    }
    expect(maxSecretsInGrace).toBe(10);
    expect(secrets.validKeys("a1")).toHaveLength(11);
    const accepts = (secret: string) =>
      verifyHmacSignature(secrets.validKeys("a1"), hmacSignature(secret, "1", "e", body), "1", "e", body) === undefined;
    expect(issued.map(accepts)).toEqual([...Array<boolean>(5).fill(false), ...Array<boolean>(11).fill(true)]);
    expect(store.db.prepare("SELECT count(*) FROM webhook_secrets").pluck().get()).toBe(11);
    store.close();
  });

  it("tells whether its key opens the stored secrets, and refuses to use one that does not open", () => {
    const store = Store.open(":memory:");
    const clock = new ManualClock(1_700_000_000_000);
    const sealing = new WebhookSecretStore(store.webhooks.secrets, new SecretCipher(Buffer.alloc(32, 7)), clock);
    const other = new WebhookSecretStore(store.webhooks.secrets, new SecretCipher(Buffer.alloc(32, 8)), clock);
    expect(other.keyOpensStoredSecrets()).toBe(true); // nothing stored yet
    sealing.replace("a1");
    expect(sealing.keyOpensStoredSecrets()).toBe(true);
    expect(other.keyOpensStoredSecrets()).toBe(false);
    expect(() => other.validKeys("a1")).toThrow(StoredDataUnreadableError);
    expect(() => other.validKeys("a1")).toThrow(/^webhook secret .* of automation a1 does not open with the data key$/);
    expect(isStoreUnavailable(new StoredDataUnreadableError("x"))).toBe(true);
    store.close();
  });
});

describe("configuration", () => {
  it("parses the webhook variables and names a bad one", () => {
    const config = loadConfig({
      ACCESSD_TRUSTED_PROXIES: "10.0.0.0/8, 192.168.1.1",
      ACCESSD_JWKS_ALLOW_HTTP: "true",
      ACCESSD_EVENT_RETENTION: "2d",
      ACCESSD_DATA_KEY: "ab".repeat(32),
    });
    expect(config.trustedProxies).toEqual(["10.0.0.0/8", "192.168.1.1"]);
    expect(config.jwksAllowHttp).toBe(true);
    expect(config.eventRetentionMs).toBe(2 * 86_400_000);
    expect(loadConfig({ ACCESSD_EVENT_RETENTION: "10m" }).eventRetentionMs).toBe(600_000);
    expect(config.dataKey).toHaveLength(32);
    for (const [name, value] of [
      ["ACCESSD_TRUSTED_PROXIES", "10.0.0.0/40"],
      ["ACCESSD_JWKS_ALLOW_HTTP", "yes please"],
      ["ACCESSD_EVENT_RETENTION", "7 days"],
      // Shorter than the 10 minutes a signed request can be replayed for: a replay would run again.
      ["ACCESSD_EVENT_RETENTION", "9m"],
      ["ACCESSD_EVENT_RETENTION", "599s"],
      ["ACCESSD_DATA_KEY", "short"],
    ] as const) {
      expect(() => loadConfig({ [name]: value })).toThrow(ConfigError);
      expect(() => loadConfig({ [name]: value })).toThrow(new RegExp(`^${name}:`));
    }
  });
});

/** An accepted delivery-log entry of `automationId`, logged at `msecs` (its UUIDv7 id carries the time). */
function logAccepted(store: Store, automationId: string, msecs: number, seq: number, eventId = ""): void {
  store.webhooks.deliveries.insert({
    id: uuidv7({ msecs, seq }),
    automationId,
    eventId,
    status: 200,
    reason: "accepted",
    sourceIp: "127.0.0.1",
    sizeBytes: 1,
    receivedAt: msecs,
    executionId: "x",
  });
}

/** Runs `work`, counting the event-loop turns (setImmediate callbacks) that ran meanwhile. */
async function turnsDuring<T>(work: () => Promise<T>): Promise<{ result: T; turns: number }> {
  let turns = 0;
  let counting = true;
  const count = (): void => {
    turns++;
    if (counting) setImmediate(count);
  };
  setImmediate(count);
  const result = await work();
  counting = false;
  return { result, turns };
}

const day = 86_400_000;

/** An in-memory store and a housekeeping job on it at day 10, retention one day, its first pass done. */
async function housekeepingOnDayTen(options: { deliveriesPerAutomation?: number } = {}): Promise<{ store: Store; job: Housekeeping }> {
  const store = Store.open(":memory:");
  const job = startHousekeeping({ store, clock: new ManualClock(10 * day), log: createLogger("silent"), eventRetentionMs: day, ...options });
  await job.firstPass;
  return { store, job };
}

describe("housekeeping job", () => {
  it("runs one pass at once when the thread was held across a scheduled one, which node-cron skips (the delivery log stayed untrimmed until the next)", async () => {
    const store = Store.open(":memory:");
    // A slot two seconds ahead, once a minute: held across it, the next would be a minute later.
    const slot = new Date(Date.now() + 2_000).getSeconds();
    const job = startHousekeeping({ store, clock: new ManualClock(10 * day), log: createLogger("silent"), eventRetentionMs: day, schedule: `${slot} * * * * *` });
    await job.firstPass;
    const passes = vi.spyOn(store.webhooks.events, "deleteReceivedBefore");
    try {
      while (new Date().getSeconds() !== (slot + 59) % 60) await new Promise((r) => setTimeout(r, 20));
      busyFor(4_500); // held across the slot, past node-cron's tolerance of a late one
      for (let waited = 0; passes.mock.calls.length === 0 && waited < 1_500; waited += 50) await new Promise((r) => setTimeout(r, 50));
      expect(passes.mock.calls.length).toBeGreaterThan(0);
    } finally {
      passes.mockRestore();
      job.stop();
      store.close();
    }
  });

  it("deletes event records older than the retention and keeps newer ones", async () => {
    const store = Store.open(":memory:");
    const clock = new ManualClock(10 * day);
    const events = store.webhooks.events;
    const [old, recent] = [randomUUID(), randomUUID()];
    events.insertIfNew({ listenerId: "l", eventId: old, receivedAt: clock.now() - 7 * day - 1, executionId: "x1" });
    events.insertIfNew({ listenerId: "l", eventId: recent, receivedAt: clock.now() - 7 * day + 1000, executionId: "x2" });
    const job = startHousekeeping({ store, clock, log: createLogger("silent"), eventRetentionMs: 7 * day });
    await job.firstPass; // it runs once at start
    expect(events.has("l", old)).toBe(false);
    expect(events.has("l", recent)).toBe(true);
    clock.advance(1001);
    expect((await job.runOnce()).events).toBe(1);
    expect(events.has("l", recent)).toBe(false);
    job.stop();
    store.close();
  });

  it("trims the delivery log to the newest entries per automation", async () => {
    const store = Store.open(":memory:");
    const clock = new ManualClock(1_700_000_000_000);
    const ids = Array.from({ length: 15 }, (_, i) => uuidv7({ msecs: clock.now() + i }));
    for (const id of ids) {
      store.webhooks.deliveries.insert({
        id,
        automationId: "a",
        eventId: "",
        status: 401,
        reason: "signature_mismatch",
        sourceIp: "127.0.0.1",
        sizeBytes: 1,
        receivedAt: clock.now(),
        executionId: "",
      });
    }
    const job = startHousekeeping({ store, clock, log: createLogger("silent"), eventRetentionMs: day, deliveriesPerAutomation: 10 });
    await job.firstPass;
    expect(store.webhooks.deliveries.listBefore("a", undefined, 100).map((d) => d.id)).toHaveLength(10);
    expect(store.webhooks.deliveries.listBefore("a", undefined, 1)[0]?.id).toBe(ids[14]);
    job.stop();
    store.close();
  });

  it("deletes delivery-log entries logged before the retention, by the time in their UUIDv7 id", async () => {
    const store = Store.open(":memory:");
    const clock = new ManualClock(1_700_000_000_000);
    const cutoff = clock.now() - day;
    const log = (msecs: number, eventId: string) => logAccepted(store, "a", msecs, 0, eventId);
    log(cutoff - day, "long-gone");
    log(cutoff - 1, "just-expired");
    log(cutoff, "kept");
    log(clock.now(), "new");
    const job = startHousekeeping({ store, clock, log: createLogger("silent"), eventRetentionMs: day });
    await job.firstPass;
    expect(store.webhooks.deliveries.listBefore("a", undefined, 100).map((d) => d.eventId)).toEqual(["new", "kept"]);
    job.stop();
    store.close();
  });

  it("deletes in chunks of its own transaction, letting requests run in between", async () => {
    const { store, job } = await housekeepingOnDayTen({ deliveriesPerAutomation: 10 });
    const old = 2.5 * housekeepingChunkRows;
    store.transaction(() => {
      for (let i = 0; i < old; i++) {
        const eventId = randomUUID();
        store.webhooks.events.insertIfNew({ listenerId: "l", eventId, receivedAt: 0, executionId: "x" });
        logAccepted(store, "a", 10 * day, i, eventId);
      }
    });
    const { result, turns } = await turnsDuring(() => job.runOnce());
    expect(result).toEqual({ events: old, deliveries: old - 10, executions: 0, secrets: 0, tokenAddresses: 0 });
    expect(eventRecordsOf(store, "l")).toBe(0);
    expect(store.webhooks.deliveries.listBefore("a", undefined, 100)).toHaveLength(10);
    // 3 chunks of events and 3 of deliveries: the event loop turned between them.
    expect(turns).toBeGreaterThanOrEqual(4);
    job.stop();
    store.close();
  });

  it("takes at most about its share of the thread while a long pass runs, resting between chunks", async () => {
    const { store, job } = await housekeepingOnDayTen({ deliveriesPerAutomation: 10 });
    const entries = 100 * housekeepingChunkRows;
    store.transaction(() => {
      for (let i = 0; i < entries; i++) logAccepted(store, "a", 10 * day, i);
    });
    const before = performance.eventLoopUtilization();
    const result = await job.runOnce();
    const { utilization } = performance.eventLoopUtilization(before);
    expect(result.deliveries).toBe(entries - 10);
    // Chunks with only a turn between them keep the loop busy the whole pass (utilization near 1);
    // resting for the share leaves it idle most of the time. Margin for timers firing late.
    expect(housekeepingThreadShare).toBeLessThanOrEqual(0.1);
    expect(utilization).toBeLessThan(0.35);
    job.stop();
    store.close();
  });

  it("turns the event loop between automations with a few entries each (50,000 automations held the thread 3 s a pass)", async () => {
    const { store, job } = await housekeepingOnDayTen();
    store.transaction(() => {
      for (let a = 0; a < 200; a++) logAccepted(store, `a${a}`, 10 * day, a);
    });
    const { turns } = await turnsDuring(() => job.runOnce());
    expect(turns).toBeGreaterThanOrEqual(200); // at least a turn an automation (two chunks each)
    job.stop();
    store.close();
  });

  it("runs one pass at a time: a pass asked for while one is under way is that pass", async () => {
    const store = Store.open(":memory:");
    const clock = new ManualClock(10 * day);
    const job = startHousekeeping({ store, clock, log: createLogger("silent"), eventRetentionMs: day });
    const during = job.runOnce(); // the first pass is still under way
    expect(during).toBe(job.runOnce());
    await job.firstPass;
    await during;
    const next = job.runOnce();
    expect(next).not.toBe(during);
    await next;
    job.stop();
    store.close();
  });
});

describe("housekeeping when the wall clock steps", () => {
  it("plans its schedule afresh after a step of more than a minute either way, and says so (node-cron waited for the slot it expected: a step back an hour, no pass for an hour)", async () => {
    vi.useFakeTimers({ toFake: ["setInterval", "clearInterval"] });
    const store = Store.open(":memory:");
    const lines: Record<string, unknown>[] = [];
    const log = createLogger("warn", new Writable({ write: (chunk: Buffer, _encoding, done) => done(void lines.push(JSON.parse(chunk.toString()) as Record<string, unknown>)) }));
    const schedule = vi.spyOn(cron, "schedule");
    const realNow = Date.now.bind(Date);
    let offset = 0;
    const now = vi.spyOn(Date, "now").mockImplementation(() => realNow() + offset);
    try {
      const job = startHousekeeping({ store, clock: new ManualClock(), log, eventRetentionMs: day });
      await job.firstPass;
      expect(schedule).toHaveBeenCalledTimes(1);
      offset = 30_000; // drift within a minute: nothing
      vi.advanceTimersByTime(15_000);
      offset = 30_000 - 3_600_000; // an hour back
      vi.advanceTimersByTime(15_000);
      expect(schedule).toHaveBeenCalledTimes(2);
      expect(lines).toEqual([expect.objectContaining({ level: 40, stepSeconds: -3600, msg: "the wall clock stepped: housekeeping planned afresh" })]);
      job.stop();
    } finally {
      now.mockRestore();
      schedule.mockRestore();
      vi.useRealTimers();
      store.close();
    }
  });
});

describe("delivery log", () => {
  it("logs at most refusalsPerSecond refusals per automation and second, and every acceptance", () => {
    const store = Store.open(":memory:");
    const clock = new ManualClock(1_700_000_000_000);
    const log = new DeliveryLog(store.webhooks.deliveries, { clock, refusalsPerSecond: 5 });
    const facts = (automationId: string): DeliveryFacts => ({
      automationId,
      eventId: "",
      sourceIp: "203.0.113.9",
      sizeBytes: 2,
      receivedAt: clock.now(),
      bodyConsumed: true,
    });
    const refused = { status: 401, reason: "signature_mismatch", executionId: "" };
    const rows = (automationId: string) => store.webhooks.deliveries.listBefore(automationId, undefined, 100);

    for (let i = 0; i < 8; i++) log.record(facts("a"), refused);
    expect(rows("a")).toHaveLength(5); // the flood beyond the bucket is not stored
    log.record(facts("a"), { status: 200, reason: "accepted", executionId: "x" });
    expect(rows("a")).toHaveLength(6); // an acceptance always is
    for (let i = 0; i < 3; i++) log.record(facts("b"), refused);
    expect(rows("b")).toHaveLength(3); // each automation has its own budget

    clock.advance(400); // two refusals' worth
    for (let i = 0; i < 3; i++) log.record(facts("a"), refused);
    expect(rows("a")).toHaveLength(8);
    clock.advance(60_000); // the bucket refills to its size, not beyond
    for (let i = 0; i < 8; i++) log.record(facts("a"), refused);
    expect(rows("a")).toHaveLength(13);

    clock.advance(-3_600_000); // the clock steps back an hour: the bucket refills from there on
    log.record(facts("a"), refused);
    clock.advance(1_000);
    for (let i = 0; i < 3; i++) log.record(facts("a"), refused);
    expect(rows("a")).toHaveLength(16); // (the step emptied the budget for an hour: none was stored)
    store.close();
  });
});
