// End-to-end tests: Debian's chromium driven by playwright-core against a live
// `favlo serve` whose UI address is given in UI_URL (tools/ui-test.sh sets it).
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    environment: 'node',
    include: ['e2e/**/*.e2e.ts'],
    testTimeout: 240_000,
    hookTimeout: 120_000,
    fileParallelism: false,
    pool: 'forks',
    poolOptions: { forks: { singleFork: true } },
  },
});
