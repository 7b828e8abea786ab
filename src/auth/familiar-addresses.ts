import type { Clock } from "../clock.js";
import type { Store } from "../store/store.js";

/** How long an address stays familiar after a client's last token from it (housekeeping then deletes it). */
export const familiarForMs = 30 * 24 * 60 * 60 * 1000;
/** A token from a familiar address is noted again (written) at most this often. */
const noteAgainAfterMs = 24 * 60 * 60 * 1000;
/**
 * The most recent addresses kept per client: one client's tokens cannot push out another's, and
 * a fleet of up to 64 hosts sharing a client id is written to once a day, not at every token.
 */
const addressesPerClient = 64;

/**
 * The source addresses each client got a token from lately (in the store, so across restarts).
 * The token endpoint's failure limit per client id would otherwise let anyone who knows an id
 * keep that client from ever getting a token, with ten bad requests a minute (client ids are
 * not secrets: a bootstrap client's id is in its user's username, which any READ_ONLY caller can
 * list). An address where the client got a token within 30 days is exempt from the client's
 * limit, as "smart lockout" schemes do; the limit of that address itself still holds, so
 * guessing from it is no faster. A client keeps its 64 most recent addresses; they are deleted
 * with it, and by housekeeping 30 days after their last token.
 */
export class FamiliarAddresses {
  constructor(
    private readonly store: Store,
    private readonly clock: Clock,
  ) {}

  /** The client got a token from `address`. */
  remember(clientId: string, address: string): void {
    const now = this.clock.now();
    const last = this.store.clients.lastTokenFrom(clientId, address);
    if (last !== undefined && now - last >= 0 && now - last < noteAgainAfterMs) return;
    this.store.transaction(() => this.store.clients.noteTokenFrom(clientId, address, now, addressesPerClient));
  }

  /** Whether the client got a token from `address` within the last 30 days. */
  has(clientId: string, address: string): boolean {
    const last = this.store.clients.lastTokenFrom(clientId, address);
    return last !== undefined && this.clock.now() - last < familiarForMs;
  }
}
