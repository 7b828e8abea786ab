import type { ServiceImpl } from "@connectrpc/connect";
import { Apps } from "../../gen/svc/api/app/v1/app_pb.js";
import { listingFingerprint, paginate } from "../pagination/index.js";
import { newId } from "../store/ids.js";
import { limitText, maxDescriptionLength, notFound, requireField } from "./errors.js";
import { appMessage } from "./resource-messages.js";
import type { ServiceContext } from "./service-context.js";
import { fieldsToWrite } from "./update-mask.js";

export function appsService({ store, clock, pageTokens }: ServiceContext): ServiceImpl<typeof Apps> {
  const getOrThrow = (id: string) => {
    const app = store.apps.get(id);
    if (app === undefined) throw notFound("app", id);
    return app;
  };

  return {
    create(req) {
      const now = clock.now();
      const app = {
        id: newId(),
        displayName: requireField(req.displayName, "displayName"),
        description: limitText(req.description, "description", maxDescriptionLength),
        createdAt: now,
        updatedAt: now,
      };
      store.apps.insert(app);
      return { app: appMessage(app) };
    },

    get(req) {
      return { app: appMessage(getOrThrow(requireField(req.id, "id"))) };
    },

    list(req) {
      const page = paginate(pageTokens, listingFingerprint("apps"), req, (after, limit) =>
        store.apps.listAfter(after, limit),
      );
      return { list: page.items.map(appMessage), nextPageToken: page.nextPageToken };
    },

    update(req) {
      const given = req.app;
      const id = requireField(given?.id, "app.id");
      return store.transaction(() => {
        const app = getOrThrow(id);
        const write = fieldsToWrite(
          req.updateMask,
          { displayName: "display_name", description: "description" },
          { displayName: given?.displayName ?? "", description: given?.description ?? "" },
        );
        if (write.has("displayName")) app.displayName = requireField(given?.displayName, "app.displayName");
        if (write.has("description")) app.description = limitText(given?.description, "app.description", maxDescriptionLength);
        app.updatedAt = clock.now();
        store.apps.update(app);
        return { app: appMessage(app) };
      });
    },

    delete(req) {
      const id = requireField(req.id, "id");
      if (!store.apps.delete(id)) throw notFound("app", id);
      return {};
    },
  };
}
