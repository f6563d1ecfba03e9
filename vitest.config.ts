import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/helpers/global-setup.ts'],
    // The last line of a run names the tests that skipped and the command that installs what they need.
    reporters: ['default', './test/helpers/skip-report.ts'],
    // Integration tests spawn real processes against one PostgreSQL; 2 cores: keep parallelism modest.
    maxWorkers: 2,
    testTimeout: 60_000,
    hookTimeout: 120_000,
  },
});
