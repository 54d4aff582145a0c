import { defineConfig } from 'vitest/config';

// Every test file runs once per backend: PGlite always, PostgreSQL when TEST_DATABASE_URL is set.
const backends = ['pglite', ...(process.env.TEST_DATABASE_URL ? ['postgres'] : [])];

export default defineConfig({
  test: {
    globalSetup: ['./test/global-setup.ts'],
    // Vitest's default on 2 cores is one worker; most tests wait on I/O, timers and child processes.
    maxWorkers: 3,
    testTimeout: 30_000,
    hookTimeout: 60_000,
    include: ['test/**/*.test.ts', 'clients/*/test/**/*.test.ts'],
    projects: backends.map((backend) => ({
      extends: true,
      test: { name: backend, env: { TEST_BACKEND: backend } },
    })),
  },
});
