import type { Database } from "./database.js";

/** What a signing key is sealed with besides the data key: its kid. */
export function signingKeyAssociatedData(kid: string): string {
  return `token-signing-key:${kid}`;
}

/** A private key the service signs its access tokens with, as a JWK in JSON text, sealed under the data key. */
export interface SigningKey {
  kid: string;
  /** The private JWK's JSON text sealed under the data key; undefined for a key stored before migration 006. */
  sealedPrivateJwk: Buffer | undefined;
  /** The private JWK's JSON text in clear: only a key stored before migration 006 and not yet sealed; "" otherwise. */
  clearPrivateJwk: string;
  createdAt: number;
}

interface SigningKeyRow {
  kid: string;
  private_jwk: string;
  sealed_private_jwk: Buffer | null;
  created_at: number;
}

/** The service's own token signing keys; kept in the store so a restart keeps tokens valid. */
export class SigningKeysRepository {
  private readonly allStmt;
  private readonly insertStmt;
  private readonly sealStmt;
  private readonly deleteStmt;

  constructor(private readonly db: Database) {
    this.allStmt = db.prepare<[], SigningKeyRow>("SELECT * FROM token_signing_keys ORDER BY created_at, rowid");
    this.insertStmt = db.prepare<[string, Buffer, number]>(
      "INSERT INTO token_signing_keys (kid, private_jwk, sealed_private_jwk, created_at) VALUES (?, '', ?, ?)",
    );
    this.sealStmt = db.prepare<[Buffer, string]>(
      "UPDATE token_signing_keys SET sealed_private_jwk = ?, private_jwk = '' WHERE kid = ?",
    );
    this.deleteStmt = db.prepare<[string]>("DELETE FROM token_signing_keys WHERE kid = ?");
  }

  /** Every key, oldest first (in the order stored, for keys made in the same millisecond). */
  all(): SigningKey[] {
    return this.allStmt.all().map((r) => ({
      kid: r.kid,
      sealedPrivateJwk: r.sealed_private_jwk ?? undefined,
      clearPrivateJwk: r.private_jwk,
      createdAt: r.created_at,
    }));
  }

  insert(key: { kid: string; sealedPrivateJwk: Buffer; createdAt: number }): void {
    this.insertStmt.run(key.kid, key.sealedPrivateJwk, key.createdAt);
  }

  /**
   * Replaces a key stored in clear by its sealed form. With secure_delete on for the update, the
   * clear text's old cell is overwritten with zeros instead of lingering in a free page.
   */
  seal(kid: string, sealedPrivateJwk: Buffer): void {
    this.db.pragma("secure_delete = ON");
    try {
      this.sealStmt.run(sealedPrivateJwk, kid);
    } finally {
      this.db.pragma("secure_delete = OFF");
    }
  }

  /** Deletes a retired key, its cells overwritten with zeros (secure_delete) rather than left in a free page. */
  delete(kid: string): void {
    this.db.pragma("secure_delete = ON");
    try {
      this.deleteStmt.run(kid);
    } finally {
      this.db.pragma("secure_delete = OFF");
    }
  }
}
