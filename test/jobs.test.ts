import os from 'node:os';
import { afterEach, describe, expect, it } from 'vitest';
import { type Database, openDatabase } from '../src/db/client.js';
import { createJobQueue, type JobQueue } from '../src/jobs/queue.js';
import { backend, createTestDatabase, type TestDatabase } from './helpers/database.js';

const waitUntil = async (check: () => boolean | Promise<boolean>, timeoutMs = 15_000) => {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('condition not reached in time');
    await new Promise((r) => setTimeout(r, 50));
  }
};

/** A second connection to the same database, as another process would have (PGlite serves one process). */
async function secondConnection(testDb: TestDatabase): Promise<Database> {
  if (!testDb.url) return testDb.database;
  return openDatabase({ databaseUrl: testDb.url, dataDir: os.tmpdir(), poolSize: 5 });
}

describe('job queue', () => {
  const cleanup: Array<() => Promise<void>> = [];
  afterEach(async () => {
    for (const step of cleanup.splice(0).reverse()) await step();
  });

  async function setUp() {
    const testDb = await createTestDatabase();
    cleanup.push(() => testDb.drop());
    return testDb;
  }

  async function queueOn(database: Database, options: Parameters<typeof createJobQueue>[1] = {}) {
    const queue = await createJobQueue(database, {
      pollingIntervalSeconds: 0.5,
      stopTimeoutMs: 2000,
      ...options,
    });
    cleanup.push(() => queue.stop());
    return queue;
  }

  it('shares the work of two workers on one database, each job running once', async () => {
    const testDb = await setUp();
    const other = await secondConnection(testDb);
    if (other !== testDb.database) cleanup.push(() => other.close());
    const runs: Array<{ worker: string; n: number }> = [];
    const queues: JobQueue[] = [];
    for (const [worker, database] of [
      ['a', testDb.database],
      ['b', other],
    ] as const) {
      const queue = await queueOn(database);
      await queue.work<{ n: number }>(
        'shared',
        async (job) => {
          // Long enough that one worker cannot drain the queue before the other polls.
          await new Promise((r) => setTimeout(r, 150));
          runs.push({ worker, n: job.data.n });
        },
        { batchSize: 4, concurrency: 2 },
      );
      await queue.start();
      queues.push(queue);
    }
    for (let n = 0; n < 60; n++) await queues[n % 2].send('shared', { n });
    await waitUntil(() => runs.length >= 60);
    await new Promise((r) => setTimeout(r, 1200));
    expect(runs).toHaveLength(60);
    expect(new Set(runs.map((r) => r.n)).size).toBe(60);
    expect(runs.some((r) => r.worker === 'a')).toBe(true);
    expect(runs.some((r) => r.worker === 'b')).toBe(true);
  });

  it('inserts a job with the caller transaction: rolled back, it never runs', async () => {
    const testDb = await setUp();
    const queue = await queueOn(testDb.database);
    const seen: string[] = [];
    await queue.work<{ label: string }>('tx', async (job) => {
      seen.push(job.data.label);
    });
    await queue.start();
    await testDb.database.db
      .transaction(async (tx) => {
        await queue.send('tx', { label: 'rolled back' }, { db: tx });
        throw new Error('abort');
      })
      .catch(() => {});
    await testDb.database.db.transaction(async (tx) => {
      await queue.send('tx', { label: 'committed' }, { db: tx });
    });
    await waitUntil(() => seen.length >= 1);
    await new Promise((r) => setTimeout(r, 1000));
    expect(seen).toEqual(['committed']);
  });

  it('retries a failing job with a bound, then hands it to its dead-letter queue', async () => {
    const testDb = await setUp();
    const queue = await queueOn(testDb.database);
    let attempts = 0;
    const dead: unknown[] = [];
    await queue.work('flaky', async () => {
      attempts++;
      throw new Error('always failing');
    });
    await queue.work('flaky-dead', async (job) => {
      dead.push(job.data);
    });
    await queue.start();
    await queue.send(
      'flaky',
      { id: 7 },
      { retryLimit: 2, retryDelay: 0, retryBackoff: false, deadLetter: 'flaky-dead' },
    );
    await waitUntil(() => dead.length === 1);
    expect(attempts).toBe(3);
    expect(dead).toEqual([{ id: 7 }]);
    const { rows } = await testDb.database.query<{ state: string }>(
      `select state from pgboss.job where name = 'flaky'`,
    );
    expect(rows).toEqual([{ state: 'failed' }]);
  });

  it('runs again a job whose process died while running it, once it expires', async () => {
    const testDb = await setUp();
    const queue = await queueOn(testDb.database, { maintenanceIntervalSeconds: 1 });
    await queue.start();
    const id = await queue.send('orphan', { survived: true }, { expireInSeconds: 1, retryDelay: 0 });
    // A process took the job and died: it stays active and nobody completes it.
    await testDb.database.query(
      `update pgboss.job set state = 'active', started_on = now() - interval '10 seconds' where id = $1`,
      [id],
    );
    const seen: unknown[] = [];
    await queue.work('orphan', async (job) => {
      seen.push(job.data);
    });
    await waitUntil(() => seen.length === 1);
    expect(seen).toEqual([{ survived: true }]);
    const job = async () =>
      (
        await testDb.database.query<{ state: string; retry_count: number }>(
          `select state, retry_count from pgboss.job where id = $1`,
          [id],
        )
      ).rows[0];
    await waitUntil(async () => (await job()).state === 'completed');
    expect((await job()).retry_count).toBe(1);
  });

  it(`runs repeating tasks between start and stop (${backend})`, async () => {
    const testDb = await setUp();
    const queue = await createJobQueue(testDb.database, { pollingIntervalSeconds: 0.5 });
    let ticks = 0;
    queue.repeat('tick', 30, async () => {
      ticks++;
    });
    await new Promise((r) => setTimeout(r, 150));
    expect(ticks).toBe(0);
    await queue.start();
    await waitUntil(() => ticks >= 3);
    await queue.stop();
    const stoppedAt = ticks;
    await new Promise((r) => setTimeout(r, 150));
    expect(ticks).toBe(stoppedAt);
  });
});
