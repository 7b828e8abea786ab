import type { Clock } from "../clock.js";
import type { PageTokenCodec } from "../pagination/index.js";
import type { Store } from "../store/store.js";

/** What every API service implementation is built from. */
export interface ServiceContext {
  store: Store;
  clock: Clock;
  pageTokens: PageTokenCodec;
}
