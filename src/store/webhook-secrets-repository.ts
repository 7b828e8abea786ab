import type { Database } from "./database.js";
import { ReadCache } from "./read-cache.js";

/** What a webhook secret is sealed with besides the data key: its row, so a sealed secret copied onto another row does not open. */
export function webhookSecretAssociatedData(secretId: string, automationId: string): string {
  return `webhook-secret:${secretId}:${automationId}`;
}

/** A listener's HMAC secret as stored: sealed (encrypted), never in clear. */
export interface StoredWebhookSecret {
  id: string;
  automationId: string;
  sealed: Buffer;
  createdAt: number;
  /** undefined for the current secret; the end of the grace period of a rotated-out one. */
  expiresAt: number | undefined;
}

interface SecretRow {
  id: string;
  automation_id: string;
  sealed: Buffer;
  created_at: number;
  expires_at: number | null;
}

const toSecret = (row: SecretRow): StoredWebhookSecret => ({
  id: row.id,
  automationId: row.automation_id,
  sealed: row.sealed,
  createdAt: row.created_at,
  expiresAt: row.expires_at ?? undefined,
});

export class WebhookSecretsRepository {
  private readonly insertStmt;
  private readonly validStmt;
  private readonly currentStmt;
  private readonly expireStmt;
  private readonly deleteForStmt;
  private readonly deleteExpiredStmt;
  private readonly newestStmt;
  private readonly deleteInGraceBeyondStmt;
  /** Each automation's unexpired secrets (every HMAC webhook asks); cleared by every write below. */
  private readonly unexpired: ReadCache<string, readonly StoredWebhookSecret[]>;

  constructor(db: Database) {
    this.unexpired = new ReadCache(db);
    this.insertStmt = db.prepare<[string, string, Buffer, number]>(
      "INSERT INTO webhook_secrets (id, automation_id, sealed, created_at, expires_at) VALUES (?, ?, ?, ?, NULL)",
    );
    this.validStmt = db.prepare<[string, number], SecretRow>(
      "SELECT * FROM webhook_secrets WHERE automation_id = ? AND (expires_at IS NULL OR expires_at > ?) ORDER BY id DESC",
    );
    this.currentStmt = db.prepare<[string], SecretRow>(
      "SELECT * FROM webhook_secrets WHERE automation_id = ? AND expires_at IS NULL",
    );
    // A secret already in its grace period keeps the earlier of its own end and the new one.
    this.expireStmt = db.prepare<[number, number, string]>(
      "UPDATE webhook_secrets SET expires_at = min(coalesce(expires_at, ?), ?) WHERE automation_id = ?",
    );
    this.deleteForStmt = db.prepare<[string]>("DELETE FROM webhook_secrets WHERE automation_id = ?");
    this.newestStmt = db.prepare<[], SecretRow>("SELECT * FROM webhook_secrets ORDER BY id DESC LIMIT 1");
    this.deleteInGraceBeyondStmt = db
      .prepare<[string, string, number], string>(
        `DELETE FROM webhook_secrets WHERE automation_id = ? AND id IN (
           SELECT id FROM webhook_secrets WHERE automation_id = ? AND expires_at IS NOT NULL ORDER BY id DESC LIMIT -1 OFFSET ?
         ) RETURNING id`,
      )
      .pluck();
    this.deleteExpiredStmt = db.prepare<[number]>(
      "DELETE FROM webhook_secrets WHERE expires_at IS NOT NULL AND expires_at <= ?",
    );
  }

  insert(secret: { id: string; automationId: string; sealed: Buffer; createdAt: number }): void {
    this.unexpired.clear();
    this.insertStmt.run(secret.id, secret.automationId, secret.sealed, secret.createdAt);
  }

  /** The secrets a signature may be made with at `now`: the current one and any in grace, newest first. */
  valid(automationId: string, now: number): StoredWebhookSecret[] {
    // Cached as of time 0 (every secret not yet deleted), filtered by `now` on each call.
    const secrets = this.unexpired.get(automationId, () => this.validStmt.all(automationId, 0).map(toSecret)) ?? [];
    return secrets.filter((secret) => secret.expiresAt === undefined || secret.expiresAt > now);
  }

  current(automationId: string): StoredWebhookSecret | undefined {
    const row = this.currentStmt.get(automationId);
    return row === undefined ? undefined : toSecret(row);
  }

  /** The most recently created secret of any automation, expired or not (undefined when none is stored). */
  newest(): StoredWebhookSecret | undefined {
    const row = this.newestStmt.get();
    return row === undefined ? undefined : toSecret(row);
  }

  /** Every secret of the automation stops being valid at `expiresAt` (or earlier, if it already did). */
  expireAll(automationId: string, expiresAt: number): void {
    this.unexpired.clear();
    this.expireStmt.run(expiresAt, expiresAt, automationId);
  }

  /**
   * Deletes the automation's secrets in grace beyond the newest `keep` of them (ids are
   * time-ordered); returns the ids deleted.
   */
  keepNewestInGrace(automationId: string, keep: number): string[] {
    const deleted = this.deleteInGraceBeyondStmt.all(automationId, automationId, keep);
    if (deleted.length > 0) this.unexpired.clear();
    return deleted;
  }

  deleteFor(automationId: string): void {
    this.unexpired.clear();
    this.deleteForStmt.run(automationId);
  }

  deleteExpired(now: number): number {
    this.unexpired.clear();
    return this.deleteExpiredStmt.run(now).changes;
  }
}
