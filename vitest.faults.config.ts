import { defineConfig } from 'vitest/config';

// `npm run test:faults`: fault tests that take over a minute each (production timings, long
// outages). They start their own processes and databases, so no global setup and no projects.
export default defineConfig({
  test: {
    include: ['test/slow/**/*.fault.ts'],
    testTimeout: 180_000,
    hookTimeout: 120_000,
    // Both files mostly wait (a lease, an outage): run them side by side even on two cores.
    maxWorkers: 2,
  },
});
