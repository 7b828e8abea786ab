import { initialSchema } from "./001-initial-schema.js";
import { iamSchema } from "./002-iam.js";
import { automationsSchema } from "./003-automations.js";
import { webhooksSchema } from "./004-webhooks.js";
import { leanWriteIndexesSchema } from "./005-lean-write-indexes.js";
import { sealedSigningKeysSchema } from "./006-sealed-signing-keys.js";
import { usersByEmailNocaseSchema } from "./007-users-by-email-nocase.js";
import { finishEarly005Schema } from "./008-finish-early-005.js";
import { clientTokenAddressesSchema } from "./009-client-token-addresses.js";
import { dropSecretsOfNonHmacTriggersSchema } from "./010-drop-secrets-of-non-hmac-triggers.js";
import { eventKeysInMemorySchema } from "./011-event-keys-in-memory.js";
import { executionsWithoutAutomationIndexSchema } from "./012-executions-without-automation-index.js";
import type { Database } from "../database.js";

/** A numbered schema change. Numbers are never reused; a shipped migration is never edited. */
export interface Migration {
  version: number;
  name: string;
  sql: string;
  /** Runs after `sql`, in the same transaction: for a change that depends on what the database holds. */
  apply?(db: Database): void;
}

export const migrations: readonly Migration[] = [
  initialSchema,
  iamSchema,
  automationsSchema,
  webhooksSchema,
  leanWriteIndexesSchema,
  sealedSigningKeysSchema,
  usersByEmailNocaseSchema,
  finishEarly005Schema,
  clientTokenAddressesSchema,
  dropSecretsOfNonHmacTriggersSchema,
  eventKeysInMemorySchema,
  executionsWithoutAutomationIndexSchema,
];
