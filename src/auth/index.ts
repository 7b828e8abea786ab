export { AccessTokens, InvalidAccessTokenError, type IssuedToken } from "./access-tokens.js";
export { authorizationInterceptor, confirmCaller, verifyBearer } from "./authorization-interceptor.js";
export { createSuperAdminClient, ensureBootstrapClient, type ClientCredentials } from "./bootstrap.js";
export { hashSecret, newClientSecret, verifySecret } from "./client-secret.js";
export { publicKeyToRegister, UnsupportedKeyError } from "./client-public-key.js";
export { FailureLimiter } from "./failure-limiter.js";
export { highestRole, principalKey, roleAtLeast, type Principal } from "./principal.js";
export { RequiredRoles } from "./required-roles.js";
export { tokenEndpoint } from "./token-endpoint.js";
