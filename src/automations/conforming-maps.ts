import { celFunc, CelScalar, mapType, type CelMap } from "@bufbuild/cel";

/**
 * `key in map` as the CEL spec and cel-go have it: true for a key that is there, whatever its
 * value. cel-es (0.6.1) asked its map's `has`, which reads a key whose value is null as absent
 * (`'a' in {'a': null}` was false while `size` counted it). `has(e.f)` is rewritten to the same
 * reading (compiled-expression.ts).
 */
export const conformingMaps = [CelScalar.STRING, CelScalar.DOUBLE, CelScalar.INT, CelScalar.BOOL, CelScalar.UINT].map((keyType) =>
  celFunc("@in", [keyType, mapType(CelScalar.DYN, CelScalar.DYN)], CelScalar.BOOL, (key, map: CelMap) => map.get(key) !== undefined),
);
