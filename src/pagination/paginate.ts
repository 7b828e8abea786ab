import { effectivePageSize } from "./page-size.js";
import type { PageTokenCodec } from "./page-token.js";

export interface PageRequest {
  pageSize?: number;
  pageToken?: string;
}

export interface Page<T> {
  items: T[];
  /** "" on the last page, as spec 4.3 rule 6 requires. */
  nextPageToken: string;
}

/**
 * One page of a keyset listing over `id`. `fetch(after, limit)` returns up to `limit` items whose
 * id is greater than `after` (all items when `after` is undefined), in key order. One extra item is
 * fetched so that a page ending exactly at the last item already says `nextPageToken: ""`.
 */
export function paginate<T extends { id: string }>(
  codec: PageTokenCodec,
  listing: string,
  request: PageRequest,
  fetch: (after: string | undefined, limit: number) => T[],
): Page<T> {
  const size = effectivePageSize(request.pageSize);
  const after = codec.decode(listing, request.pageToken ?? "");
  return pageOf(codec, listing, size, fetch(after, size + 1));
}

/** paginate, for a `fetch` that gives the thread back while it works (a search reading many rows). */
export async function paginateAsync<T extends { id: string }>(
  codec: PageTokenCodec,
  listing: string,
  request: PageRequest,
  fetch: (after: string | undefined, limit: number) => Promise<T[]>,
): Promise<Page<T>> {
  const size = effectivePageSize(request.pageSize);
  const after = codec.decode(listing, request.pageToken ?? "");
  return pageOf(codec, listing, size, await fetch(after, size + 1));
}

function pageOf<T extends { id: string }>(codec: PageTokenCodec, listing: string, size: number, rows: T[]): Page<T> {
  if (rows.length <= size) return { items: rows, nextPageToken: "" };
  const items = rows.slice(0, size);
  const last = items[items.length - 1];
  return { items, nextPageToken: last === undefined ? "" : codec.encode(listing, last.id) };
}

/** The fingerprint of a listing: its name and every filter that shapes it. */
export function listingFingerprint(name: string, ...filters: readonly (string | number | boolean)[]): string {
  return JSON.stringify([name, ...filters]);
}
