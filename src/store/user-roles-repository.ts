import type { Role } from "../../gen/svc/api/iam/v1/role_pb.js";
import type { ClientPrincipal } from "./clients-repository.js";
import type { Database } from "./database.js";
import type { ReadCache } from "./read-cache.js";

/**
 * A SQL expression giving the comma-separated roles of the user whose id is `userIdSql` (NULL
 * when none), so user queries read roles in the same statement.
 */
export const rolesColumn = (userIdSql: string): string =>
  `(SELECT group_concat(role) FROM user_roles r WHERE r.user_id = ${userIdSql}) AS roles`;

/**
 * `rolesColumn`'s value -> roles, lowest first. Only Role values are ever written (the API's
 * `normalizeRoles`, auth/role-grants.ts, refuses any other number; bootstrap writes SUPER_ADMIN).
 */
export function parseRoles(column: string | null): Role[] {
  if (column === null || column === "") return [];
  return column
    .split(",")
    .map((r) => Number(r) as Role)
    .sort((a, b) => a - b);
}

/** The roles each user holds (`svc.api.iam.v1.Role` numbers). */
export class UserRolesRepository {
  private readonly deleteStmt;
  private readonly insertStmt;

  constructor(
    private readonly db: Database,
    /** Cleared on every change of roles (see ClientsRepository). */
    private readonly principals: ReadCache<string, ClientPrincipal>,
  ) {
    this.deleteStmt = db.prepare<[string]>("DELETE FROM user_roles WHERE user_id = ?");
    this.insertStmt = db.prepare<[string, number]>("INSERT OR IGNORE INTO user_roles (user_id, role) VALUES (?, ?)");
  }

  /** Replaces the user's roles. */
  set(userId: string, roles: readonly Role[]): void {
    this.principals.clear();
    this.db.transaction(() => {
      this.deleteStmt.run(userId);
      for (const role of roles) this.insertStmt.run(userId, role);
    })();
  }
}
