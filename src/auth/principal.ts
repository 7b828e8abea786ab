import { createContextKey } from "@connectrpc/connect";
import { Role } from "../../gen/svc/api/iam/v1/role_pb.js";

/** The authenticated caller of an RPC: an API client acting as its user, with that user's roles. */
export interface Principal {
  clientId: string;
  userId: string;
  roles: readonly Role[];
  /** The highest of `roles` (each role includes the ones below it); ROLE_UNSPECIFIED when none. */
  role: Role;
}

/**
 * Set by the authorization interceptor on every RPC it lets through; services read it with
 * `context.values.get(principalKey)`. Undefined only outside an authenticated call.
 */
export const principalKey = createContextKey<Principal | undefined>(undefined, { description: "authenticated principal" });

export function highestRole(roles: readonly Role[]): Role {
  return roles.reduce((highest, r) => (r > highest ? r : highest), Role.ROLE_UNSPECIFIED);
}

/** True when `have` is at least `need` (SUPER_ADMIN > ADMIN > READ_ONLY). */
export function roleAtLeast(have: Role, need: Role): boolean {
  return need !== Role.ROLE_UNSPECIFIED && have >= need;
}
