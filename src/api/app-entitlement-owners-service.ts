import type { ServiceImpl } from "@connectrpc/connect";
import { AppEntitlementOwners } from "../../gen/svc/api/app/v1/app_entitlement_owners_pb.js";
import { listingFingerprint, paginate } from "../pagination/index.js";
import type { Store } from "../store/store.js";
import { notFound, requireField } from "./errors.js";
import { userMessage } from "./resource-messages.js";
import type { ServiceContext } from "./service-context.js";

/** The entitlement, when it exists and belongs to the app; else not_found naming which is missing. */
export function requireAppEntitlement(store: Store, appId: string, entitlementId: string) {
  if (store.apps.get(appId) === undefined) throw notFound("app", appId);
  const entitlement = store.appEntitlements.get(appId, entitlementId);
  if (entitlement === undefined) throw notFound("app entitlement", entitlementId);
  return entitlement;
}

/**
 * Adds an owner; shared by the Add RPC and the automation step of the same name, so both answer
 * the same errors for the same input.
 */
export function addEntitlementOwner(
  store: Store,
  now: number,
  target: { appId: string; entitlementId: string; userId: string },
): void {
  store.transaction(() => {
    requireAppEntitlement(store, target.appId, target.entitlementId);
    if (!store.users.exists(target.userId)) throw notFound("user", target.userId);
    store.owners.add(target.entitlementId, target.userId, now);
  });
}

export function removeEntitlementOwner(
  store: Store,
  target: { appId: string; entitlementId: string; userId: string },
): void {
  store.transaction(() => {
    requireAppEntitlement(store, target.appId, target.entitlementId);
    if (!store.owners.remove(target.entitlementId, target.userId)) {
      throw notFound("owner", target.userId);
    }
  });
}

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
