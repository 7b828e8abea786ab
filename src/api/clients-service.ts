import type { JsonObject } from "@bufbuild/protobuf";
import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import { ClientAuthMethod, Clients, ClientSchema, type Client } from "../../gen/svc/api/iam/v1/clients_pb.js";
import { Role } from "../../gen/svc/api/iam/v1/role_pb.js";
import { confirmCaller, hashSecret, newClientSecret, principalKey, publicKeyToRegister, UnsupportedKeyError } from "../auth/index.js";
import { listingFingerprint, paginate } from "../pagination/index.js";
import type { Client as ClientRecord } from "../store/clients-repository.js";
import { newId } from "../store/ids.js";
import { invalidArgument, notFound, requireField } from "./errors.js";
import type { ServiceContext } from "./service-context.js";

/**
 * API clients (Super Admin only, by the contract's required_role). A client's secret is returned
 * by Create once and stored only as a scrypt hash; a client registered with a public JWK has no
 * secret and authenticates with private_key_jwt.
 */
export function clientsService({ store, clock, pageTokens }: ServiceContext): ServiceImpl<typeof Clients> {
  return {
    async create(req, context) {
      const displayName = requireField(req.displayName, "displayName");
      const userId = requireField(req.userId, "userId");
      if (!store.users.exists(userId)) throw notFound("user", userId);
      const publicJwk = req.publicJwk === undefined ? undefined : await registeredKey(req.publicJwk);
      const clientSecret = publicJwk === undefined ? newClientSecret() : "";
      const secretHash = publicJwk === undefined ? await hashSecret(clientSecret) : undefined;
      // While the key was imported or the secret hashed (scrypt, ~40 ms), the caller's client may
      // have been deleted or its user demoted, and the user named may have been deleted (the
      // foreign key would refuse it). The id and the time are drawn now, so that id order stays
      // creation order for the listing's pages.
      confirmCaller(context.values.get(principalKey), (id) => store.clients.principalOf(id), Role.SUPER_ADMIN, context.method);
      if (!store.users.exists(userId)) throw notFound("user", userId);
      const client: ClientRecord = { id: newId(), userId, displayName, secretHash, publicJwk, createdAt: clock.now() };
      store.clients.insert(client);
      return { client: clientMessage(client), clientSecret };
    },

    list(req) {
      const page = paginate(pageTokens, listingFingerprint("clients"), req, (after, limit) =>
        store.clients.listAfter(after, limit),
      );
      return { list: page.items.map(clientMessage), nextPageToken: page.nextPageToken };
    },

    delete(req) {
      const id = requireField(req.id, "id");
      if (!store.clients.delete(id)) throw notFound("client", id);
      return {};
    },
  };
}

async function registeredKey(jwk: JsonObject): Promise<string> {
  try {
    return await publicKeyToRegister(jwk);
  } catch (e) {
    if (e instanceof UnsupportedKeyError) throw invalidArgument(`publicJwk: ${e.message}`);
    throw e;
  }
}

function clientMessage(c: ClientRecord): Client {
  return create(ClientSchema, {
    id: c.id,
    displayName: c.displayName,
    userId: c.userId,
    authMethod: c.publicJwk === undefined ? ClientAuthMethod.CLIENT_SECRET_POST : ClientAuthMethod.PRIVATE_KEY_JWT,
    publicJwk: c.publicJwk === undefined ? undefined : (JSON.parse(c.publicJwk) as JsonObject),
    createdAt: timestampFromMs(c.createdAt),
  });
}
