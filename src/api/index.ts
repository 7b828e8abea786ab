import type { ConnectRouter } from "@connectrpc/connect";
import { AppEntitlementOwners } from "../../gen/svc/api/app/v1/app_entitlement_owners_pb.js";
import { AppEntitlements } from "../../gen/svc/api/app/v1/app_entitlement_pb.js";
import { Apps } from "../../gen/svc/api/app/v1/app_pb.js";
import { Automations } from "../../gen/svc/api/automations/v1/automation_pb.js";
import { AutomationExecutions } from "../../gen/svc/api/automations/v1/execution_pb.js";
import { Clients } from "../../gen/svc/api/iam/v1/clients_pb.js";
import { Users } from "../../gen/svc/api/user/v1/user_pb.js";
import { appEntitlementOwnersService } from "./app-entitlement-owners-service.js";
import { appEntitlementsService } from "./app-entitlements-service.js";
import { appsService } from "./apps-service.js";
import { automationExecutionsService } from "./automation-executions-service.js";
import { automationWebhooksService } from "./automation-webhooks-service.js";
import { automationsService } from "./automations-service.js";
import { apiBodyLimits, executePath } from "./body-limits.js";
import { clientsService } from "./clients-service.js";
import type { WebhookSecretStore } from "../webhooks/index.js";
import type { ServiceContext } from "./service-context.js";
import { usersService } from "./users-service.js";

export type { ServiceContext } from "./service-context.js";
export { apiBodyLimits } from "./body-limits.js";

/**
 * Registers every API service of the contract on the router. Automations is served by two
 * partial implementations merged here: automations-service.ts and automation-webhooks-service.ts
 * (RotateWebhookSecret, ListWebhookDeliveries); its Execute takes at most maxExecuteRequestBytes.
 */
export function registerApiServices(router: ConnectRouter, context: ServiceContext, webhookSecrets: WebhookSecretStore): void {
  router.service(Apps, appsService(context));
  router.service(AppEntitlements, appEntitlementsService(context));
  router.service(AppEntitlementOwners, appEntitlementOwnersService(context));
  router.service(Users, usersService(context));
  const automations = { ...automationsService(context), ...automationWebhooksService(context, webhookSecrets) };
  router.service(Automations, automations);
  // Execute again on its own, with a smaller body limit, which connect-es applies to a compressed
  // body once decompressed too (ConnectHandlers keeps this handler, the later one of its path).
  router.rpc(Automations.method.execute, automations.execute, { readMaxBytes: apiBodyLimits.get(executePath) });
  router.service(AutomationExecutions, automationExecutionsService(context));
  router.service(Clients, clientsService(context));
}
