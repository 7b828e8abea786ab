import type { Migration } from "./index.js";

/**
 * Authentication and roles: users' roles, API clients (each acts as one user), the service's
 * access-token signing keys, and the `jti`s of client assertions already used.
 */
export const iamSchema: Migration = {
  version: 2,
  name: "user roles, API clients, token signing keys, client assertion jtis",
  sql: `
CREATE TABLE user_roles (
  user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
  role INTEGER NOT NULL,
  PRIMARY KEY (user_id, role)
) STRICT, WITHOUT ROWID;

CREATE TABLE clients (
  id TEXT PRIMARY KEY,
  user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
  display_name TEXT NOT NULL,
  -- scrypt hash of the secret (client_secret_post), or NULL for private_key_jwt clients.
  secret_hash TEXT,
  -- The registered public JWK as JSON (private_key_jwt), or NULL.
  public_jwk TEXT,
  created_at INTEGER NOT NULL,
  CHECK ((secret_hash IS NULL) <> (public_jwk IS NULL))
) STRICT;
CREATE INDEX clients_by_user ON clients (user_id);

CREATE TABLE token_signing_keys (
  kid TEXT PRIMARY KEY,
  private_jwk TEXT NOT NULL,
  created_at INTEGER NOT NULL
) STRICT;

CREATE TABLE client_assertion_jtis (
  client_id TEXT NOT NULL,
  jti TEXT NOT NULL,
  expires_at INTEGER NOT NULL,
  PRIMARY KEY (client_id, jti)
) STRICT, WITHOUT ROWID;
CREATE INDEX client_assertion_jtis_by_expiry ON client_assertion_jtis (expires_at);
`,
};
