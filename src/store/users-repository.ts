import type { Role } from "../../gen/svc/api/iam/v1/role_pb.js";
import type { ClientPrincipal } from "./clients-repository.js";
import type { Database } from "./database.js";
import type { ReadCache } from "./read-cache.js";
import { parseRoles, rolesColumn, UserRolesRepository } from "./user-roles-repository.js";

export interface User {
  id: string;
  displayName: string;
  email: string;
  username: string;
  createdAt: number;
  updatedAt: number;
  /** The user's roles, lowest first. */
  roles: Role[];
}

/** A user to insert; without `roles`, a user who holds none. */
export type NewUser = Omit<User, "roles"> & { roles?: readonly Role[] };

export interface UserRow {
  id: string;
  display_name: string;
  email: string;
  username: string;
  created_at: number;
  updated_at: number;
  /** `rolesColumn(...)`: the comma-separated role numbers, or NULL. */
  roles: string | null;
}

export const toUser = (row: UserRow): User => ({
  id: row.id,
  displayName: row.display_name,
  email: row.email,
  username: row.username,
  createdAt: row.created_at,
  updatedAt: row.updated_at,
  roles: parseRoles(row.roles),
});

/** The columns of a UserRow, for a query where the users table is aliased `alias`. */
export const userColumns = (alias: string): string => `${alias}.*, ${rolesColumn(`${alias}.id`)}`;

export interface UserSearch {
  /** Case-insensitive substring of display name, email or username (of one of them); "" matches all. */
  query: string;
  /** Exact email, ASCII letters in any case; "" matches all. */
  email: string;
}

/**
 * How a search query and the fields it is looked for in are compared: NFC, lower case, and a
 * final sigma as any other (toLowerCase makes Σ ς at a word's end, σ elsewhere: "ΔΥΣ" missed
 * "ΟΔΥΣΣΕΥΣ").
 */
export const searchFolded = (text: string): string => text.normalize("NFC").toLowerCase().replaceAll("ς", "σ");

/**
 * The search's `query` condition on a user row (named parameters `query`, folded, and `unicode`):
 * a substring of one field, not of the fields run together ("Lovelace ada" matched Ada Lovelace,
 * ada@example.com). SQLite's `lower` folds ASCII letters only, and fast; a query with any other
 * character is also compared through `searchFolded` (`contains_folded`, twice the cost a row), so
 * "ørjan" finds "Ørjan" and an NFD "école" an NFC one. `contains_folded` takes the field only: the
 * query it looks for is held in JS while the statement runs (UsersRepository.withFoldedQuery), as
 * an argument it was made into a JS string again for every field of every row (a 1,000-character
 * query: 72 ms a range of 20,000 users, against 5 ms with the field alone).
 */
const queryMatches = `(:query = ''
  OR instr(lower(display_name), :query) > 0 OR instr(lower(email), :query) > 0 OR instr(lower(username), :query) > 0
  OR (:unicode = 1 AND (contains_folded(display_name) OR contains_folded(email) OR contains_folded(username))))`;

const searchParameters = (search: UserSearch) => {
  const query = searchFolded(search.query);
  return { query, email: search.email, unicode: /^[\x00-\x7f]*$/.test(query) ? 0 : 1 };
};

export class UsersRepository {
  private readonly insertStmt;
  private readonly getStmt;
  private readonly existsStmt;
  private readonly pageStmt;
  private readonly searchStmt;
  private readonly idAfterStmt;
  private readonly searchByEmailStmt;
  private readonly updateStmt;
  private readonly roles: UserRolesRepository;
  /** The folded query `contains_folded` looks for, while a search statement runs (withFoldedQuery). */
  private foldedQuery = "";

  /** `principals`: the clients' principals, cleared when roles change (see ClientsRepository). */
  constructor(db: Database, principals: ReadCache<string, ClientPrincipal>) {
    this.roles = new UserRolesRepository(db, principals);
    // Not deterministic: its answer depends on the query held, not on its argument alone.
    db.function("contains_folded", (text: unknown) => (searchFolded(text as string).includes(this.foldedQuery) ? 1 : 0));
    this.insertStmt = db.prepare<[string, string, string, string, number, number]>(
      "INSERT INTO users (id, display_name, email, username, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)",
    );
    this.getStmt = db.prepare<[string], UserRow>(`SELECT ${userColumns("users")} FROM users WHERE id = ?`);
    this.existsStmt = db.prepare<[string], { one: number }>("SELECT 1 AS one FROM users WHERE id = ?");
    // "" sorts before every UUID, so one statement serves the first page and the next ones.
    this.pageStmt = db.prepare<[string, number], UserRow>(`SELECT ${userColumns("users")} FROM users WHERE id > ? ORDER BY id LIMIT ?`);
    this.searchStmt = db.prepare<{ after: string; through: string; query: string; email: string; unicode: number; limit: number }, UserRow>(
      `SELECT ${userColumns("users")} FROM users
       WHERE id > :after AND (:through = '' OR id <= :through)
         AND (:email = '' OR email = :email COLLATE NOCASE)
         AND ${queryMatches}
       ORDER BY id LIMIT :limit`,
    );
    this.idAfterStmt = db.prepare<[string, number], string>("SELECT id FROM users WHERE id > ? ORDER BY id LIMIT 1 OFFSET ?").pluck();
    // The users with one email address (a handful), found through the case-insensitive index.
    this.searchByEmailStmt = db.prepare<{ after: string; query: string; email: string; unicode: number; limit: number }, UserRow>(
      `SELECT ${userColumns("users")} FROM users INDEXED BY users_by_email_nocase
       WHERE email = :email COLLATE NOCASE AND id > :after
         AND ${queryMatches}
       ORDER BY id LIMIT :limit`,
    );
    this.updateStmt = db.prepare<[string, string, string, number, string]>(
      "UPDATE users SET display_name = ?, email = ?, username = ?, updated_at = ? WHERE id = ?",
    );
  }

  /** Call inside a transaction: the user row and its roles are written together. */
  insert(u: NewUser): void {
    this.insertStmt.run(u.id, u.displayName, u.email, u.username, u.createdAt, u.updatedAt);
    if (u.roles !== undefined && u.roles.length > 0) this.roles.set(u.id, u.roles);
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

  /**
   * Up to `limit` matching users with ids after `after` and up to `through` (undefined: to the
   * end), in id order. A search reads every row of its range (the filters are substrings), so
   * callers search a range at a time: see `idAfter`.
   */
  searchBetween(search: UserSearch, after: string | undefined, through: string | undefined, limit: number): User[] {
    const parameters = searchParameters(search);
    return this.withFoldedQuery(parameters.query, () => this.searchStmt.all({ after: after ?? "", through: through ?? "", ...parameters, limit })).map(toUser);
  }

  /** searchBetween over every user, for a search with an `email`: through the email index, no range needed. */
  searchByEmail(search: UserSearch, after: string | undefined, limit: number): User[] {
    const parameters = searchParameters(search);
    return this.withFoldedQuery(parameters.query, () => this.searchByEmailStmt.all({ after: after ?? "", ...parameters, limit })).map(toUser);
  }

  /**
   * Runs `read` (one synchronous statement run) with `query` as what `contains_folded` looks for.
   * Nothing else runs on the thread meanwhile, so no other search can change it.
   */
  private withFoldedQuery<T>(query: string, read: () => T): T {
    this.foldedQuery = query;
    try {
      return read();
    } finally {
      this.foldedQuery = "";
    }
  }

  /** The id `count` users after `after` (the end of a range of `count` rows), or undefined when fewer are left. */
  idAfter(after: string | undefined, count: number): string | undefined {
    return this.idAfterStmt.get(after ?? "", count - 1);
  }

  /** Writes every field, roles included. */
  update(u: User): void {
    this.updateStmt.run(u.displayName, u.email, u.username, u.updatedAt, u.id);
    this.roles.set(u.id, u.roles);
  }
}
