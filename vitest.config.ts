import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // dist/ built from src/ once, for the tests that start accessd as a process.
    globalSetup: ["test/support/build-dist.ts"],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    // Two cores: run test files in parallel, two at a time.
    maxWorkers: 2,
  },
});
