import type { Clock } from "../clock.js";

/** How long an address stays familiar after a client's last token from it. */
const familiarForMs = 30 * 24 * 60 * 60 * 1000;

/**
 * The source addresses each client got a token from lately (in memory, per process). The token
 * endpoint's failure limit per client id would otherwise let anyone who knows an id keep that
 * client from ever getting a token, with ten bad requests a minute (client ids are not secrets:
 * a bootstrap client's id is in its user's username, which any READ_ONLY caller can list). An
 * address where the client got a token within 30 days is exempt from the client's limit, as
 * "smart lockout" schemes do; the limit of that address itself still holds, so guessing from it
 * is no faster. After a restart no address is familiar until the client's next token.
 */
export class FamiliarAddresses {
  /** `clientId \n address` -> the time of the last token; oldest first (Map insertion order). */
  private readonly lastTokenAt = new Map<string, number>();

  constructor(
    private readonly clock: Clock,
    private readonly maxEntries = 100_000,
  ) {}

  /** The client got a token from `address`. */
  remember(clientId: string, address: string): void {
    const key = `${clientId}\n${address}`;
    this.lastTokenAt.delete(key);
    this.lastTokenAt.set(key, this.clock.now());
    if (this.lastTokenAt.size > this.maxEntries) {
      const oldest = this.lastTokenAt.keys().next().value;
      if (oldest !== undefined) this.lastTokenAt.delete(oldest);
    }
  }

  /** Whether the client got a token from `address` within the last 30 days. */
  has(clientId: string, address: string): boolean {
    const at = this.lastTokenAt.get(`${clientId}\n${address}`);
    return at !== undefined && this.clock.now() - at < familiarForMs;
  }
}
