import { randomBytes, type KeyObject } from "node:crypto";
import type { Clock } from "../clock.js";
import { newId } from "../store/ids.js";
import { StoredDataUnreadableError } from "../store/store-errors.js";
import { webhookSecretAssociatedData, type WebhookSecretsRepository } from "../store/webhook-secrets-repository.js";
import { hmacKey } from "./hmac-signature.js";
import type { SecretCipher } from "../store/secret-cipher.js";

/** RotateWebhookSecret keeps the previous secret valid this long unless told otherwise. */
export const defaultRotationGraceMs = 24 * 3_600_000;

const maxCachedKeys = 10_000;

/**
 * Rotated-out secrets a listener keeps in their grace period at most: a rotation beyond that ends
 * the oldest at once. Each valid secret costs an HMAC of the body on every request whose signature
 * does not match (anyone's who knows the listener URL), so without a bound a client that rotates
 * often made each bad request dearer without end (4,000 secrets: about 150 ms of the thread).
 * Ten leave room for a rotation retried, or repeated before every sender moved.
 */
export const maxSecretsInGrace = 10;

export interface RotatedSecret {
  secret: string;
  previousExpiresAt: number;
}

/**
 * HMAC listener secrets: 256 random bits as base64url text, sealed at rest. Opened secrets are
 * kept as HMAC keys by secret id, so a request costs one indexed SELECT and no decryption.
 */
export class WebhookSecretStore {
  private readonly keys = new Map<string, KeyObject>();
  /** Counts replace, rotate and remove: unchanged, the keys a signature was checked with still hold. */
  private changes = 0;

  constructor(
    private readonly repository: WebhookSecretsRepository,
    private readonly cipher: SecretCipher,
    private readonly clock: Clock,
  ) {}

  /** How many times secrets were replaced, rotated or removed in this process. */
  get writes(): number {
    return this.changes;
  }

  hasCurrent(automationId: string): boolean {
    return this.repository.current(automationId) !== undefined;
  }

  /** A new current secret; every earlier one ends now. Returns the secret text, shown once. */
  replace(automationId: string): string {
    this.remove(automationId);
    return this.issue(automationId);
  }

  /**
   * A new current secret; the earlier ones stay valid for `graceMs` (or to the end of a grace
   * they were already in, if sooner), the newest `maxSecretsInGrace` of them.
   */
  rotate(automationId: string, graceMs: number): RotatedSecret {
    if (graceMs <= 0) {
      // Ended at once: deleted, not given an end time, which a clock stepped back would put in
      // the future again (a secret rotated out with 0s signed again for the step's length).
      const now = this.clock.now();
      this.remove(automationId);
      return { secret: this.issue(automationId), previousExpiresAt: now };
    }
    this.changes++;
    const previousExpiresAt = this.clock.now() + graceMs;
    this.repository.expireAll(automationId, previousExpiresAt);
    for (const id of this.repository.keepNewestInGrace(automationId, maxSecretsInGrace)) this.keys.delete(id);
    return { secret: this.issue(automationId), previousExpiresAt };
  }

  remove(automationId: string): void {
    this.changes++;
    for (const secret of this.repository.valid(automationId, 0)) this.keys.delete(secret.id);
    this.repository.deleteFor(automationId);
  }

  /**
   * The HMAC keys a signature may be made with now: the current secret and any still in grace.
   * Throws StoredDataUnreadableError (answered 503) when one of them does not open with the data key.
   */
  validKeys(automationId: string): KeyObject[] {
    return this.repository.valid(automationId, this.clock.now()).map((stored) => {
      let key = this.keys.get(stored.id);
      if (key === undefined) {
        if (this.keys.size >= maxCachedKeys) this.keys.clear();
        key = hmacKey(this.open(stored.id, automationId, stored.sealed));
        this.keys.set(stored.id, key);
      }
      return key;
    });
  }

  /**
   * False when the database holds secrets and the newest does not open with this store's data key:
   * the service was started with another key than the one that sealed them. Used at start for a
   * database sealed before the data key had its own check (`checkDataKey`).
   */
  keyOpensStoredSecrets(): boolean {
    const newest = this.repository.newest();
    return newest === undefined || this.cipher.opens(newest.sealed, webhookSecretAssociatedData(newest.id, newest.automationId));
  }

  private open(secretId: string, automationId: string, sealed: Buffer): string {
    try {
      return this.cipher.open(sealed, webhookSecretAssociatedData(secretId, automationId)).toString("utf8");
    } catch (e) {
      throw new StoredDataUnreadableError(
        `webhook secret ${secretId} of automation ${automationId} does not open with the data key`,
        { cause: e },
      );
    }
  }

  private issue(automationId: string): string {
    const id = newId();
    const secret = randomBytes(32).toString("base64url");
    const sealed = this.cipher.seal(Buffer.from(secret, "utf8"), webhookSecretAssociatedData(id, automationId));
    this.repository.insert({ id, automationId, sealed, createdAt: this.clock.now() });
    return secret;
  }
}

