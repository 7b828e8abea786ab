import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { AppSchema, type App } from "../../gen/svc/api/app/v1/app_pb.js";
import { AppEntitlementSchema, type AppEntitlement } from "../../gen/svc/api/app/v1/app_entitlement_pb.js";
import { UserSchema, type User } from "../../gen/svc/api/user/v1/user_pb.js";
import type { App as AppRecord } from "../store/apps-repository.js";
import type { AppEntitlement as AppEntitlementRecord } from "../store/app-entitlements-repository.js";
import type { User as UserRecord } from "../store/users-repository.js";

/** Store records -> protobuf messages. */

export function appMessage(app: AppRecord): App {
  return create(AppSchema, {
    id: app.id,
    displayName: app.displayName,
    description: app.description,
    createdAt: timestampFromMs(app.createdAt),
    updatedAt: timestampFromMs(app.updatedAt),
  });
}

export function appEntitlementMessage(e: AppEntitlementRecord): AppEntitlement {
  return create(AppEntitlementSchema, {
    id: e.id,
    appId: e.appId,
    displayName: e.displayName,
    description: e.description,
    slug: e.slug,
    createdAt: timestampFromMs(e.createdAt),
    updatedAt: timestampFromMs(e.updatedAt),
  });
}

export function userMessage(u: UserRecord): User {
  return create(UserSchema, {
    id: u.id,
    displayName: u.displayName,
    email: u.email,
    username: u.username,
    createdAt: timestampFromMs(u.createdAt),
    updatedAt: timestampFromMs(u.updatedAt),
    roles: u.roles,
  });
}
