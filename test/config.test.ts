import { describe, expect, it } from "vitest";
import { ConfigError, configDefaults, loadConfig } from "../src/config.js";
import { spawnCli } from "./support/spawn-cli.js";

describe("loadConfig", () => {
  it("defaults to 127.0.0.1:8080 with ./data/accessd.db when no ACCESSD_* variable is set", () => {
    expect(loadConfig({})).toMatchObject({
      host: "127.0.0.1",
      port: 8080,
      database: "./data/accessd.db",
      baseUrl: "http://localhost:8080",
      logLevel: "info",
      requestTimeoutMs: 30_000,
    });
    expect(loadConfig({})).toEqual(configDefaults);
  });

  it("treats empty variables as unset", () => {
    expect(loadConfig({ ACCESSD_PORT: "", ACCESSD_HOST: "", ACCESSD_DATABASE: "" })).toEqual(configDefaults);
  });

  it("reads every variable of the foundation", () => {
    expect(
      loadConfig({
        ACCESSD_HOST: "0.0.0.0",
        ACCESSD_PORT: "9090",
        ACCESSD_DATABASE: "/var/lib/accessd/a.db",
        ACCESSD_BASE_URL: "https://acme.example.com/",
        ACCESSD_LOG_LEVEL: "debug",
        ACCESSD_REQUEST_TIMEOUT: "15s",
      }),
    ).toMatchObject({
      host: "0.0.0.0",
      port: 9090,
      database: "/var/lib/accessd/a.db",
      baseUrl: "https://acme.example.com",
      logLevel: "debug",
      requestTimeoutMs: 15_000,
    });
    expect(loadConfig({ ACCESSD_PORT: "0" }).port).toBe(0);
    expect(loadConfig({ ACCESSD_DATABASE: ":memory:" }).database).toBe(":memory:");
  });

  it.each([
    ["ACCESSD_PORT", "abc"],
    ["ACCESSD_PORT", "70000"],
    ["ACCESSD_PORT", "-1"],
    ["ACCESSD_PORT", "80.5"],
    ["ACCESSD_HOST", "not a host!"],
    ["ACCESSD_DATABASE", "   "],
    ["ACCESSD_BASE_URL", "example.com"],
    ["ACCESSD_BASE_URL", "ftp://example.com"],
    ["ACCESSD_BASE_URL", "https://example.com/?tenant=1"],
    ["ACCESSD_LOG_LEVEL", "loud"],
    ["ACCESSD_REQUEST_TIMEOUT", "30"],
    ["ACCESSD_REQUEST_TIMEOUT", "0s"],
  ])("refuses %s=%j with a ConfigError naming the variable", (variable, value) => {
    let error: unknown;
    try {
      loadConfig({ [variable]: value });
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as ConfigError).variable).toBe(variable);
    expect((error as ConfigError).message.startsWith(`${variable}: `)).toBe(true);
  });
});

describe("accessd serve with a bad ACCESSD_* value", () => {
  it.each([
    ["ACCESSD_PORT", "abc"],
    ["ACCESSD_LOG_LEVEL", "loud"],
  ])("exits non-zero with one line on stderr naming %s", async (variable, value) => {
    const cli = spawnCli(["serve"], { [variable]: value, ACCESSD_DATABASE: ":memory:" });
    const { code } = await cli.exited;
    expect(code).not.toBe(0);
    expect(code).not.toBeNull();
    const lines = cli.stderr().split("\n").filter((l) => l !== "");
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain(variable);
    expect(lines[0]).toContain(value);
    expect(cli.stdout()).toBe("");
  });
});
