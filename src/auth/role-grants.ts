import { Code, ConnectError } from "@connectrpc/connect";
import { Role } from "../../gen/svc/api/iam/v1/role_pb.js";
import type { Principal } from "./principal.js";

const grantable: ReadonlySet<Role> = new Set([Role.READ_ONLY, Role.ADMIN, Role.SUPER_ADMIN]);

/** Known roles only, each once, lowest first; an unknown or unspecified role is invalid_argument. */
export function normalizeRoles(roles: readonly Role[], field: string): Role[] {
  for (const role of roles) {
    if (!grantable.has(role)) {
      throw new ConnectError(`${field}: ${String(Role[role] ?? role)} is not a role (READ_ONLY, ADMIN, SUPER_ADMIN)`, Code.InvalidArgument);
    }
  }
  return [...new Set(roles)].sort((a, b) => a - b);
}

/**
 * A caller may change a user's roles only within its own reach: every role the user held before
 * and will hold after must be at most the caller's. So only a SUPER_ADMIN grants or revokes
 * SUPER_ADMIN, and an ADMIN cannot demote a SUPER_ADMIN. Unchanged roles need no check.
 */
export function checkRoleChange(caller: Principal | undefined, before: readonly Role[], after: readonly Role[]): void {
  const same = before.length === after.length && before.every((r, i) => r === after[i]);
  if (same) return;
  const callerRole = caller?.role ?? Role.ROLE_UNSPECIFIED;
  const beyond = [...before, ...after].find((r) => r > callerRole);
  if (beyond !== undefined) {
    throw new ConnectError(
      `only a caller with role ${Role[beyond]} may grant or revoke it, or change the roles of a user who holds it`,
      Code.PermissionDenied,
    );
  }
}

/**
 * A caller may change a user at all (name, email, username, roles) only if the user holds no role
 * above the caller's: an ADMIN could otherwise rename a SUPER_ADMIN, or give it another's email,
 * and mislead whoever grants roles next.
 */
export function checkUserInReach(caller: Principal | undefined, userRoles: readonly Role[]): void {
  const callerRole = caller?.role ?? Role.ROLE_UNSPECIFIED;
  const beyond = userRoles.find((r) => r > callerRole);
  if (beyond !== undefined) {
    throw new ConnectError(`only a caller with role ${Role[beyond]} may change a user who holds it`, Code.PermissionDenied);
  }
}
