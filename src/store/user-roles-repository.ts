import type { Role } from "../../gen/svc/api/iam/v1/role_pb.js";
import type { Database } from "./database.js";

/** The roles each user holds (`svc.api.iam.v1.Role` numbers). */
export class UserRolesRepository {
  private readonly selectStmt;
  private readonly deleteStmt;
  private readonly insertStmt;

  constructor(private readonly db: Database) {
    this.selectStmt = db.prepare<[string], { role: number }>("SELECT role FROM user_roles WHERE user_id = ? ORDER BY role");
    this.deleteStmt = db.prepare<[string]>("DELETE FROM user_roles WHERE user_id = ?");
    this.insertStmt = db.prepare<[string, number]>("INSERT OR IGNORE INTO user_roles (user_id, role) VALUES (?, ?)");
  }

  rolesOf(userId: string): Role[] {
    return this.selectStmt.all(userId).map((row) => row.role as Role);
  }

  /** Replaces the user's roles. */
  set(userId: string, roles: readonly Role[]): void {
    this.db.transaction(() => {
      this.deleteStmt.run(userId);
      for (const role of roles) this.insertStmt.run(userId, role);
    })();
  }
}
