/** Spec 4.3: default 25, effective range 10..100, out-of-range values clamped. */
export const defaultPageSize = 25;
export const minPageSize = 10;
export const maxPageSize = 100;

/**
 * The number of items a page holds for the requested `page_size`. Absent or 0 means the default
 * (proto3 cannot tell the two apart); negative values are "below 10". Non-integers never get here:
 * the protobuf decoder refuses them with invalid_argument.
 */
export function effectivePageSize(requested: number | undefined): number {
  if (requested === undefined || requested === 0) return defaultPageSize;
  if (requested < minPageSize) return minPageSize;
  if (requested > maxPageSize) return maxPageSize;
  return requested;
}
