import type { Database } from "./database.js";

export interface AppEntitlement {
  id: string;
  appId: string;
  displayName: string;
  description: string;
  slug: string;
  createdAt: number;
  updatedAt: number;
}

interface AppEntitlementRow {
  id: string;
  app_id: string;
  display_name: string;
  description: string;
  slug: string;
  created_at: number;
  updated_at: number;
}

const toAppEntitlement = (row: AppEntitlementRow): AppEntitlement => ({
  id: row.id,
  appId: row.app_id,
  displayName: row.display_name,
  description: row.description,
  slug: row.slug,
  createdAt: row.created_at,
  updatedAt: row.updated_at,
});

export class AppEntitlementsRepository {
  private readonly insertStmt;
  private readonly getStmt;
  private readonly firstPageStmt;
  private readonly nextPageStmt;
  private readonly updateStmt;
  private readonly deleteStmt;

  constructor(db: Database) {
    this.insertStmt = db.prepare<[string, string, string, string, string, number, number]>(
      `INSERT INTO app_entitlements (id, app_id, display_name, description, slug, created_at, updated_at)
       VALUES (?, ?, ?, ?, ?, ?, ?)`,
    );
    this.getStmt = db.prepare<[string, string], AppEntitlementRow>(
      "SELECT * FROM app_entitlements WHERE app_id = ? AND id = ?",
    );
    this.firstPageStmt = db.prepare<[string, number], AppEntitlementRow>(
      "SELECT * FROM app_entitlements WHERE app_id = ? ORDER BY id LIMIT ?",
    );
    this.nextPageStmt = db.prepare<[string, string, number], AppEntitlementRow>(
      "SELECT * FROM app_entitlements WHERE app_id = ? AND id > ? ORDER BY id LIMIT ?",
    );
    this.updateStmt = db.prepare<[string, string, string, number, string, string]>(
      "UPDATE app_entitlements SET display_name = ?, description = ?, slug = ?, updated_at = ? WHERE app_id = ? AND id = ?",
    );
    this.deleteStmt = db.prepare<[string, string]>("DELETE FROM app_entitlements WHERE app_id = ? AND id = ?");
  }

  insert(e: AppEntitlement): void {
    this.insertStmt.run(e.id, e.appId, e.displayName, e.description, e.slug, e.createdAt, e.updatedAt);
  }

  /** The entitlement, only when it belongs to that app. */
  get(appId: string, id: string): AppEntitlement | undefined {
    const row = this.getStmt.get(appId, id);
    return row === undefined ? undefined : toAppEntitlement(row);
  }

  listAfter(appId: string, after: string | undefined, limit: number): AppEntitlement[] {
    const rows =
      after === undefined ? this.firstPageStmt.all(appId, limit) : this.nextPageStmt.all(appId, after, limit);
    return rows.map(toAppEntitlement);
  }

  update(e: AppEntitlement): void {
    this.updateStmt.run(e.displayName, e.description, e.slug, e.updatedAt, e.appId, e.id);
  }

  delete(appId: string, id: string): boolean {
    return this.deleteStmt.run(appId, id).changes > 0;
  }
}
