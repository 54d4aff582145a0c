import { defineConfig } from 'vitest/config';

// `npm run test:faults`: fault tests that take over a minute each (production timings, long
// outages). They start their own processes and databases, so no global setup and no projects.
export default defineConfig({
  test: {
    include: ['test/slow/**/*.fault.ts'],
    testTimeout: 180_000,
    hookTimeout: 120_000,
  },
});
