import type { ServiceImpl } from "@connectrpc/connect";
import { AppEntitlements } from "../../gen/svc/api/app/v1/app_entitlement_pb.js";
import { requireApp, requireAppEntitlement } from "../entitlements/entitlement-owners.js";
import { listingFingerprint, paginate } from "../pagination/index.js";
import { newId } from "../store/ids.js";
import { limitText, maxDescriptionLength, notFound, requireField } from "./errors.js";
import { appEntitlementMessage } from "./resource-messages.js";
import type { ServiceContext } from "./service-context.js";
import { fieldsToWrite } from "./update-mask.js";

/**
 * A slug derived from the display name when none is given (or only white space): "Billing Admin"
 * -> "billing-admin", "Éditeur Général" -> "editeur-general" (Latin accents dropped), "管理者 2"
 * -> "管理者-2": the letters and digits of any script, lower case, every run of anything else one
 * hyphen. (ASCII only before: "Éditeur Général" was "diteur-g-n-ral" and "管理者" no slug.)
 */
function slugify(displayName: string): string {
  return displayName
    .normalize("NFKD")
    .replace(/[\u0300-\u036f]+/g, "") // the combining accents NFKD splits off Latin letters
    .toLowerCase()
    // Other marks stay with their letters (kana voicing, Indic and Thai vowel signs): as hyphens,
    // "データ" was "テ-ータ".
    .replace(/[^\p{L}\p{M}\p{N}]+/gu, "-")
    .replace(/^-+|-+$/g, "")
    .normalize("NFC");
}

export function appEntitlementsService({
  store,
  clock,
  pageTokens,
}: ServiceContext): ServiceImpl<typeof AppEntitlements> {
  return {
    create(req) {
      const appId = requireField(req.appId, "appId");
      const displayName = requireField(req.displayName, "displayName");
      return store.transaction(() => {
        requireApp(store, appId);
        const now = clock.now();
        const entitlement = {
          id: newId(),
          appId,
          displayName,
          description: limitText(req.description, "description", maxDescriptionLength),
          slug: req.slug.trim() !== "" ? limitText(req.slug, "slug") : slugify(displayName),
          createdAt: now,
          updatedAt: now,
        };
        store.appEntitlements.insert(entitlement);
        return { appEntitlement: appEntitlementMessage(entitlement) };
      });
    },

    get(req) {
      const entitlement = requireAppEntitlement(store, requireField(req.appId, "appId"), requireField(req.id, "id"));
      return { appEntitlement: appEntitlementMessage(entitlement) };
    },

    list(req) {
      const appId = requireField(req.appId, "appId");
      requireApp(store, appId);
      const page = paginate(
        pageTokens,
        listingFingerprint("app_entitlements", appId),
        req,
        (after, limit) => store.appEntitlements.listAfter(appId, after, limit),
      );
      return {
        list: page.items.map((e) => ({ appEntitlement: appEntitlementMessage(e) })),
        nextPageToken: page.nextPageToken,
      };
    },

    update(req) {
      const given = req.appEntitlement;
      const appId = requireField(given?.appId, "appEntitlement.appId");
      const id = requireField(given?.id, "appEntitlement.id");
      return store.transaction(() => {
        const entitlement = requireAppEntitlement(store, appId, id);
        const write = fieldsToWrite(
          req.updateMask,
          { displayName: "display_name", description: "description", slug: "slug" },
          {
            displayName: given?.displayName ?? "",
            description: given?.description ?? "",
            slug: given?.slug ?? "",
          },
        );
        if (write.has("displayName")) {
          entitlement.displayName = requireField(given?.displayName, "appEntitlement.displayName");
        }
        if (write.has("description")) entitlement.description = limitText(given?.description, "appEntitlement.description", maxDescriptionLength);
        if (write.has("slug")) {
          // Empty or white space: derived from the name, as on Create (white space was stored as the slug).
          const slug = limitText(given?.slug, "appEntitlement.slug");
          entitlement.slug = slug.trim() !== "" ? slug : slugify(entitlement.displayName);
        }
        entitlement.updatedAt = clock.now();
        store.appEntitlements.update(entitlement);
        return { appEntitlement: appEntitlementMessage(entitlement) };
      });
    },

    delete(req) {
      const appId = requireField(req.appId, "appId");
      const id = requireField(req.id, "id");
      requireApp(store, appId);
      if (!store.appEntitlements.delete(appId, id)) throw notFound("app entitlement", id);
      return {};
    },
  };
}
