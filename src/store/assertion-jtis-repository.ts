import type { Database } from "./database.js";

/** `jti`s of client assertions already used (RFC 7523 replay protection), kept until they expire. */
export class AssertionJtisRepository {
  private readonly insertStmt;
  private readonly pruneStmt;

  constructor(db: Database) {
    this.insertStmt = db.prepare<[string, string, number]>(
      "INSERT OR IGNORE INTO client_assertion_jtis (client_id, jti, expires_at) VALUES (?, ?, ?)",
    );
    this.pruneStmt = db.prepare<[number]>("DELETE FROM client_assertion_jtis WHERE expires_at < ?");
  }

  /**
   * Records the jti; false when that client already used it. Rows past their expiry are removed
   * first: an expired assertion is refused for its `exp` anyway.
   */
  recordOnce(clientId: string, jti: string, expiresAt: number, now: number): boolean {
    this.pruneStmt.run(now);
    return this.insertStmt.run(clientId, jti, expiresAt).changes > 0;
  }
}
