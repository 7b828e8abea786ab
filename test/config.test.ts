import { describe, expect, it } from "vitest";
import { ConfigError, configDefaults, loadConfig, unknownConfigVariables } from "../src/config.js";
import { listeningPort, spawnCli } from "./support/spawn-cli.js";

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
    expect(loadConfig({ ACCESSD_PORT: "0" }).baseUrl).toBe("http://localhost:8080");
    expect(loadConfig({ ACCESSD_DATABASE: ":memory:" }).database).toBe(":memory:");
  });

  it("names the server by its port when ACCESSD_BASE_URL is unset (endpoint URLs and the tokens' issuer)", () => {
    expect(loadConfig({ ACCESSD_PORT: "18204" }).baseUrl).toBe("http://localhost:18204");
    expect(loadConfig({ ACCESSD_PORT: "18204", ACCESSD_BASE_URL: "https://acme.example.com" }).baseUrl).toBe("https://acme.example.com");
  });

  it("refuses a base URL with credentials without echoing them", () => {
    let error: unknown;
    try {
      loadConfig({ ACCESSD_BASE_URL: "https://ops:hunter2hunter2@acme.example.com" });
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ConfigError);
    expect(String((error as Error).message)).not.toContain("hunter2");
    expect(() => loadConfig({ ACCESSD_BASE_URL: "https://acme.example.com/?token=hunter2" })).toThrow(/^(?!.*hunter2)/s);
    for (const value of ["ops:hunter2hunter2@acme.example.com", "ftp://ops:hunter2hunter2@acme.example.com"]) {
      expect(() => loadConfig({ ACCESSD_BASE_URL: value })).toThrow(/^(?!.*hunter2)/s);
    }
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
    // Past 2^31-1 ms Node fires a timer after 1 ms: every request body would be cut at once.
    ["ACCESSD_REQUEST_TIMEOUT", "30d"],
    ["ACCESSD_REQUEST_TIMEOUT", "25h"],
    ["ACCESSD_REQUEST_TIMEOUT", "1ms"],
    ["ACCESSD_REQUEST_TIMEOUT", "999ms"],
    ["ACCESSD_EVENT_RETENTION", "3651d"],
    ["ACCESSD_EVENT_RETENTION", `${"9".repeat(400)}d`],
    ["ACCESSD_EXECUTION_RETENTION", "59m"],
    ["ACCESSD_EXECUTION_RETENTION", "never"],
    ["ACCESSD_EXECUTION_RETENTION", "3651d"],
    // `ACCESSD_DATA_KEY=$KEY` with KEY unset must not mean "make a key file".
    ["ACCESSD_DATA_KEY", ""],
    ["ACCESSD_DATA_KEY", "  "],
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

describe("limits of the durations", () => {
  it("takes a request timeout from 1s to 24h and a retention up to 3650d", () => {
    expect(loadConfig({ ACCESSD_REQUEST_TIMEOUT: "1s" }).requestTimeoutMs).toBe(1000);
    expect(loadConfig({ ACCESSD_REQUEST_TIMEOUT: "24h" }).requestTimeoutMs).toBe(86_400_000);
    expect(loadConfig({ ACCESSD_EVENT_RETENTION: "3650d" }).eventRetentionMs).toBe(3650 * 86_400_000);
  });

  it("keeps finished executions 30 days unless told otherwise: from 1h, or forever", () => {
    expect(loadConfig({}).executionRetentionMs).toBe(30 * 86_400_000);
    expect(loadConfig({ ACCESSD_EXECUTION_RETENTION: "" }).executionRetentionMs).toBe(30 * 86_400_000);
    expect(loadConfig({ ACCESSD_EXECUTION_RETENTION: "1h" }).executionRetentionMs).toBe(3_600_000);
    expect(loadConfig({ ACCESSD_EXECUTION_RETENTION: "365d" }).executionRetentionMs).toBe(365 * 86_400_000);
    expect(loadConfig({ ACCESSD_EXECUTION_RETENTION: "forever" }).executionRetentionMs).toBeUndefined();
    expect(loadConfig({ ACCESSD_EXECUTION_RETENTION: "Forever" }).executionRetentionMs).toBeUndefined();
    for (const value of ["never", "off", "0"]) {
      expect(() => loadConfig({ ACCESSD_EXECUTION_RETENTION: value })).toThrow(`"${value}" is neither a duration of at least 1h (such as 30d or 90d) nor forever`);
    }
  });
});

describe("ACCESSD_* names accessd does not read", () => {
  it("lists them (the server warns about each at start), and no name accessd reads", () => {
    expect(unknownConfigVariables({ ACCESSD_DATA_KYE: "x", ACCESSD_PORT: "1", ACCESSD_DATA_KEY: "y", PATH: "/bin" })).toEqual([
      "ACCESSD_DATA_KYE",
    ]);
  });

  it("leave out what Kubernetes sets for a Service named accessd, and name that as the cause when it takes ACCESSD_PORT", () => {
    const serviceLinks = {
      ACCESSD_SERVICE_HOST: "10.96.0.12",
      ACCESSD_SERVICE_PORT: "8080",
      ACCESSD_SERVICE_PORT_HTTP: "8080",
      ACCESSD_PORT_8080_TCP: "tcp://10.96.0.12:8080",
      ACCESSD_PORT_8080_TCP_PROTO: "tcp",
      ACCESSD_PORT_8080_TCP_PORT: "8080",
      ACCESSD_PORT_8080_TCP_ADDR: "10.96.0.12",
    };
    expect(unknownConfigVariables({ ...serviceLinks, ACCESSD_PORTT: "1" })).toEqual(["ACCESSD_PORTT"]);
    expect(() => loadConfig({ ACCESSD_PORT: "tcp://10.96.0.12:8080" })).toThrow(
      'ACCESSD_PORT: "tcp://10.96.0.12:8080" is not a whole number: Kubernetes sets it for a Service named accessd; set enableServiceLinks: false in the pod spec, or ACCESSD_PORT yourself',
    );
  });

  it("are named in a warning by `accessd serve`, which starts anyway", async () => {
    const cli = spawnCli(["serve"], { ACCESSD_DATABASE: ":memory:", ACCESSD_PORT: "0", ACCESSD_REQEST_TIMEOUT: "5s" });
    try {
      await listeningPort(cli);
      const warning = cli.stdout().split("\n").find((l) => l.includes("does not read"));
      expect(JSON.parse(warning ?? "{}")).toMatchObject({ level: 40, variables: ["ACCESSD_REQEST_TIMEOUT"] });
    } finally {
      cli.child.kill("SIGTERM");
      await cli.exited;
    }
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
