import type { Migration } from "./index.js";

export const initialSchema: Migration = {
  version: 1,
  name: "apps, entitlements, users, owners, settings",
  sql: `
CREATE TABLE settings (
  name TEXT PRIMARY KEY,
  value BLOB NOT NULL
) STRICT;

CREATE TABLE apps (
  id TEXT PRIMARY KEY,
  display_name TEXT NOT NULL,
  description TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL
) STRICT;

CREATE TABLE app_entitlements (
  id TEXT PRIMARY KEY,
  app_id TEXT NOT NULL REFERENCES apps(id) ON DELETE CASCADE,
  display_name TEXT NOT NULL,
  description TEXT NOT NULL,
  slug TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL
) STRICT;
CREATE INDEX app_entitlements_by_app ON app_entitlements (app_id, id);

CREATE TABLE users (
  id TEXT PRIMARY KEY,
  display_name TEXT NOT NULL,
  email TEXT NOT NULL,
  username TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL
) STRICT;
CREATE INDEX users_by_email ON users (email);

CREATE TABLE app_entitlement_owners (
  entitlement_id TEXT NOT NULL REFERENCES app_entitlements(id) ON DELETE CASCADE,
  user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
  created_at INTEGER NOT NULL,
  PRIMARY KEY (entitlement_id, user_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX app_entitlement_owners_by_user ON app_entitlement_owners (user_id);
`,
};
