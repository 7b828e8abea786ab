/**
 * Resolves after a turn of the event loop, once the I/O waiting meanwhile has been served: long
 * work on the one JavaScript thread (housekeeping deletes, a search reading many rows) awaits it
 * between pieces so requests are answered in between.
 */
export function yieldToRequests(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}
