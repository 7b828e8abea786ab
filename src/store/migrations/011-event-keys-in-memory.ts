import type { Migration } from "./index.js";

/**
 * The event records' unique (listener_id, event_id) index goes: their uniqueness is kept by an
 * index in memory, built from the rows before the server listens (EventKeyIndex,
 * WebhookEventsRepository). The senders' random event ids put each new entry of the index in the
 * file on a page of its own: a WAL frame, often a page read, and a page the checkpoint copies, for
 * every accepted webhook. Without it an accepted webhook writes 42% fewer frames (1.95 instead of
 * 3.34), and the webhooks bench accepts 13-27% more a second (bench/README.md).
 */
export const eventKeysInMemorySchema: Migration = {
  version: 11,
  name: "event records without a unique index in the file: their uniqueness is kept in memory",
  sql: `
DROP INDEX webhook_events_by_event;
`,
};
