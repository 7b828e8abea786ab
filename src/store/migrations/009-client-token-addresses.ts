import type { Migration } from "./index.js";

/**
 * The source addresses each API client got a token from lately (FamiliarAddresses): the token
 * endpoint's failure limit per client id does not apply from them, across restarts. At most 64
 * rows a client (its most recent addresses), deleted with the client, and by housekeeping 30 days
 * after their last token.
 */
export const clientTokenAddressesSchema: Migration = {
  version: 9,
  name: "the addresses each client got a token from lately",
  sql: `
CREATE TABLE client_token_addresses (
  client_id     TEXT NOT NULL,
  address       TEXT NOT NULL,
  last_token_at INTEGER NOT NULL,
  PRIMARY KEY (client_id, address)
) STRICT, WITHOUT ROWID;
`,
};
