import type { Database } from "./database.js";

/** A private key the service signs its access tokens with, as a JWK in JSON text. */
export interface SigningKey {
  kid: string;
  privateJwk: string;
  createdAt: number;
}

interface SigningKeyRow {
  kid: string;
  private_jwk: string;
  created_at: number;
}

/** The service's own token signing keys; kept in the store so a restart keeps tokens valid. */
export class SigningKeysRepository {
  private readonly allStmt;
  private readonly insertStmt;

  constructor(db: Database) {
    this.allStmt = db.prepare<[], SigningKeyRow>("SELECT * FROM token_signing_keys ORDER BY created_at, kid");
    this.insertStmt = db.prepare<[string, string, number]>(
      "INSERT INTO token_signing_keys (kid, private_jwk, created_at) VALUES (?, ?, ?)",
    );
  }

  /** Every key, oldest first. */
  all(): SigningKey[] {
    return this.allStmt.all().map((r) => ({ kid: r.kid, privateJwk: r.private_jwk, createdAt: r.created_at }));
  }

  insert(key: SigningKey): void {
    this.insertStmt.run(key.kid, key.privateJwk, key.createdAt);
  }
}
