import { Writable } from "node:stream";
import { describe, expect, it } from "vitest";
import { createLogger, logInOneWrite } from "../src/logger.js";

function capture(): { stream: Writable; writes: string[]; lines: () => Record<string, unknown>[] } {
  const writes: string[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      writes.push(chunk.toString());
      done();
    },
  });
  return { stream, writes, lines: () => writes.join("").trim().split("\n").map((l) => JSON.parse(l) as Record<string, unknown>) };
}

describe("logger", () => {
  it("redacts credential headers and secret fields of a carelessly logged object", () => {
    const { stream, lines } = capture();
    const log = createLogger("info", stream);
    log.info(
      {
        headers: { authorization: "Bearer t0ken", "webhook-signature": "s1g", host: "example.com" },
        req: { headers: { authorization: "Bearer t0ken" } },
        authorization: "Bearer t0ken",
        secret: "s3cret",
        clientSecret: "s3cret",
        client_secret: "s3cret",
      },
      "careless",
    );
    const [line] = lines();
    expect(line).toMatchObject({
      headers: { authorization: "[redacted]", "webhook-signature": "[redacted]", host: "example.com" },
      req: { headers: { authorization: "[redacted]" } },
      authorization: "[redacted]",
      secret: "[redacted]",
      clientSecret: "[redacted]",
      client_secret: "[redacted]",
    });
    expect(JSON.stringify(line)).not.toMatch(/t0ken|s1g|s3cret/);
  });

  it("writes the lines logged inside logInOneWrite together, in order, once it returns", () => {
    const { stream, writes, lines } = capture();
    const log = createLogger("info", stream);
    const child = log.child({ component: "worker" });
    log.info("before");
    logInOneWrite(log, () => {
      child.info({ n: 1 }, "first");
      logInOneWrite(child, () => log.info({ n: 2 }, "nested"));
      expect(writes).toHaveLength(1); // held until the outer call returns
      log.info({ n: 3, secret: "s3cret" }, "third");
    });
    log.info("after");

    expect(writes).toHaveLength(3);
    expect(lines().map((line) => line.msg)).toEqual(["before", "first", "nested", "third", "after"]);
    expect(lines()[3]).toMatchObject({ secret: "[redacted]" });
  });

  it("writes the held lines even when the code logging them throws", () => {
    const { stream, lines } = capture();
    const log = createLogger("info", stream);
    expect(() =>
      logInOneWrite(log, () => {
        log.info("logged");
        throw new Error("boom");
      }),
    ).toThrow("boom");
    log.info("after");
    expect(lines().map((line) => line.msg)).toEqual(["logged", "after"]);
  });
});
