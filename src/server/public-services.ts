import type { DescService } from "@bufbuild/protobuf";
import type { ConnectRouter } from "@connectrpc/connect";
import { Health } from "../../gen/grpc/health/v1/health_pb.js";
import { ServerReflection as ServerReflectionV1 } from "../../gen/grpc/reflection/v1/reflection_pb.js";
import { ServerReflection as ServerReflectionV1Alpha } from "../../gen/grpc/reflection/v1alpha/reflection_pb.js";
import { healthService } from "./health/health-service.js";
import { DescriptorIndex } from "./reflection/descriptor-index.js";
import { ReflectionStreams, serverReflectionV1, serverReflectionV1Alpha } from "./reflection/reflection-service.js";

export interface PublicServicesOptions {
  /** The API's services: reflection describes them, health answers for them by name. */
  apiServices: readonly DescService[];
  /** Aborted when shutdown begins. */
  shutdown: AbortSignal;
  /** Aborted when the stop's grace for open connections is over: reflection streams end then. */
  streamsEnd: AbortSignal;
  /** Whether the store answers. */
  ready: () => boolean;
}

/** grpc.health.v1.Health and grpc.reflection.v1 / v1alpha ServerReflection, which need no token. */
export function registerPublicServices(router: ConnectRouter, options: PublicServicesOptions): void {
  const publicServices = [Health, ServerReflectionV1, ServerReflectionV1Alpha];
  const all = [...new Map([...options.apiServices, ...publicServices].map((s) => [s.typeName, s])).values()];
  const index = new DescriptorIndex(all);
  router.service(Health, healthService({ shutdown: options.shutdown, ready: options.ready, services: index.serviceNames }));
  const reflectionStreams = new ReflectionStreams(undefined, options.streamsEnd); // one cap for both versions
  router.service(ServerReflectionV1, serverReflectionV1(index, reflectionStreams));
  router.service(ServerReflectionV1Alpha, serverReflectionV1Alpha(index, reflectionStreams));
}
