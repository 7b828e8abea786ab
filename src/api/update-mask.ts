import type { FieldMask } from "@bufbuild/protobuf/wkt";
import { invalidArgument } from "./errors.js";

/**
 * Which of a resource's writable fields an Update writes. With a mask, exactly the named fields
 * (proto or JSON names); without one, every writable field the request set to a non-empty value.
 */
export function fieldsToWrite<K extends string>(
  mask: FieldMask | undefined,
  writable: Readonly<Record<K, string>>, // JSON name -> proto name
  given: Readonly<Record<K, string>>,
): Set<K> {
  const names = Object.keys(writable) as K[];
  if (mask === undefined || mask.paths.length === 0) {
    return new Set(names.filter((name) => given[name] !== ""));
  }
  const chosen = new Set<K>();
  for (const path of mask.paths) {
    const name = names.find((n) => n === path || writable[n] === path);
    if (name === undefined) {
      // The path as a JSON client wrote it (protobuf-es gives the proto name: createdAt -> created_at),
      // and the proto name when there is one: capitals a JSON client wrote first or in a row read
      // as none ("DisplayName" -> "_display_name", "ROLES" -> "_r_o_l_e_s").
      const jsonPath = path.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase());
      const protoName = /^[a-z][a-z0-9]*(_[a-z0-9]+)*$/.test(path);
      const shown = jsonPath === path || !protoName ? `"${jsonPath}"` : `"${jsonPath}" ("${path}")`;
      throw invalidArgument(`updateMask names ${shown}, which is not one of ${names.join(", ")}`);
    }
    chosen.add(name);
  }
  return chosen;
}
