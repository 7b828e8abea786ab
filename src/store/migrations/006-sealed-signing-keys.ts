import type { Migration } from "./index.js";

/**
 * The token signing keys are sealed at rest under the data key, as webhook secrets are: a copy of
 * the database alone (a backup gone astray) no longer lets anyone mint access tokens. SQL cannot
 * seal, so the column is added here and `AccessTokens.load` seals a key still held in clear on the
 * first start with this migration, emptying `private_jwk` (kept for such keys only).
 */
export const sealedSigningKeysSchema: Migration = {
  version: 6,
  name: "token signing keys sealed at rest",
  sql: `
ALTER TABLE token_signing_keys ADD COLUMN sealed_private_jwk BLOB;
`,
};
