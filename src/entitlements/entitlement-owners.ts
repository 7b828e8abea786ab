import { notFound } from "../connect-errors.js";
import type { Store } from "../store/store.js";

/**
 * Owner changes shared by the AppEntitlementOwners RPCs and the automation steps of the same
 * names, so both answer the same errors for the same input, and the existence checks they and
 * the AppEntitlements RPCs start with.
 */

export interface OwnerTarget {
  appId: string;
  entitlementId: string;
  userId: string;
}

export function requireApp(store: Store, appId: string): void {
  if (store.apps.get(appId) === undefined) throw notFound("app", appId);
}

/** The entitlement, when it exists and belongs to the app; else not_found naming which is missing. */
export function requireAppEntitlement(store: Store, appId: string, entitlementId: string) {
  requireApp(store, appId);
  const entitlement = store.appEntitlements.get(appId, entitlementId);
  if (entitlement === undefined) throw notFound("app entitlement", entitlementId);
  return entitlement;
}

export function addEntitlementOwner(store: Store, now: number, target: OwnerTarget): void {
  store.transaction(() => {
    requireAppEntitlement(store, target.appId, target.entitlementId);
    if (!store.users.exists(target.userId)) throw notFound("user", target.userId);
    store.owners.add(target.entitlementId, target.userId, now);
  });
}

export function removeEntitlementOwner(store: Store, target: OwnerTarget): void {
  store.transaction(() => {
    requireAppEntitlement(store, target.appId, target.entitlementId);
    if (!store.owners.remove(target.entitlementId, target.userId)) throw notFound("owner", target.userId);
  });
}
