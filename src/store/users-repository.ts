import type { Database } from "./database.js";

export interface User {
  id: string;
  displayName: string;
  email: string;
  username: string;
  createdAt: number;
  updatedAt: number;
}

export interface UserRow {
  id: string;
  display_name: string;
  email: string;
  username: string;
  created_at: number;
  updated_at: number;
}

export const toUser = (row: UserRow): User => ({
  id: row.id,
  displayName: row.display_name,
  email: row.email,
  username: row.username,
  createdAt: row.created_at,
  updatedAt: row.updated_at,
});

export interface UserSearch {
  /** Case-insensitive substring of display name, email or username; "" matches all. */
  query: string;
  /** Exact, case-insensitive email; "" matches all. */
  email: string;
}

export class UsersRepository {
  private readonly insertStmt;
  private readonly getStmt;
  private readonly existsStmt;
  private readonly pageStmt;
  private readonly searchStmt;
  private readonly updateStmt;

  constructor(db: Database) {
    this.insertStmt = db.prepare<[string, string, string, string, number, number]>(
      "INSERT INTO users (id, display_name, email, username, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)",
    );
    this.getStmt = db.prepare<[string], UserRow>("SELECT * FROM users WHERE id = ?");
    this.existsStmt = db.prepare<[string], { one: number }>("SELECT 1 AS one FROM users WHERE id = ?");
    // "" sorts before every UUID, so one statement serves the first page and the next ones.
    this.pageStmt = db.prepare<[string, number], UserRow>("SELECT * FROM users WHERE id > ? ORDER BY id LIMIT ?");
    this.searchStmt = db.prepare<{ after: string; query: string; email: string; limit: number }, UserRow>(
      `SELECT * FROM users
       WHERE id > :after
         AND (:email = '' OR email = :email COLLATE NOCASE)
         AND (:query = '' OR instr(lower(display_name || ' ' || email || ' ' || username), lower(:query)) > 0)
       ORDER BY id LIMIT :limit`,
    );
    this.updateStmt = db.prepare<[string, string, string, number, string]>(
      "UPDATE users SET display_name = ?, email = ?, username = ?, updated_at = ? WHERE id = ?",
    );
  }

  insert(u: User): void {
    this.insertStmt.run(u.id, u.displayName, u.email, u.username, u.createdAt, u.updatedAt);
  }

  get(id: string): User | undefined {
    const row = this.getStmt.get(id);
    return row === undefined ? undefined : toUser(row);
  }

  exists(id: string): boolean {
    return this.existsStmt.get(id) !== undefined;
  }

  listAfter(after: string | undefined, limit: number): User[] {
    return this.pageStmt.all(after ?? "", limit).map(toUser);
  }

  searchAfter(search: UserSearch, after: string | undefined, limit: number): User[] {
    return this.searchStmt.all({ after: after ?? "", query: search.query, email: search.email, limit }).map(toUser);
  }

  update(u: User): void {
    this.updateStmt.run(u.displayName, u.email, u.username, u.updatedAt, u.id);
  }
}
