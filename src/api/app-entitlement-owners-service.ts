import type { ServiceImpl } from "@connectrpc/connect";
import { AppEntitlementOwners } from "../../gen/svc/api/app/v1/app_entitlement_owners_pb.js";
import { listingFingerprint, paginate } from "../pagination/index.js";
import { addEntitlementOwner, removeEntitlementOwner, requireAppEntitlement } from "../entitlements/entitlement-owners.js";
import { notFound, requireField } from "./errors.js";
import { userMessage } from "./resource-messages.js";
import type { ServiceContext } from "./service-context.js";

export function appEntitlementOwnersService({
  store,
  clock,
  pageTokens,
}: ServiceContext): ServiceImpl<typeof AppEntitlementOwners> {
  return {
    add(req) {
      // Input first: a request without a user is malformed whatever the path names.
      const userId = requireField(req.userId, "userId");
      addEntitlementOwner(store, clock.now(), {
        appId: requireField(req.appId, "appId"),
        entitlementId: requireField(req.entitlementId, "entitlementId"),
        userId,
      });
      return {};
    },

    list(req) {
      const appId = requireField(req.appId, "appId");
      const entitlementId = requireField(req.entitlementId, "entitlementId");
      requireAppEntitlement(store, appId, entitlementId);
      const page = paginate(
        pageTokens,
        listingFingerprint("app_entitlement_owners", appId, entitlementId),
        req,
        (after, limit) => store.owners.listAfter(entitlementId, after, limit),
      );
      return { list: page.items.map(userMessage), nextPageToken: page.nextPageToken };
    },

    set(req) {
      const appId = requireField(req.appId, "appId");
      const entitlementId = requireField(req.entitlementId, "entitlementId");
      const userIds = [...new Set(req.userIds)];
      userIds.forEach((id, i) => requireField(id, `userIds[${i}]`));
      store.transaction(() => {
        requireAppEntitlement(store, appId, entitlementId);
        const unknown = userIds.find((id) => !store.users.exists(id));
        if (unknown !== undefined) throw notFound("user", unknown);
        store.owners.replace(entitlementId, userIds, clock.now());
      });
      return {};
    },

    remove(req) {
      removeEntitlementOwner(store, {
        appId: requireField(req.appId, "appId"),
        entitlementId: requireField(req.entitlementId, "entitlementId"),
        userId: requireField(req.userId, "userId"),
      });
      return {};
    },
  };
}
