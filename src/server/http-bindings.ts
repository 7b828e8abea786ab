import { getOption, hasOption, type DescMethod, type DescService } from "@bufbuild/protobuf";
import { http } from "../../gen/google/api/annotations_pb.js";
import type { HttpRule } from "../../gen/google/api/http_pb.js";

/** One REST binding of an RPC, from its `google.api.http` option (additional bindings included). */
export interface HttpBinding {
  /** Upper-case HTTP method. */
  method: string;
  /** The path template as written in the proto, e.g. `/api/v1/apps/{app.id}`. */
  path: string;
  /** `*` (the request message is the body) or `` (no body: fields come from path and query). */
  body: string;
  rpc: DescMethod;
}

/** Every REST binding of the service's RPCs (the OpenAPI document's operations). */
export function httpBindingsOf(service: DescService): HttpBinding[] {
  return service.methods.flatMap(httpBindingsOfMethod);
}

/** The RPC's REST bindings (the transcoder's routes); none without a `google.api.http` option. */
export function httpBindingsOfMethod(rpc: DescMethod): HttpBinding[] {
  if (!hasOption(rpc, http)) return [];
  const rule = getOption(rpc, http);
  return [rule, ...rule.additionalBindings].flatMap((r) => {
    const verb = verbOf(r);
    return verb === undefined ? [] : [{ ...verb, body: r.body, rpc }];
  });
}

function verbOf(rule: HttpRule): { method: string; path: string } | undefined {
  switch (rule.pattern.case) {
    case "get":
    case "put":
    case "post":
    case "delete":
    case "patch":
      return { method: rule.pattern.case.toUpperCase(), path: rule.pattern.value };
    case "custom":
      return { method: rule.pattern.value.kind.toUpperCase(), path: rule.pattern.value.path };
    default:
      return undefined;
  }
}
