import type { Database } from "./database.js";

export interface App {
  id: string;
  displayName: string;
  description: string;
  createdAt: number;
  updatedAt: number;
}

interface AppRow {
  id: string;
  display_name: string;
  description: string;
  created_at: number;
  updated_at: number;
}

const toApp = (row: AppRow): App => ({
  id: row.id,
  displayName: row.display_name,
  description: row.description,
  createdAt: row.created_at,
  updatedAt: row.updated_at,
});

export class AppsRepository {
  private readonly insertStmt;
  private readonly getStmt;
  private readonly firstPageStmt;
  private readonly nextPageStmt;
  private readonly updateStmt;
  private readonly deleteStmt;

  constructor(db: Database) {
    this.insertStmt = db.prepare<[string, string, string, number, number]>(
      "INSERT INTO apps (id, display_name, description, created_at, updated_at) VALUES (?, ?, ?, ?, ?)",
    );
    this.getStmt = db.prepare<[string], AppRow>("SELECT * FROM apps WHERE id = ?");
    this.firstPageStmt = db.prepare<[number], AppRow>("SELECT * FROM apps ORDER BY id LIMIT ?");
    this.nextPageStmt = db.prepare<[string, number], AppRow>("SELECT * FROM apps WHERE id > ? ORDER BY id LIMIT ?");
    this.updateStmt = db.prepare<[string, string, number, string]>(
      "UPDATE apps SET display_name = ?, description = ?, updated_at = ? WHERE id = ?",
    );
    this.deleteStmt = db.prepare<[string]>("DELETE FROM apps WHERE id = ?");
  }

  insert(app: App): void {
    this.insertStmt.run(app.id, app.displayName, app.description, app.createdAt, app.updatedAt);
  }

  get(id: string): App | undefined {
    const row = this.getStmt.get(id);
    return row === undefined ? undefined : toApp(row);
  }

  listAfter(after: string | undefined, limit: number): App[] {
    const rows = after === undefined ? this.firstPageStmt.all(limit) : this.nextPageStmt.all(after, limit);
    return rows.map(toApp);
  }

  update(app: App): void {
    this.updateStmt.run(app.displayName, app.description, app.updatedAt, app.id);
  }

  /** True when a row was deleted. Entitlements and their owners go with it (ON DELETE CASCADE). */
  delete(id: string): boolean {
    return this.deleteStmt.run(id).changes > 0;
  }
}
