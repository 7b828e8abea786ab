import type { Database } from "./database.js";
import { WebhookDeliveriesRepository } from "./webhook-deliveries-repository.js";
import { WebhookEventsRepository } from "./webhook-events-repository.js";
import { WebhookSecretsRepository } from "./webhook-secrets-repository.js";

/** The inbound-webhook tables: listener secrets, event records, delivery log. */
export class WebhookRepositories {
  readonly secrets: WebhookSecretsRepository;
  readonly events: WebhookEventsRepository;
  readonly deliveries: WebhookDeliveriesRepository;

  constructor(db: Database, whenRolledBack: (undo: () => void) => void) {
    this.secrets = new WebhookSecretsRepository(db);
    this.events = new WebhookEventsRepository(db, whenRolledBack);
    this.deliveries = new WebhookDeliveriesRepository(db);
  }
}
