import { randomBytes } from "node:crypto";
import type { Database } from "./database.js";

/** Small named values the service keeps across restarts (keys it generated for itself, the worker's crash marks). */
export class SettingsRepository {
  private readonly select;
  private readonly insert;
  private readonly upsert;

  constructor(db: Database) {
    this.select = db.prepare<[string], { value: Buffer }>("SELECT value FROM settings WHERE name = ?");
    this.insert = db.prepare<[string, Buffer]>(
      "INSERT INTO settings (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING",
    );
    this.upsert = db.prepare<[string, Buffer]>(
      "INSERT INTO settings (name, value) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET value = excluded.value",
    );
  }

  /** The stored secret of that name, created with `bytes` random bytes on first use. */
  secret(name: string, bytes = 32): Buffer {
    const existing = this.get(name);
    if (existing !== undefined) return existing;
    this.insertIfAbsent(name, randomBytes(bytes));
    const created = this.get(name);
    if (created === undefined) throw new Error(`setting ${name} vanished after insert`);
    return created;
  }

  get(name: string): Buffer | undefined {
    return this.select.get(name)?.value;
  }

  /** Stores `value` under `name` unless the name already has one (which is kept). */
  insertIfAbsent(name: string, value: Buffer): void {
    this.insert.run(name, value);
  }

  /** Stores `value` under `name`, replacing what the name had. */
  put(name: string, value: Buffer): void {
    this.upsert.run(name, value);
  }
}
