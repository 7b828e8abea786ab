import type { Migration } from "./index.js";

/**
 * Search's exact `email` is compared without regard to case (`email = ? COLLATE NOCASE`), which an
 * index in binary collation cannot serve: every such search read the whole users table (a
 * million users: 0.2-0.3 s of the server's one thread). Nothing else reads users by email.
 */
export const usersByEmailNocaseSchema: Migration = {
  version: 7,
  name: "users indexed by email without regard to case, for Search's exact email",
  sql: `
DROP INDEX users_by_email;
CREATE INDEX users_by_email_nocase ON users (email COLLATE NOCASE);
`,
};
