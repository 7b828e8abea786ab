import { randomFillSync } from "node:crypto";
import { v7 as uuidv7 } from "uuid";

/** Random bytes drawn 4 KiB at a time: one call into the CSPRNG per 256 ids instead of one per id. */
const pool = Buffer.alloc(4096);
let poolOffset = pool.length;

function random16(): Uint8Array {
  if (poolOffset === pool.length) {
    randomFillSync(pool);
    poolOffset = 0;
  }
  const bytes = pool.subarray(poolOffset, poolOffset + 16);
  poolOffset += 16;
  return bytes;
}

/** Monotonic state, as the uuid package keeps it: the last millisecond and a counter within it. */
let lastMs = -Infinity;
let sequence = 0;

/**
 * A new resource id. UUIDv7 ids sort by creation time and are monotonic within the process (a
 * counter orders ids of the same millisecond, seeded randomly each millisecond, as the uuid
 * package does), so `ORDER BY id` is creation order and keyset pagination needs no second column.
 */
export function newId(): string {
  const random = random16();
  const now = Date.now();
  if (now > lastMs) {
    // 31 random bits, the seed uuid's own v7 uses
    sequence = (((random[6] ?? 0) & 0x7f) << 24) | ((random[7] ?? 0) << 16) | ((random[8] ?? 0) << 8) | (random[9] ?? 0);
    lastMs = now;
  } else {
    sequence = (sequence + 1) | 0;
    if (sequence === 0) lastMs++;
  }
  return uuidv7({ random, msecs: lastMs, seq: sequence });
}

/**
 * Makes the ids created from now on sort after `id` (a UUIDv7), whatever the clock says: a server
 * started on a clock behind the one its records were made by (stepped back, or ahead before)
 * created ids below them, so new executions were listed before older ones and the delivery log's
 * trim, which keeps the newest by id, dropped every new entry. Returns the time `id` names.
 */
export function continueIdsAfter(id: string): number | undefined {
  const ms = idTime(id);
  if (ms !== undefined && ms >= lastMs) {
    lastMs = ms + 1;
    sequence = 0;
  }
  return ms;
}

/** The creation time a UUIDv7 names (ms), if it is one. */
export function idTime(id: string): number | undefined {
  const hex = id.slice(0, 13).replace("-", "");
  return /^[0-9a-f]{12}$/.test(hex) ? parseInt(hex, 16) : undefined;
}

/**
 * Every id created before `ms` sorts below this string and every id created at `ms` or later
 * above it: a UUIDv7 starts with its creation time in ms, as 12 hex digits (8, a dash, 4).
 */
export function idsCreatedBefore(ms: number): string {
  const hex = Math.max(0, Math.floor(ms)).toString(16).padStart(12, "0");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}`;
}
