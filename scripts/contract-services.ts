import { readdirSync } from "node:fs";
import { fileURLToPath, pathToFileURL } from "node:url";
import type { DescService } from "@bufbuild/protobuf";

const genSvc = fileURLToPath(new URL("../gen/svc/", import.meta.url));

/**
 * Every service of the contract: the services declared in the generated `gen/svc/**` files,
 * found on disk so that a new proto file is documented without anyone listing it.
 */
export async function contractServices(): Promise<DescService[]> {
  const files = readdirSync(genSvc, { recursive: true, encoding: "utf8" })
    .filter((f) => f.endsWith("_pb.ts"))
    .sort();
  const services = new Map<string, DescService>();
  for (const file of files) {
    const module: Record<string, unknown> = await import(pathToFileURL(genSvc + file).href);
    for (const value of Object.values(module)) {
      if (isService(value)) services.set(value.typeName, value);
    }
  }
  return [...services.values()].sort((a, b) => (a.typeName < b.typeName ? -1 : a.typeName > b.typeName ? 1 : 0));
}

function isService(value: unknown): value is DescService {
  return typeof value === "object" && value !== null && "kind" in value && value.kind === "service";
}
