import { createRequire } from 'node:module';
import PgBoss from 'pg-boss';
import type { Database, Queryable } from '../db/client.js';
import type { QueueDepthRow } from '../telemetry/metrics.js';
import { SpanKind, withSpan } from '../telemetry/tracing.js';

/** The pg-boss schema in the service's database. */
export const JOB_SCHEMA = 'pgboss';

export interface SendOptions {
  /** A transaction (or the db): the job row is inserted in it and commits with the caller's rows. */
  db?: Queryable;
  retryLimit?: number;
  /** Seconds before the first retry. */
  retryDelay?: number;
  retryBackoff?: boolean;
  /** Seconds from now, or a moment. */
  startAfter?: number | Date;
  singletonKey?: string;
  /** How long an active job may run before it counts as failed (and is retried). */
  expireInSeconds?: number;
  /** A queue that receives the job's data once its retries are exhausted (to record the final state). */
  deadLetter?: string;
}

export interface WorkOptions {
  /** Jobs fetched per poll; they run concurrently and succeed or fail one by one. */
  batchSize?: number;
  pollingIntervalSeconds?: number;
  /** Independent polling loops for this queue in this process (default 1). */
  concurrency?: number;
}

export interface Job<T> {
  id: string;
  data: T;
}

export interface JobQueue {
  /** Enqueue; pass `db` (a transaction) to insert the job in the caller's transaction. */
  send(name: string, data: object, options?: SendOptions): Promise<string | null>;
  work<T extends object>(
    name: string,
    handler: (job: Job<T>) => Promise<void>,
    options?: WorkOptions,
  ): Promise<void>;
  /**
   * A task this process runs every `intervalMs` between start() and stop() (never overlapping
   * itself). Every process runs it, so it must be safe to run concurrently (e.g. SKIP LOCKED).
   */
  repeat(name: string, intervalMs: number, task: () => Promise<void>): void;
  start(): Promise<void>;
  stop(): Promise<void>;
}

export interface JobQueueOptions {
  /** Default polling interval of workers (seconds, >= 0.5). */
  pollingIntervalSeconds?: number;
  /** How often expired active jobs (their process died) are failed into retry. */
  maintenanceIntervalSeconds?: number;
  /** How long stop() waits for running handlers before failing them back to the queue. */
  stopTimeoutMs?: number;
  /** Errors of the queue itself (polling, maintenance); handlers' errors fail their job instead. */
  onError?: (err: unknown) => void;
}

interface Executor {
  executeSql(text: string, values?: unknown[]): Promise<{ rows: any[] }>;
}

interface DriverClient {
  query(text: string, values?: unknown[]): Promise<{ rows: any[] }>;
  exec?(text: string): Promise<Array<{ rows: any[] }>>;
}

/**
 * pg-boss sends its schema set-up as multi-statement text without values; PGlite runs that only
 * through `exec`. Everything else is one parameterised statement.
 */
function executorOf(client: DriverClient): Executor {
  return {
    async executeSql(text, values) {
      if ((!values || values.length === 0) && client.exec) {
        const results = await client.exec(text);
        return { rows: results.at(-1)?.rows ?? [] };
      }
      const result = await client.query(text, values as unknown[]);
      return { rows: result.rows };
    },
  };
}

function baseExecutor(database: Database): Executor {
  if (database.pglite) return executorOf(database.pglite as unknown as DriverClient);
  return executorOf(database.pool as unknown as DriverClient);
}

/**
 * The driver client behind a Drizzle handle: the PGlite transaction or the pooled pg client that
 * a Drizzle transaction runs on (Drizzle's `execute` cannot take positional parameters).
 */
function executorFor(database: Database, db: Queryable | undefined): Executor {
  if (!db || db === database.db) return baseExecutor(database);
  const client = (db as unknown as { session?: { client?: DriverClient } }).session?.client;
  if (!client || typeof client.query !== 'function') {
    throw new Error('jobs.send: `db` must be the service database or one of its transactions');
  }
  return executorOf(client);
}

const DEFAULTS = {
  retryLimit: 3,
  retryDelay: 5,
  retryBackoff: true,
  expireInSeconds: 15 * 60,
};

// pg-boss completes and fails jobs without awaiting the statement, so a database error there
// would be an unhandled rejection (a crashed process). Those two are reported instead: the job
// stays active, expires and runs again, which at-least-once handlers tolerate.
const plans = createRequire(import.meta.url)('pg-boss/src/plans.js') as {
  completeJobs(schema: string): string;
  failJobsById(schema: string): string;
};
const UNAWAITED = new Set([plans.completeJobs(JOB_SCHEMA), plans.failJobsById(JOB_SCHEMA)]);

/** Counts pg-boss's own statements so stop() can wait for the ones it fires without awaiting. */
function trackedExecutor(inner: Executor, onError: (err: unknown) => void) {
  let inFlight = 0;
  return {
    async executeSql(text: string, values?: unknown[]) {
      inFlight++;
      try {
        return await inner.executeSql(text, values);
      } catch (err) {
        if (!UNAWAITED.has(text)) throw err;
        onError(err);
        return { rows: [{ count: 0 }] };
      } finally {
        inFlight--;
      }
    },
    async drain(timeoutMs: number) {
      const deadline = Date.now() + timeoutMs;
      while (inFlight > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    },
  };
}

function bossFor(executor: Executor, options: JobQueueOptions): PgBoss {
  return new PgBoss({
    db: executor as PgBoss.Db,
    schema: JOB_SCHEMA,
    // Cron schedules and state monitoring are unused; maintenance recovers jobs of dead processes.
    schedule: false,
    supervise: true,
    migrate: true,
    maintenanceIntervalSeconds: options.maintenanceIntervalSeconds ?? 60,
    pollingIntervalSeconds: options.pollingIntervalSeconds ?? 1,
    ...DEFAULTS,
  });
}

/** Session advisory lock serializing pg-boss schema set-up between processes starting together. */
const START_LOCK = 7265618;
/** Transaction advisory lock taken while creating a queue. */
const QUEUE_LOCK = 7265619;

/**
 * pg-boss creates its schema inside its own advisory lock, but a process that waited on that
 * lock can still miss the schema the other just created (its catalog snapshot predates it) and
 * fail with a duplicate key. Waiting on a lock taken in an earlier transaction avoids that.
 */
async function startSerialized(database: Database, start: () => Promise<unknown>) {
  if (!database.pool) {
    await start();
    return;
  }
  const client = await database.pool.connect();
  try {
    await client.query('select pg_advisory_lock($1)', [START_LOCK]);
    await start();
  } finally {
    await client.query('select pg_advisory_unlock($1)', [START_LOCK]).catch(() => {});
    client.release();
  }
}

export async function createJobQueue(database: Database, options: JobQueueOptions = {}): Promise<JobQueue> {
  const onError = options.onError ?? ((err: unknown) => console.error('job queue error', err));
  const executor = trackedExecutor(baseExecutor(database), onError);
  const boss = bossFor(executor, options);
  boss.on('error', onError);

  let started = false;
  let stopped = false;
  const repeating: Array<{ name: string; intervalMs: number; task: () => Promise<void> }> = [];
  const timers = new Set<NodeJS.Timeout>();
  const runningTasks = new Set<Promise<void>>();

  function schedule(entry: (typeof repeating)[number]) {
    if (stopped) return;
    const timer = setTimeout(() => {
      timers.delete(timer);
      const run = entry
        .task()
        .catch((err) =>
          onError(Object.assign(err instanceof Error ? err : new Error(String(err)), { task: entry.name })),
        )
        .finally(() => {
          runningTasks.delete(run);
          schedule(entry);
        });
      runningTasks.add(run);
    }, entry.intervalMs);
    timers.add(timer);
  }
  const knownQueues = new Set<string>();
  const pendingWork: Array<() => Promise<void>> = [];

  async function ensureQueue(name: string, executor?: Executor): Promise<void> {
    if (knownQueues.has(name)) return;
    const run = executor ?? baseExecutor(database);
    const { rows } = await run.executeSql(`SELECT 1 FROM ${JOB_SCHEMA}.queue WHERE name = $1`, [name]);
    if (rows.length === 0) {
      // Creating a queue attaches a partition to the job table; processes creating queues at the
      // same moment could deadlock, so creations take turns.
      await run.executeSql(
        `WITH turn AS (SELECT pg_advisory_xact_lock($3)) SELECT ${JOB_SCHEMA}.create_queue($1, $2) FROM turn`,
        [name, JSON.stringify({ policy: 'standard' }), QUEUE_LOCK],
      );
    }
    // Inside a caller's transaction the queue exists only if it commits: remember base creations only.
    if (!executor) knownQueues.add(name);
  }

  async function startWorkers<T extends object>(
    name: string,
    handler: (job: Job<T>) => Promise<void>,
    workOptions: WorkOptions,
  ) {
    await ensureQueue(name);
    const batchSize = workOptions.batchSize ?? 1;
    const loops = Math.max(1, workOptions.concurrency ?? 1);
    const bossOptions: PgBoss.WorkOptions = { batchSize };
    if (workOptions.pollingIntervalSeconds !== undefined)
      bossOptions.pollingIntervalSeconds = workOptions.pollingIntervalSeconds;
    // Each run a span (a root of its own trace: the job outlives the request that queued it).
    const runJob = (job: { id: string; data: T }) =>
      withSpan(
        `job ${name}`,
        { 'messaging.system': 'pg-boss', 'messaging.destination.name': name, 'messaging.message.id': job.id },
        () => handler({ id: job.id, data: job.data }),
        SpanKind.CONSUMER,
      );
    for (let i = 0; i < loops; i++) {
      const worker: { id?: string } = {};
      worker.id = await boss.work<T>(name, bossOptions, async (jobs) => {
        // A full batch suggests more are waiting: poll again at once instead of after the interval.
        if (jobs.length >= batchSize && worker.id) boss.notifyWorker(worker.id);
        if (jobs.length === 1) {
          await runJob(jobs[0]);
          return;
        }
        const results = await Promise.allSettled(jobs.map(runJob));
        // pg-boss completes or fails a batch as a whole; failing the failed ones first keeps the
        // rest completing (completion only touches jobs still active).
        for (const [index, result] of results.entries()) {
          if (result.status === 'rejected') {
            const reason = result.reason;
            await boss.fail(name, jobs[index].id, {
              message: reason instanceof Error ? reason.message : String(reason),
            });
          }
        }
      });
    }
  }

  return {
    async send(name, data, sendOptions = {}) {
      const { db, startAfter, ...rest } = sendOptions;
      const executor = db && db !== database.db ? executorFor(database, db) : undefined;
      await ensureQueue(name, executor);
      if (rest.deadLetter) await ensureQueue(rest.deadLetter, executor);
      const bossOptions: PgBoss.SendOptions = { ...rest };
      if (startAfter !== undefined) bossOptions.startAfter = startAfter;
      if (executor) bossOptions.db = executor as PgBoss.Db;
      return boss.send(name, data, bossOptions);
    },
    async work(name, handler, workOptions = {}) {
      const run = () => startWorkers(name, handler, workOptions);
      if (started) await run();
      else pendingWork.push(run);
    },
    repeat(name, intervalMs, task) {
      const entry = { name, intervalMs, task };
      repeating.push(entry);
      if (started) schedule(entry);
    },
    async start() {
      if (started || stopped) return;
      await startSerialized(database, () => boss.start());
      started = true;
      // Recover at once the expired jobs of processes that died, rather than a maintenance interval later.
      await boss.maintain().catch(onError);
      for (const run of pendingWork.splice(0)) await run();
      for (const entry of repeating) schedule(entry);
    },
    async stop() {
      if (stopped) return;
      stopped = true;
      if (!started) return;
      for (const timer of timers) clearTimeout(timer);
      timers.clear();
      await Promise.allSettled([...runningTasks]);
      await boss.stop({ graceful: true, close: false, timeout: options.stopTimeoutMs ?? 10_000 });
      // Completions are fired after a handler returns without being awaited by pg-boss.
      await new Promise((r) => setImmediate(r));
      await executor.drain(2000);
    },
  };
}

/** Jobs waiting (created, retry) or running (active) per queue, for the /metrics gauge. */
export async function jobQueueDepth(database: Database): Promise<QueueDepthRow[]> {
  const { rows } = await database.query<QueueDepthRow>(
    `select name as queue, state::text as state, count(*)::int as count from ${JOB_SCHEMA}.job
      where state in ('created', 'retry', 'active') group by 1, 2`,
  );
  return rows;
}
