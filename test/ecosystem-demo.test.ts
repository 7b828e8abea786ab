import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";

const run = promisify(execFile);
const root = fileURLToPath(new URL("..", import.meta.url));

describe("npm run demo", () => {
  it("exits 0 and prints the owner the signed webhook added", async () => {
    const { stdout } = await run(`${root}node_modules/.bin/tsx`, ["scripts/demo.ts"], { cwd: root, timeout: 60_000 });
    expect(stdout).toMatch(/accessd webhook send \(signed with HMAC-SHA256\)\n {3}200 \{"eventId":"[0-9a-f-]{36}","executionId":"[0-9a-f-]{36}"\}/);
    expect(stdout).toMatch(/"state":"SUCCEEDED"/);
    const added = /Done: the webhook added ([0-9a-f-]{36}) as an owner\./.exec(stdout)?.[1];
    expect(added).toBeDefined();
    expect(stdout).toContain(`Owners of the entitlement\n   Ada Lovelace (${added ?? ""})`);
  });
});
