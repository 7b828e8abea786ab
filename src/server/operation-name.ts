import type { DescMethod } from "@bufbuild/protobuf";

/**
 * An RPC's operation name, `package.Service.Method`: how the logs, the metrics, the role table's
 * warnings and its refusals name it.
 */
export function operationName(method: DescMethod): string {
  return `${method.parent.typeName}.${method.name}`;
}
