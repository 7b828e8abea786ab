import { v7 as uuidv7 } from "uuid";

/**
 * A new resource id. UUIDv7 ids sort by creation time (the uuid package keeps them monotonic
 * within the process), so `ORDER BY id` is creation order and keyset pagination needs no
 * second column.
 */
export function newId(): string {
  return uuidv7();
}
