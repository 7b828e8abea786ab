import type { Role } from "../../gen/svc/api/iam/v1/role_pb.js";
import type { Database } from "./database.js";
import type { ReadCache } from "./read-cache.js";
import { parseRoles, rolesColumn } from "./user-roles-repository.js";

/** An API client: credentials for the token endpoint, acting as one user. */
export interface Client {
  id: string;
  userId: string;
  displayName: string;
  /** scrypt hash of the secret (client_secret_post); undefined for private_key_jwt clients. */
  secretHash: string | undefined;
  /** The registered public JWK as JSON text (private_key_jwt); undefined for secret clients. */
  publicJwk: string | undefined;
  createdAt: number;
}

/**
 * Who a client acts as, looked up on every authenticated request: kept in a ReadCache that this
 * repository clears when it deletes a client and UserRolesRepository clears when roles change
 * (users are never deleted), so a deleted client's token fails at once, as without a cache.
 */
export interface ClientPrincipal {
  userId: string;
  roles: Role[];
  /** The client record's `createdAt`: tells it from an earlier, deleted client with the same id. */
  clientCreatedAt: number;
}

interface ClientRow {
  id: string;
  user_id: string;
  display_name: string;
  secret_hash: string | null;
  public_jwk: string | null;
  created_at: number;
}

const toClient = (row: ClientRow): Client => ({
  id: row.id,
  userId: row.user_id,
  displayName: row.display_name,
  secretHash: row.secret_hash ?? undefined,
  publicJwk: row.public_jwk ?? undefined,
  createdAt: row.created_at,
});

export class ClientsRepository {
  private readonly insertStmt;
  private readonly getStmt;
  private readonly pageStmt;
  private readonly deleteStmt;
  private readonly deleteAddressesStmt;
  private readonly addressStmt;
  private readonly noteAddressStmt;
  private readonly trimAddressesStmt;
  private readonly deleteAddressesBeforeStmt;
  private readonly principalStmt;

  constructor(
    db: Database,
    private readonly principals: ReadCache<string, ClientPrincipal>,
  ) {
    this.insertStmt = db.prepare<[string, string, string, string | null, string | null, number]>(
      "INSERT INTO clients (id, user_id, display_name, secret_hash, public_jwk, created_at) VALUES (?, ?, ?, ?, ?, ?)",
    );
    this.getStmt = db.prepare<[string], ClientRow>("SELECT * FROM clients WHERE id = ?");
    this.pageStmt = db.prepare<[string, number], ClientRow>("SELECT * FROM clients WHERE id > ? ORDER BY id LIMIT ?");
    this.deleteStmt = db.prepare<[string]>("DELETE FROM clients WHERE id = ?");
    this.deleteAddressesStmt = db.prepare<[string]>("DELETE FROM client_token_addresses WHERE client_id = ?");
    this.addressStmt = db
      .prepare<[string, string], number>("SELECT last_token_at FROM client_token_addresses WHERE client_id = ? AND address = ?")
      .pluck();
    this.noteAddressStmt = db.prepare<[string, string, number]>(
      `INSERT INTO client_token_addresses (client_id, address, last_token_at) VALUES (?, ?, ?)
       ON CONFLICT (client_id, address) DO UPDATE SET last_token_at = excluded.last_token_at`,
    );
    this.trimAddressesStmt = db.prepare<[string, string, string, number]>(
      `DELETE FROM client_token_addresses WHERE client_id = ? AND address NOT IN
         (SELECT address FROM client_token_addresses WHERE client_id = ?
          ORDER BY address = ? DESC, last_token_at DESC, address LIMIT ?)`,
    );
    this.deleteAddressesBeforeStmt = db.prepare<[number]>("DELETE FROM client_token_addresses WHERE last_token_at <= ?");
    this.principalStmt = db.prepare<[string], { user_id: string; roles: string | null; created_at: number }>(
      `SELECT c.user_id, ${rolesColumn("c.user_id")}, c.created_at FROM clients c WHERE c.id = ?`,
    );
  }

  insert(c: Client): void {
    this.insertStmt.run(c.id, c.userId, c.displayName, c.secretHash ?? null, c.publicJwk ?? null, c.createdAt);
  }

  get(id: string): Client | undefined {
    const row = this.getStmt.get(id);
    return row === undefined ? undefined : toClient(row);
  }

  listAfter(after: string | undefined, limit: number): Client[] {
    return this.pageStmt.all(after ?? "", limit).map(toClient);
  }

  /** True when a client was deleted (with the addresses it got tokens from). */
  delete(id: string): boolean {
    this.principals.clear();
    this.deleteAddressesStmt.run(id);
    return this.deleteStmt.run(id).changes > 0;
  }

  /** When the client last got a token from `address` (as noted, at most daily), or undefined. */
  lastTokenFrom(clientId: string, address: string): number | undefined {
    return this.addressStmt.get(clientId, address);
  }

  /**
   * The client got a token from `address` at `at`; only its `keep` most recent addresses are kept
   * (never the one just noted, even among addresses noted in the same millisecond).
   */
  noteTokenFrom(clientId: string, address: string, at: number, keep: number): void {
    this.noteAddressStmt.run(clientId, address, at);
    this.trimAddressesStmt.run(clientId, clientId, address, keep);
  }

  /** Forgets every address a client last got a token from at or before `before` (housekeeping). */
  deleteTokenAddressesBefore(before: number): number {
    return this.deleteAddressesBeforeStmt.run(before).changes;
  }

  principalOf(clientId: string): ClientPrincipal | undefined {
    return this.principals.get(clientId, () => {
      const row = this.principalStmt.get(clientId);
      if (row === undefined) return undefined;
      return { userId: row.user_id, roles: parseRoles(row.roles), clientCreatedAt: row.created_at };
    });
  }
}
