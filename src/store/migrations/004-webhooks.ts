import type { Migration } from "./index.js";

/**
 * Webhook listeners' secrets, event records (idempotency) and the delivery log. Rows name the
 * automation by id without a foreign key: the automations service calls the webhook hooks when an
 * automation is deleted, and event records must outlive a deleted automation until they expire.
 */
export const webhooksSchema: Migration = {
  version: 4,
  name: "webhook secrets, event records, delivery log",
  sql: `
CREATE TABLE webhook_secrets (
  id TEXT PRIMARY KEY,
  automation_id TEXT NOT NULL,
  -- AES-256-GCM: iv (12) || tag (16) || ciphertext; AAD binds it to (id, automation_id).
  sealed BLOB NOT NULL,
  created_at INTEGER NOT NULL,
  -- NULL for the current secret; set when a rotation starts its grace period.
  expires_at INTEGER
) STRICT;
CREATE INDEX webhook_secrets_by_automation ON webhook_secrets (automation_id, id);

CREATE TABLE webhook_events (
  listener_id TEXT NOT NULL,
  event_id TEXT NOT NULL,
  received_at INTEGER NOT NULL,
  execution_id TEXT NOT NULL,
  PRIMARY KEY (listener_id, event_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX webhook_events_by_time ON webhook_events (received_at);

CREATE TABLE webhook_deliveries (
  id TEXT PRIMARY KEY,
  automation_id TEXT NOT NULL,
  event_id TEXT NOT NULL,
  status INTEGER NOT NULL,
  reason TEXT NOT NULL,
  source_ip TEXT NOT NULL,
  size_bytes INTEGER NOT NULL,
  received_at INTEGER NOT NULL,
  execution_id TEXT NOT NULL
) STRICT;
CREATE INDEX webhook_deliveries_by_automation ON webhook_deliveries (automation_id, id);
CREATE INDEX webhook_deliveries_by_time ON webhook_deliveries (received_at);
`,
};
