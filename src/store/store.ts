import { AppEntitlementOwnersRepository } from "./app-entitlement-owners-repository.js";
import { AppEntitlementsRepository } from "./app-entitlements-repository.js";
import { AppsRepository } from "./apps-repository.js";
import { AssertionJtisRepository } from "./assertion-jtis-repository.js";
import { ClientsRepository } from "./clients-repository.js";
import { openDatabase, type Database } from "./database.js";
import { SettingsRepository } from "./settings-repository.js";
import { SigningKeysRepository } from "./signing-keys-repository.js";
import { UserRolesRepository } from "./user-roles-repository.js";
import { UsersRepository } from "./users-repository.js";

/**
 * The store: one SQLite database and a repository per aggregate. better-sqlite3 is synchronous,
 * so a `transaction` callback runs without interleaving with any other request.
 */
export class Store {
  readonly apps: AppsRepository;
  readonly appEntitlements: AppEntitlementsRepository;
  readonly users: UsersRepository;
  readonly owners: AppEntitlementOwnersRepository;
  readonly settings: SettingsRepository;
  readonly userRoles: UserRolesRepository;
  readonly clients: ClientsRepository;
  readonly signingKeys: SigningKeysRepository;
  readonly assertionJtis: AssertionJtisRepository;
  private readonly pingStmt;

  constructor(readonly db: Database) {
    this.pingStmt = db.prepare("SELECT 1").pluck();
    this.apps = new AppsRepository(db);
    this.appEntitlements = new AppEntitlementsRepository(db);
    this.users = new UsersRepository(db);
    this.owners = new AppEntitlementOwnersRepository(db);
    this.settings = new SettingsRepository(db);
    this.userRoles = new UserRolesRepository(db);
    this.clients = new ClientsRepository(db);
    this.signingKeys = new SigningKeysRepository(db);
    this.assertionJtis = new AssertionJtisRepository(db);
  }

  static open(path: string): Store {
    return new Store(openDatabase(path));
  }

  /** Runs `fn` in one transaction (IMMEDIATE: takes the write lock at once). */
  transaction<T>(fn: () => T): T {
    return this.db.transaction(fn).immediate();
  }

  /** A trivial query, for readiness checks. */
  ping(): boolean {
    return this.pingStmt.get() === 1;
  }

  close(): void {
    if (this.db.open) this.db.close();
  }
}
