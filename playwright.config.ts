import { defineConfig } from '@playwright/test';
import { CHROMIUM_ARGS, chromiumPath } from './e2e/chromium.js';

// Browser tests of the operator console (`npm run test:e2e`): Debian's Chromium drives the built
// console against a real service process on PGlite with the fake model server (e2e/service.ts).
export default defineConfig({
  testDir: 'e2e',
  testMatch: '*.spec.ts',
  // One service per worker; the machine has two cores.
  workers: 1,
  fullyParallel: false,
  timeout: 90_000,
  expect: { timeout: 20_000 },
  outputDir: 'test-results/playwright',
  reporter: [['list']],
  use: {
    browserName: 'chromium',
    launchOptions: { executablePath: chromiumPath() ?? undefined, args: CHROMIUM_ARGS },
    viewport: { width: 1280, height: 900 },
    trace: 'retain-on-failure',
    screenshot: 'only-on-failure',
  },
});
