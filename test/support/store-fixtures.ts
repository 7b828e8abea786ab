import { afterEach } from "vitest";
import type { StepDefinition } from "../../src/automations/step-definition.js";
import { newId } from "../../src/store/ids.js";
import { Store } from "../../src/store/store.js";

/**
 * In-memory stores for repository- and worker-level tests, closed after each test of the file
 * that calls this (at its top level).
 */
export function inMemoryStores(): { withAutomation(steps?: StepDefinition[]): { store: Store; automationId: string } } {
  const stores: Store[] = [];
  afterEach(async () => {
    for (const store of stores.splice(0)) await store.close();
  });
  return {
    /** A store holding one manual, unpublished automation with these steps. */
    withAutomation(steps: StepDefinition[] = []) {
      const store = Store.open(":memory:");
      stores.push(store);
      const automationId = newId();
      store.transaction(() =>
        store.automations.insert({
          id: automationId,
          displayName: "store test",
          description: "",
          trigger: { kind: "manual" },
          steps,
          published: false,
          triggerEnabled: false,
          version: 1,
          createdAt: 0,
          updatedAt: 0,
        }),
      );
      return { store, automationId };
    },
  };
}

/** The event records stored for a listener, counted in the table (not the in-memory index). */
export function eventRecordsOf(store: Store, listenerId: string): number {
  return store.db.prepare("SELECT count(*) FROM webhook_events WHERE listener_id = ?").pluck().get(listenerId) as number;
}
