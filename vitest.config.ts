import { defineConfig } from 'vitest/config';

// Every test file runs once per backend: PGlite always, PostgreSQL when TEST_DATABASE_URL is set.
const backends = ['pglite', ...(process.env.TEST_DATABASE_URL ? ['postgres'] : [])];

export default defineConfig({
  test: {
    globalSetup: ['./test/global-setup.ts'],
    // Vitest's default on 2 cores is one worker; most tests wait on I/O, timers and child processes.
    maxWorkers: 3,
    // Test files of a worker share one module graph: each file importing src/ afresh cost 264 s
    // of the suite's 601 s on 2 cores (424 to 447 s without). Every test builds its own app,
    // database and servers (docs/decisions.md, "Test files share their worker's modules").
    isolate: false,
    testTimeout: 30_000,
    hookTimeout: 60_000,
    include: ['test/**/*.test.ts', 'clients/*/test/**/*.test.ts'],
    projects: backends.map((backend) => ({
      extends: true,
      test: { name: backend, env: { TEST_BACKEND: backend } },
    })),
  },
});
