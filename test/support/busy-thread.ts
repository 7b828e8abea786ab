/** Keeps the JavaScript thread busy for `ms`, as a slow synchronous read or a chunk of deletes would. */
export function busyFor(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until);
}
