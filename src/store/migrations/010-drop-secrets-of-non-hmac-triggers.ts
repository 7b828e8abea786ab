import type { Migration } from "./index.js";

/**
 * Until this release an HMAC listener's secrets stayed stored (sealed, never expiring) when its
 * automation's trigger was changed to manual; they were dropped only with the automation. Saving
 * a trigger that is not HMAC drops them now (webhook-trigger-hooks.ts): this drops those left
 * behind by earlier builds.
 */
export const dropSecretsOfNonHmacTriggersSchema: Migration = {
  version: 10,
  name: "drop the HMAC secrets of automations whose trigger is no longer HMAC",
  sql: `
DELETE FROM webhook_secrets WHERE automation_id IN (
  SELECT id FROM automations
  WHERE json_extract(trigger, '$.kind') IS NOT 'webhook' OR json_extract(trigger, '$.authMethod') IS NOT 'HMAC'
);
`,
};
