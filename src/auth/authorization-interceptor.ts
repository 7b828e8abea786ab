import type { DescMethod } from "@bufbuild/protobuf";
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { Role } from "../../gen/svc/api/iam/v1/role_pb.js";
import { operationName } from "../server/operation-name.js";
import { noteRequestFacts, requestFactsKey } from "../server/request-context.js";
import type { ClientPrincipal } from "../store/clients-repository.js";
import { InvalidAccessTokenError, isIssuedToClientRecord, type AccessTokens, type VerifiedToken } from "./access-tokens.js";
import { highestRole, principalKey, roleAtLeast, type Principal } from "./principal.js";
import type { RequiredRoles } from "./required-roles.js";

export interface AuthorizationOptions {
  tokens: AccessTokens;
  /** Who a client acts as; undefined once the client (or its user) is deleted. */
  principalOf: (clientId: string) => ClientPrincipal | undefined;
  /** Filled from the router's methods at start, before the server listens. */
  requiredRoles: RequiredRoles;
}

/**
 * Every RPC, on every protocol (gRPC, gRPC-Web, Connect, and REST through the transcoder), needs
 * `Authorization: Bearer <access token>` of an existing client whose user holds the RPC's role.
 * No, malformed, expired or foreign token, or a deleted client (also when a client with its id
 * was created since) -> unauthenticated (401); a role too low, or an RPC that declares no role
 * -> permission_denied (403). The principal is put in the context values for the services.
 */
export function authorizationInterceptor(options: AuthorizationOptions): Interceptor {
  return (next) => async (req) => {
    const facts = req.contextValues.get(requestFactsKey);
    const verified = facts.bearer ?? (await verifyBearer(req.header.get("authorization"), options.tokens));
    if (verified instanceof ConnectError) throw verified;
    const principal = principalOfToken(verified, options);
    noteRequestFacts(facts, { clientId: principal.clientId }); // the log names the caller, refused or not
    authorize(principal, req.method, options.requiredRoles);
    req.contextValues.set(principalKey, principal);
    return next(req);
  };
}

/**
 * The request's bearer token, verified (its signature, issuer, audience and age), or the
 * unauthenticated error that refuses it. The API's routes call it before they read the request
 * body (`RequestFacts.bearer`): a request without a valid token is refused without its body being
 * decoded, which for a 1 MiB body of small JSON values held the thread 85-270 ms, at no cost to
 * a caller without a token. The interceptor calls it for a request that was not checked so.
 */
export async function verifyBearer(authorization: string | null | undefined, tokens: AccessTokens): Promise<VerifiedToken | ConnectError> {
  if (authorization === null || authorization === undefined || authorization === "") {
    return unauthenticated("missing bearer token: send Authorization: Bearer <access token> (POST /auth/v1/token)", false);
  }
  if (authorization.includes(",")) {
    // Two Authorization headers (joined by HttpServer), or a list in one: no bearer token has a comma.
    return unauthenticated("Authorization must be given once, as Bearer <access token>", true);
  }
  const match = /^Bearer +([A-Za-z0-9._~+/-]+=*)$/i.exec(authorization.trim());
  const token = match?.[1];
  if (token === undefined) return unauthenticated("Authorization header must be Bearer <access token>", true);
  try {
    return await tokens.verify(token);
  } catch (e) {
    if (e instanceof InvalidAccessTokenError) return unauthenticated(e.message, true);
    throw e;
  }
}

/** Who a verified token's client acts as now; a deleted client is unauthenticated. */
function principalOfToken(verified: VerifiedToken, options: AuthorizationOptions): Principal {
  const { clientId } = verified;
  const found = options.principalOf(clientId);
  // A client deleted and re-created with the same id (the bootstrap client) is another client:
  // the tokens of the deleted one stay dead. Looked up when the call runs, after its body was
  // read, so a client deleted meanwhile is refused whenever its token was verified.
  if (found === undefined || !isIssuedToClientRecord(verified, found.clientCreatedAt)) {
    throw unauthenticated("the client of this token no longer exists", true);
  }
  return { clientId, userId: found.userId, roles: found.roles, role: highestRole(found.roles) };
}

/**
 * For a handler that awaits (hashing, key import) before it writes: the caller as it is now, after
 * the interceptor let it through. A client deleted, or a user demoted below `needed`, while the
 * handler waited is refused as the interceptor would refuse it now (401, 403), so a revocation
 * answered before the write takes effect on it.
 */
export function confirmCaller(
  principal: Principal | undefined,
  principalOf: AuthorizationOptions["principalOf"],
  needed: Role,
  method: DescMethod,
): void {
  const now = principal === undefined ? undefined : principalOf(principal.clientId);
  if (principal === undefined || now === undefined || now.userId !== principal.userId) {
    throw unauthenticated("the client of this token no longer exists", true);
  }
  const role = highestRole(now.roles);
  if (!roleAtLeast(role, needed)) {
    throw new ConnectError(`${operationName(method)} requires role ${Role[needed]}; the caller now has ${roleName(role)}`, Code.PermissionDenied);
  }
}

const roleName = (role: Role) => (role === Role.ROLE_UNSPECIFIED ? "no role" : Role[role]);

function authorize(principal: Principal, method: DescMethod, requiredRoles: RequiredRoles): void {
  const operation = operationName(method);
  const needed = requiredRoles.of(method);
  if (needed === undefined) {
    throw new ConnectError(`${operation} declares no required role and is refused`, Code.PermissionDenied);
  }
  if (!roleAtLeast(principal.role, needed)) {
    throw new ConnectError(
      `${operation} requires role ${Role[needed]}; the caller has ${roleName(principal.role)}`,
      Code.PermissionDenied,
    );
  }
}

/**
 * RFC 6750: 401 answers name the Bearer scheme. Connect sends error metadata as response headers,
 * so REST (which pipes the Connect answer) and Connect carry `WWW-Authenticate`; gRPC gets it as
 * metadata.
 */
function unauthenticated(message: string, invalidToken: boolean): ConnectError {
  const challenge = invalidToken ? 'Bearer error="invalid_token"' : "Bearer";
  return new ConnectError(message, Code.Unauthenticated, { "www-authenticate": challenge });
}
