import type { Database } from "./database.js";
import { toUser, userColumns, type User, type UserRow } from "./users-repository.js";

export class AppEntitlementOwnersRepository {
  private readonly addStmt;
  private readonly removeStmt;
  private readonly clearStmt;
  private readonly pageStmt;
  private readonly isOwnerStmt;

  constructor(db: Database) {
    this.addStmt = db.prepare<[string, string, number]>(
      `INSERT INTO app_entitlement_owners (entitlement_id, user_id, created_at) VALUES (?, ?, ?)
       ON CONFLICT (entitlement_id, user_id) DO NOTHING`,
    );
    this.removeStmt = db.prepare<[string, string]>(
      "DELETE FROM app_entitlement_owners WHERE entitlement_id = ? AND user_id = ?",
    );
    this.clearStmt = db.prepare<[string]>("DELETE FROM app_entitlement_owners WHERE entitlement_id = ?");
    this.pageStmt = db.prepare<[string, string, number], UserRow>(
      `SELECT ${userColumns("u")} FROM app_entitlement_owners o JOIN users u ON u.id = o.user_id
       WHERE o.entitlement_id = ? AND o.user_id > ? ORDER BY o.user_id LIMIT ?`,
    );
    this.isOwnerStmt = db.prepare<[string, string], { one: number }>(
      "SELECT 1 AS one FROM app_entitlement_owners WHERE entitlement_id = ? AND user_id = ?",
    );
  }

  /** Adds the owner; adding an existing owner changes nothing. True when a row was added. */
  add(entitlementId: string, userId: string, now: number): boolean {
    return this.addStmt.run(entitlementId, userId, now).changes > 0;
  }

  /** True when the user was an owner. */
  remove(entitlementId: string, userId: string): boolean {
    return this.removeStmt.run(entitlementId, userId).changes > 0;
  }

  /** Replaces the owners. Call inside a transaction. */
  replace(entitlementId: string, userIds: readonly string[], now: number): void {
    this.clearStmt.run(entitlementId);
    for (const userId of userIds) this.addStmt.run(entitlementId, userId, now);
  }

  isOwner(entitlementId: string, userId: string): boolean {
    return this.isOwnerStmt.get(entitlementId, userId) !== undefined;
  }

  /** Owning users in user-id order, after `after`. */
  listAfter(entitlementId: string, after: string | undefined, limit: number): User[] {
    return this.pageStmt.all(entitlementId, after ?? "", limit).map(toUser);
  }
}
