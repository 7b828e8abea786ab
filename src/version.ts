import { readFileSync } from "node:fs";

/**
 * accessd's version, from its package.json: the first one named accessd up from this file's
 * folder (src/ under tsx, dist/src/ when built). For the start's log line and `accessd --version`.
 */
export const accessdVersion: string = (() => {
  let folder = new URL(".", import.meta.url);
  for (let level = 0; level < 4; level++) {
    try {
      const manifest = JSON.parse(readFileSync(new URL("package.json", folder), "utf8")) as { name?: unknown; version?: unknown };
      if (manifest.name === "accessd" && typeof manifest.version === "string") return manifest.version;
    } catch {
      // none here: one folder up
    }
    folder = new URL("..", folder);
  }
  return "unknown";
})();
