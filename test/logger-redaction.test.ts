import { Writable } from "node:stream";
import { describe, expect, it } from "vitest";
import { createLogger } from "../src/logger.js";

function capture(): { stream: Writable; lines: () => Record<string, unknown>[] } {
  let out = "";
  const stream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      out += chunk.toString();
      done();
    },
  });
  return { stream, lines: () => out.trim().split("\n").map((l) => JSON.parse(l) as Record<string, unknown>) };
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
});
