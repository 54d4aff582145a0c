import os from 'node:os';
import { afterEach, describe, expect, it } from 'vitest';
import { type Database, openDatabase } from '../src/db/client.js';
import { createJobQueue, JOBS_CHANNEL, type JobQueue } from '../src/jobs/queue.js';
import { Notifier } from '../src/streams/notifier.js';
import { testLog } from './helpers/app.js';
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
        { batchSize: 4, concurrency: 8 },
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

/**
 * Idle queues are not polled: notifications (LISTEN/NOTIFY, from any process, at commit) wake
 * them. Every test checks idle queues only every 60 s and polls (without a LISTEN) only every
 * 30 s, so anything that happens within seconds was woken.
 */
describe('job queue wake-ups', () => {
  const cleanup: Array<() => Promise<void>> = [];
  afterEach(async () => {
    for (const step of cleanup.splice(0).reverse()) await step();
  });

  const QUIET = { pollingIntervalSeconds: 30, idleCheckSeconds: 60, stopTimeoutMs: 2000 };

  /** A queue with its own notifier on `database`, started, its LISTEN in effect. */
  async function listeningQueue(database: Database, options: Parameters<typeof createJobQueue>[1] = {}) {
    const notifier = new Notifier(database, testLog());
    cleanup.push(() => notifier.close());
    const queue = await createJobQueue(database, { ...QUIET, wakeups: notifier, ...options });
    cleanup.push(() => queue.stop());
    return {
      queue,
      notifier,
      async start() {
        await queue.start();
        await waitUntil(() => notifier.isListening(JOBS_CHANNEL), 5000);
      },
    };
  }

  async function setUp() {
    const testDb = await createTestDatabase();
    cleanup.push(() => testDb.drop());
    const other = await secondConnection(testDb);
    if (other !== testDb.database) cleanup.push(() => other.close());
    // The sending "process": its own queue on its own connection, working nothing.
    const sender = await createJobQueue(other, QUIET);
    cleanup.push(() => sender.stop());
    await sender.start();
    return { testDb, other, sender };
  }

  it('starts a job sent by another process at once, also one sent in a transaction (at its commit)', async () => {
    const { testDb, other, sender } = await setUp();
    const { queue, start } = await listeningQueue(testDb.database);
    const started: Array<{ n: number; ms: number }> = [];
    let sentAt = 0;
    await queue.work<{ n: number }>('wake', async (job) => {
      started.push({ n: job.data.n, ms: Date.now() - sentAt });
    });
    await start();
    await new Promise((r) => setTimeout(r, 300));

    sentAt = Date.now();
    await sender.send('wake', { n: 1 });
    await waitUntil(() => started.length === 1, 3000);

    await other.db.transaction(async (tx) => {
      await sender.send('wake', { n: 2 }, { db: tx });
      // Not committed yet: nothing may run, and nothing is announced.
      await new Promise((r) => setTimeout(r, 400));
      expect(started).toHaveLength(1);
      sentAt = Date.now();
    });
    await waitUntil(() => started.length === 2, 3000);
    expect(started.map((s) => s.n)).toEqual([1, 2]);
    for (const { ms } of started) expect(ms).toBeLessThan(1000);
  });

  it('runs a job sent to start later at its time, and a failed job again after its retry delay', async () => {
    const { testDb, sender } = await setUp();
    const { queue, start } = await listeningQueue(testDb.database);
    const runs: Array<{ label: string; at: number }> = [];
    await queue.work<{ label: string }>('later', async (job) => {
      runs.push({ label: job.data.label, at: Date.now() });
      if (job.data.label === 'flaky' && runs.filter((r) => r.label === 'flaky').length === 1) {
        throw new Error('first attempt fails');
      }
    });
    await start();
    const t0 = Date.now();
    await sender.send('later', { label: 'delayed' }, { startAfter: 2 });
    await sender.send('later', { label: 'flaky' }, { retryDelay: 2, retryBackoff: false });
    await waitUntil(() => runs.length === 3, 10_000);
    const at = (label: string, nth = 0) => runs.filter((r) => r.label === label)[nth].at - t0;
    // The lower bounds are the rule; the upper ones only catch a job that was not picked up at its
    // time, with room for a loaded machine (with 1 s and 3.5 s, a full suite on 2 cores failed
    // this test once; it passed alone).
    expect(at('flaky')).toBeLessThan(1500);
    expect(at('delayed')).toBeGreaterThanOrEqual(1900);
    expect(at('delayed')).toBeLessThan(5000);
    // Failed here at about 0 s; due again 2 s later.
    expect(at('flaky', 1)).toBeGreaterThanOrEqual(1900);
    expect(at('flaky', 1)).toBeLessThan(5000);
  });

  it('on start, runs the jobs due now at once and the others at their time', async () => {
    const { testDb, sender } = await setUp();
    const t0 = Date.now();
    await sender.send('waiting', { label: 'first' });
    await sender.send('waiting', { label: 'second' });
    await sender.send('waiting', { label: 'later' }, { startAfter: 3 });
    const { queue, start } = await listeningQueue(testDb.database);
    const runs: Array<{ label: string; at: number }> = [];
    await queue.work<{ label: string }>('waiting', async (job) => {
      runs.push({ label: job.data.label, at: Date.now() - t0 });
      // The start's check of every queue runs meanwhile: 'second' is due now, 'later' in 3 s.
      if (job.data.label === 'first') await new Promise((r) => setTimeout(r, 700));
    });
    await start();
    await waitUntil(() => runs.length === 3, 6000);
    expect(runs.map((r) => r.label)).toEqual(['first', 'second', 'later']);
    expect(runs[1].at).toBeLessThan(2500);
    expect(runs[2].at).toBeGreaterThanOrEqual(2900);
    expect(runs[2].at).toBeLessThan(4500);
  });

  it('runs at most `concurrency` jobs at once with one poller, taking more as places free up', async () => {
    const { testDb, sender } = await setUp();
    const { queue, start } = await listeningQueue(testDb.database);
    let running = 0;
    let most = 0;
    const done: number[] = [];
    await queue.work<{ n: number }>(
      'bounded',
      async (job) => {
        running++;
        most = Math.max(most, running);
        await new Promise((r) => setTimeout(r, 100));
        running--;
        done.push(job.data.n);
      },
      { concurrency: 3 },
    );
    await start();
    for (let n = 0; n < 12; n++) await sender.send('bounded', { n });
    await waitUntil(() => done.length === 12, 5000);
    expect(most).toBe(3);
    expect(new Set(done).size).toBe(12);
  });

  it('wakes an idle repeated task by a notification naming it, not sooner than its interval', async () => {
    const testDb = await createTestDatabase();
    cleanup.push(() => testDb.drop());
    const { queue, notifier, start } = await listeningQueue(testDb.database);
    const runs: number[] = [];
    queue.repeat('idle-task', 300, async () => {
      runs.push(Date.now());
      return false;
    });
    await start();
    // Its first run is one interval after the start; idle then, it waits for a wake-up.
    await waitUntil(() => runs.length === 1, 3000);
    await new Promise((r) => setTimeout(r, 1000));
    expect(runs).toHaveLength(1);
    const woken = Date.now();
    await notifier.notify(JOBS_CHANNEL, 'idle-task');
    await waitUntil(() => runs.length === 2, 2000);
    expect(runs[1] - woken).toBeLessThan(500);
    // Two wake-ups at once: one run more, one interval later.
    await notifier.notify(JOBS_CHANNEL, 'idle-task');
    await notifier.notify(JOBS_CHANNEL, 'idle-task');
    await waitUntil(() => runs.length === 3, 2000);
    expect(runs[2] - runs[1]).toBeGreaterThanOrEqual(290);
    await new Promise((r) => setTimeout(r, 800));
    expect(runs).toHaveLength(3);
  });

  it('an idle queue runs no statement between its checks', async () => {
    const testDb = await createTestDatabase();
    cleanup.push(() => testDb.drop());
    // Polling every 0.5 s would be the fallback: the LISTEN makes it unnecessary.
    const { queue, start } = await listeningQueue(testDb.database, { pollingIntervalSeconds: 0.5 });
    for (const name of ['idle-a', 'idle-b', 'idle-c']) {
      await queue.work(name, async () => {}, { concurrency: 8 });
    }
    queue.repeat('idle-task', 200, async () => false);
    await start();
    await new Promise((r) => setTimeout(r, 500));
    // Count the statements the queue sends through the database's client (the real one).
    const client = (testDb.database.pglite ?? testDb.database.pool) as unknown as {
      query: (...args: unknown[]) => Promise<unknown>;
    };
    const original = client.query;
    let statements = 0;
    client.query = function (this: unknown, ...args: unknown[]) {
      statements++;
      return original.apply(this, args);
    };
    try {
      await new Promise((r) => setTimeout(r, 3000));
    } finally {
      client.query = original;
    }
    expect(statements).toBe(0);
  });
});
