import { describe, expect, it } from "vitest";
import { ConfigError, loadConfig } from "../src/config.js";

describe("auth configuration", () => {
  it("reads ACCESSD_BOOTSTRAP_CLIENT_ID/_SECRET together and ACCESSD_TOKEN_TTL", () => {
    const config = loadConfig({
      ACCESSD_BOOTSTRAP_CLIENT_ID: "ops-admin",
      ACCESSD_BOOTSTRAP_CLIENT_SECRET: "a-long-enough-secret",
      ACCESSD_TOKEN_TTL: "15m",
    });
    expect(config.bootstrapClient).toEqual({ clientId: "ops-admin", clientSecret: "a-long-enough-secret" });
    expect(config.tokenTtlMs).toBe(900_000);
    expect(loadConfig({}).bootstrapClient).toBeUndefined();
    expect(loadConfig({}).tokenTtlMs).toBe(3_600_000);
  });

  it("names the variable that is wrong, without echoing the secret", () => {
    const cases: [Record<string, string>, string][] = [
      [{ ACCESSD_BOOTSTRAP_CLIENT_ID: "ops" }, "ACCESSD_BOOTSTRAP_CLIENT_SECRET"],
      [{ ACCESSD_BOOTSTRAP_CLIENT_SECRET: "a-long-enough-secret" }, "ACCESSD_BOOTSTRAP_CLIENT_ID"],
      [{ ACCESSD_BOOTSTRAP_CLIENT_ID: "has space", ACCESSD_BOOTSTRAP_CLIENT_SECRET: "a-long-enough-secret" }, "ACCESSD_BOOTSTRAP_CLIENT_ID"],
      [{ ACCESSD_BOOTSTRAP_CLIENT_ID: "ops", ACCESSD_BOOTSTRAP_CLIENT_SECRET: "short-secret" }, "ACCESSD_BOOTSTRAP_CLIENT_SECRET"],
      // White space is no secret: 20 spaces, or a short secret padded past 16, were accepted.
      [{ ACCESSD_BOOTSTRAP_CLIENT_ID: "ops", ACCESSD_BOOTSTRAP_CLIENT_SECRET: " ".repeat(20) }, "ACCESSD_BOOTSTRAP_CLIENT_SECRET"],
      [{ ACCESSD_BOOTSTRAP_CLIENT_ID: "ops", ACCESSD_BOOTSTRAP_CLIENT_SECRET: "short-secret\t\t\t\t\t\t" }, "ACCESSD_BOOTSTRAP_CLIENT_SECRET"],
      [{ ACCESSD_TOKEN_TTL: "10s" }, "ACCESSD_TOKEN_TTL"],
      [{ ACCESSD_TOKEN_TTL: "2d" }, "ACCESSD_TOKEN_TTL"],
      [{ ACCESSD_TOKEN_TTL: "an hour" }, "ACCESSD_TOKEN_TTL"],
    ];
    for (const [env, variable] of cases) {
      let error: unknown;
      try {
        loadConfig(env);
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(ConfigError);
      expect((error as ConfigError).variable).toBe(variable);
      expect((error as ConfigError).message).not.toContain("short-secret");
    }
  });
});
