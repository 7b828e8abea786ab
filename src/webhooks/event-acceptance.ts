import type { JsonValue } from "@bufbuild/protobuf";
import type { Execution } from "../store/executions-repository.js";
import { newId } from "../store/ids.js";
import type { Store } from "../store/store.js";
import type { GroupCommit } from "./group-commit.js";
import { Rejection } from "./rejection.js";

/**
 * The automations module's durable queue: creates a PENDING execution inside the caller's
 * transaction and returns it as stored, handed to the worker once committed.
 */
export type EnqueueExecution = (request: { automationId: string; trigger: JsonValue; eventId: string; executionId: string }) => Execution;

export interface AcceptedEvent {
  executionId: string;
}

export interface EventToAccept {
  listenerId: string;
  automationId: string;
  eventId: string;
  trigger: JsonValue;
  /** The size of the body `trigger` was parsed from. */
  bodyBytes: number;
  receivedAt: number;
}

/**
 * Stage 9: record (listener, event id) and create the execution in one transaction, so an event
 * is either recorded with its execution or not at all, and of two requests with the same event id
 * exactly one is recorded (the record's unique key is the check). Acceptances handed in together
 * share a transaction (GroupCommit: those of one event-loop turn; a small group also waits for the
 * turns until 1 ms after the last commit), each checked on its own, so a later duplicate in the
 * same group sees the earlier one; the answer waits for the commit.
 */
export class EventAcceptance {
  constructor(
    private readonly store: Store,
    private readonly commits: GroupCommit,
    private readonly enqueue: EnqueueExecution,
    /** Hands the worker the new execution, after the commit, with the size of its trigger as received. */
    private readonly handOff: (execution: Execution, triggerBytes: number) => void,
  ) {}

  /**
   * `stillAcceptable` runs first in the transaction: a Rejection from it is the answer, and nothing
   * is recorded (what the request was checked against changed while it was in flight).
   * `inTransaction` runs inside the same transaction once the execution exists (the delivery log).
   */
  async accept(
    event: EventToAccept,
    inTransaction: (executionId: string) => void = () => {},
    stillAcceptable: () => Rejection | undefined = () => undefined,
  ): Promise<AcceptedEvent | Rejection> {
    const events = this.store.webhooks.events;
    const accepted = await this.commits.run((): Execution | Rejection | undefined => {
      const refused = stillAcceptable();
      if (refused !== undefined) return refused;
      // The record first: its unique key is the check, one statement instead of a lookup and an insert.
      const executionId = newId();
      if (!events.insertIfNew({ listenerId: event.listenerId, eventId: event.eventId, receivedAt: event.receivedAt, executionId })) {
        return undefined;
      }
      const execution = this.enqueue({ automationId: event.automationId, trigger: event.trigger, eventId: event.eventId, executionId });
      inTransaction(executionId);
      return execution;
    });
    if (accepted instanceof Rejection) return accepted;
    if (accepted === undefined) {
      return new Rejection(409, "duplicate_event", "this Webhook-Event-Id was already accepted by this listener");
    }
    this.handOff(accepted, event.bodyBytes);
    return { executionId: accepted.id };
  }
}
