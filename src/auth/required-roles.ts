import { getOption, hasOption, type DescMethod } from "@bufbuild/protobuf";
import { Role, required_role } from "../../gen/svc/api/iam/v1/role_pb.js";
import { operationName } from "../server/operation-name.js";

/**
 * The least role each RPC needs, read once from the `(svc.api.iam.v1.required_role)` method
 * option of the registered methods. An RPC that declares none (or ROLE_UNSPECIFIED) is absent
 * from the table, and the interceptor refuses it: fail closed.
 */
export class RequiredRoles {
  private readonly byOperation = new Map<string, Role>();
  /** Registered RPCs without a role option, for a warning at start. */
  readonly undeclared: string[] = [];

  /** Reads the option of each method once; main calls it with the router's methods at start. */
  register(methods: Iterable<DescMethod>): void {
    for (const method of methods) {
      const operation = operationName(method);
      const role = hasOption(method, required_role) ? getOption(method, required_role) : Role.ROLE_UNSPECIFIED;
      if (role === Role.ROLE_UNSPECIFIED) this.undeclared.push(operation);
      else this.byOperation.set(operation, role);
    }
  }

  /** The role the RPC needs, or undefined when it declares none. */
  of(method: DescMethod): Role | undefined {
    return this.byOperation.get(operationName(method));
  }
}
