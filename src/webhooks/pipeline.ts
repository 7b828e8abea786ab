import type { KeyObject } from "node:crypto";
import type { WebhookListenerTarget } from "../automations/trigger-config.js";
import type { Clock } from "../clock.js";
import type { Logger } from "../logger.js";
import { checkActive } from "./activation.js";
import type { DeliveryLog } from "./delivery-log.js";
import { readCappedBody, type BodySource } from "./body-reader.js";
import { webhookEndpointUrl } from "./endpoint-url.js";
import type { AcceptedEvent, EventToAccept } from "./event-acceptance.js";
import { checkEventId } from "./event-id.js";
import { verifyHmacSignature } from "./hmac-signature.js";
import type { IpRestrictions } from "./ip-restriction.js";
import type { JwksCache } from "./jwks-cache.js";
import { parseJsonBody } from "./json-body.js";
import { verifyWebhookJwt } from "./jwt-verification.js";
import { lookUpListener, recheckListener, type ListenerDirectory } from "./listener-lookup.js";
import { Rejection } from "./rejection.js";
import { headerValue, requireHeaders, type HeaderMap } from "./required-headers.js";
import { everyValueOf } from "../server/node-http.js";
import type { SourceIpResolver } from "../server/source-ip.js";
import { checkTimestamp } from "./timestamp-window.js";

export interface WebhookPipelineDeps {
  clock: Clock;
  /** The tenant base URL (JWT `sub`, prefix of the `aud`). */
  baseUrl: string;
  listeners: ListenerDirectory;
  sourceIp: SourceIpResolver;
  ipRestrictions: IpRestrictions;
  /** The HMAC keys valid now for the automation's listener. */
  hmacKeys(automationId: string): readonly KeyObject[];
  /** A count of the changes to HMAC secrets (replace, rotate, remove): unchanged, `hmacKeys` answers as before. */
  hmacKeyWrites(): number;
  jwks: JwksCache;
  /**
   * Settles once the acceptance committed (or failed: then it rejects and nothing is recorded).
   * `stillAcceptable` runs first in its transaction; a Rejection from it records nothing.
   */
  accept(
    event: EventToAccept,
    inTransaction: (executionId: string) => void,
    stillAcceptable: () => Rejection | undefined,
  ): Promise<AcceptedEvent | Rejection>;
  deliveries: DeliveryLog;
  log: Logger;
}

export interface InboundWebhook {
  listenerId: string;
  /** The TCP peer address. */
  peerAddress: string;
  headers: HeaderMap;
  /** The headers as sent (Node's `rawHeaders`): a JWT listener reads every Authorization header, not Node's first. */
  rawHeaders: readonly string[];
  body: BodySource;
}

/** What the delivery log records about a request, whatever its verdict. */
export interface DeliveryFacts {
  /** Unset when the listener is unknown. */
  automationId: string | undefined;
  eventId: string;
  sourceIp: string;
  /** Bytes read, or the declared Content-Length when the body was never read. */
  sizeBytes: number;
  receivedAt: number;
  /** True once the body has been read to its end. */
  bodyConsumed: boolean;
}

export interface Accepted extends AcceptedEvent {
  eventId: string;
}

export interface WebhookOutcome {
  verdict: Accepted | Rejection;
  facts: DeliveryFacts;
}

/**
 * The inbound pipeline of ARCHITECTURE "Inbound webhooks", stage by stage, in its binding order.
 * Every verdict is written to the delivery log: a refusal on its own, an acceptance inside the
 * transaction that records the event and creates the execution.
 */
export class WebhookPipeline {
  constructor(private readonly deps: WebhookPipelineDeps) {}

  async run(request: InboundWebhook): Promise<WebhookOutcome> {
    const { deps } = this;
    const facts: DeliveryFacts = {
      automationId: undefined,
      eventId: "",
      sourceIp: deps.sourceIp.resolve(request.peerAddress, request.headers["x-forwarded-for"]),
      sizeBytes: request.body.declaredLength ?? 0,
      receivedAt: deps.clock.now(),
      bodyConsumed: false,
    };
    const verdict = await this.stages(request, facts);
    if (verdict instanceof Rejection) {
      try {
        deps.deliveries.record(facts, { status: verdict.status, reason: verdict.reason, executionId: "" });
      } catch (e) {
        // The refusal stands even when its log entry cannot be written (the store full or failing).
        deps.log.error({ err: e, reason: verdict.reason, automationId: facts.automationId }, "webhook refusal not written to the delivery log");
      }
    }
    return { verdict, facts };
  }

  private async stages(request: InboundWebhook, facts: DeliveryFacts): Promise<Accepted | Rejection> {
    const { deps } = this;
    // 1. listener lookup
    const writesAtLookup = deps.listeners.writes();
    const target = lookUpListener(deps.listeners, request.listenerId);
    if (target instanceof Rejection) return target;
    facts.automationId = target.automationId;
    // 2. source IP
    const ipRejection = deps.ipRestrictions.check(target.trigger, facts.sourceIp);
    if (ipRejection !== undefined) return ipRejection;
    // 3. required headers
    const headers = requireHeaders(request.headers);
    if (headers instanceof Rejection) return headers;
    facts.eventId = headers.eventId.slice(0, 64);
    // 4. timestamp window, event id shape
    const timestampRejection = checkTimestamp(headers.timestamp, facts.receivedAt);
    if (timestampRejection !== undefined) return timestampRejection;
    const eventId = checkEventId(headers.eventId);
    if (eventId instanceof Rejection) return eventId;
    facts.eventId = eventId;
    // 5. body, capped
    const read = await readCappedBody(request.body);
    if (read instanceof Rejection) return read;
    facts.sizeBytes = read.body.length;
    facts.bodyConsumed = true;
    // 6. authentication
    const keyWritesAtCheck = deps.hmacKeyWrites();
    const authRejection = await this.authenticate(target, request, headers.timestamp, headers.eventId, read.body);
    if (authRejection !== undefined) return authRejection;
    // 7. JSON
    const trigger = parseJsonBody(read.body);
    if (trigger instanceof Rejection) return trigger;
    // 8. published and enabled
    const inactive = checkActive(target);
    if (inactive !== undefined) return inactive;
    // 9. record and enqueue, once, if the automation did not change meanwhile in a way that refuses it
    const snapshot = { listenerId: request.listenerId, target, writes: writesAtLookup };
    const accepted = await deps.accept(
      {
        listenerId: target.trigger.listenerId,
        automationId: target.automationId,
        eventId,
        trigger,
        bodyBytes: read.body.length,
        receivedAt: facts.receivedAt,
      },
      (executionId) => deps.deliveries.record(facts, { status: 200, reason: "accepted", executionId }),
      () =>
        recheckListener(deps.listeners, deps.ipRestrictions, snapshot, facts.sourceIp) ??
        this.recheckHmacKeys(target, keyWritesAtCheck, request.headers, headers.timestamp, headers.eventId, read.body),
    );
    if (accepted instanceof Rejection) return accepted;
    // 10. accepted
    return { eventId, executionId: accepted.executionId };
  }

  /**
   * Stage 9, after recheckListener: an HMAC secret rotated without grace (a leaked one) or replaced
   * after the signature was checked ends what the signature was checked with, so the signature
   * is checked again against the keys valid now. Without a secret change since stage 6 this is
   * one comparison.
   */
  private recheckHmacKeys(
    target: WebhookListenerTarget,
    keyWritesAtCheck: number,
    headers: HeaderMap,
    timestamp: string,
    eventId: string,
    body: Buffer,
  ): Rejection | undefined {
    if (target.trigger.authMethod !== "HMAC" || this.deps.hmacKeyWrites() === keyWritesAtCheck) return undefined;
    return this.verifyHmac(target, headers, timestamp, eventId, body);
  }

  /** Stage 6 for an HMAC listener: the signature against the keys valid now. */
  private verifyHmac(target: WebhookListenerTarget, headers: HeaderMap, timestamp: string, eventId: string, body: Buffer): Rejection | undefined {
    const keys = this.deps.hmacKeys(target.automationId);
    return verifyHmacSignature(keys, headerValue(headers, "webhook-signature"), timestamp, eventId, body);
  }

  private authenticate(
    target: WebhookListenerTarget,
    request: InboundWebhook,
    timestamp: string,
    eventId: string,
    body: Buffer,
  ): Promise<Rejection | undefined> | Rejection | undefined {
    const { deps } = this;
    const trigger = target.trigger;
    if (trigger.authMethod === "HMAC") return this.verifyHmac(target, request.headers, timestamp, eventId, body);
    return verifyWebhookJwt(deps.jwks, {
      // Every Authorization header sent: two are refused, not the first taken (as on the API).
      authorization: everyValueOf(request.rawHeaders, "authorization"),
      jwksUrl: trigger.jwksUrl,
      baseUrl: deps.baseUrl,
      endpointUrl: webhookEndpointUrl(deps.baseUrl, trigger.listenerId),
      eventId,
      body,
      nowMs: deps.clock.now(),
    });
  }
}
