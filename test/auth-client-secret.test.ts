import { describe, expect, it, vi } from "vitest";

/** Counts the scrypt runs behind verifySecret (the real scrypt still runs). */
const scryptRuns = vi.hoisted(() => ({ count: 0 }));
vi.mock("node:crypto", async (importOriginal) => {
  const crypto = await importOriginal<typeof import("node:crypto")>();
  return {
    ...crypto,
    scrypt: (...args: Parameters<typeof crypto.scrypt>) => {
      scryptRuns.count++;
      return crypto.scrypt(...args);
    },
  };
});

const { hashSecret, verifySecret } = await import("../src/auth/client-secret.js");

describe("verifySecret", () => {
  it("checks a secret that matched its stored hash before without a scrypt (a client asking for a token before every call cost one each time), and a wrong or changed one with a scrypt still", async () => {
    const stored = await hashSecret("the-right-secret");
    scryptRuns.count = 0;
    expect(await verifySecret("the-right-secret", stored)).toBe(true);
    expect(scryptRuns.count).toBe(1);
    expect(await verifySecret("the-right-secret", stored)).toBe(true);
    expect(await verifySecret("the-right-secret", stored)).toBe(true);
    expect(scryptRuns.count).toBe(1);

    // Guessing stays as slow as ever: a wrong secret is a scrypt each time.
    expect(await verifySecret("a-wrong-secret", stored)).toBe(false);
    expect(await verifySecret("a-wrong-secret", stored)).toBe(false);
    expect(scryptRuns.count).toBe(3);

    // A rotated secret is another stored hash: the old secret does not match it, the new one after a scrypt.
    const rotated = await hashSecret("the-new-secret");
    scryptRuns.count = 0;
    expect(await verifySecret("the-right-secret", rotated)).toBe(false);
    expect(await verifySecret("the-new-secret", rotated)).toBe(true);
    expect(scryptRuns.count).toBe(2);
  });
});
