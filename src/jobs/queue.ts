import { createRequire } from 'node:module';
import PgBoss from 'pg-boss';
import type { Database, Queryable } from '../db/client.js';
import type { QueueDepthRow } from '../telemetry/metrics.js';
import { SpanKind, withSpan } from '../telemetry/tracing.js';

/** The pg-boss schema in the service's database. */
export const JOB_SCHEMA = 'pgboss';

/**
 * Where work is announced between processes (LISTEN/NOTIFY). Payload: a queue's name and the ms
 * until its new job may start (`"deliver-webhook 0"`), sent by the statement inserting the job, or
 * a repeated task's name (`"webhooks-outbox"`), sent by the triggers on the tables it reads
 * (migration 0017). A notification is delivered when its transaction commits, never before.
 */
export const JOBS_CHANNEL = 'scriptorium_jobs';

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
  /** Jobs of this queue running at once in this process (default 1). */
  concurrency?: number;
  /** Jobs taken per fetch (default `concurrency`); never more than the free places. */
  batchSize?: number;
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
   * A task that returns `false` found nothing to do: while notifications reach this process, it
   * then waits for one naming it (JOBS_CHANNEL, payload `name`) or for the idle check, and runs
   * at once when woken (never sooner than `intervalMs` after its previous start).
   */
  repeat(name: string, intervalMs: number, task: () => Promise<unknown>): void;
  start(): Promise<void>;
  stop(): Promise<void>;
}

/** The listening side of src/streams/notifier.ts (LISTEN/NOTIFY between processes). */
export interface JobWakeups {
  listen(channel: string, handler: (payload: string) => void): Promise<void>;
  onListening(channel: string, handler: (live: boolean) => void): void;
  onReconnect(handler: () => void): void;
}

export interface JobQueueOptions {
  /**
   * How often queues are checked for jobs while no notification can reach this process (no
   * `wakeups`, or its LISTEN is down), and how often idle repeated tasks run then (seconds, >= 0.5).
   */
  pollingIntervalSeconds?: number;
  /**
   * Notifications that wake workers and tasks. While their LISTEN is live, idle queues and tasks
   * are only checked every `idleCheckSeconds`, as a safety net.
   */
  wakeups?: JobWakeups;
  /** Default 30. */
  idleCheckSeconds?: number;
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

const plans = createRequire(import.meta.url)('pg-boss/src/plans.js') as {
  completeJobs(schema: string): string;
  failJobsById(schema: string): string;
  insertJob(schema: string): string;
  fetchNextJob(schema: string): (options: { includeMetadata?: boolean; priority?: boolean }) => string;
};

const INSERT_JOB = plans.insertJob(JOB_SCHEMA);
/**
 * pg-boss's insert of one job, announcing it on JOBS_CHANNEL in the same statement (no extra round
 * trip); inside a caller's transaction the announcement leaves with the commit, or never.
 */
const INSERT_JOB_ANNOUNCED = (() => {
  const at = INSERT_JOB.lastIndexOf('RETURNING id');
  if (at < 0 || INSERT_JOB.slice(at).trim() !== 'RETURNING id') {
    throw new Error('pg-boss insertJob plan changed: update src/jobs/queue.ts');
  }
  return `WITH inserted AS (${INSERT_JOB.slice(0, at)}RETURNING id, name, start_after)
    SELECT id, pg_notify('${JOBS_CHANNEL}',
      name || ' ' || greatest(0, ceil(extract(epoch FROM start_after - now()) * 1000))::bigint) AS announced
    FROM inserted`;
})();
const FETCH_JOBS = plans.fetchNextJob(JOB_SCHEMA)({ includeMetadata: false, priority: true });
/**
 * Per queue with waiting jobs: whether one may start now, and the ms until the first that may only
 * start later (null: none). One statement for every queue (pg-boss's index on name, start_after).
 */
const NEXT_DUE = `SELECT name, min(start_after) <= now() AS due_now,
    ceil(extract(epoch FROM min(start_after) FILTER (WHERE start_after > now()) - now()) * 1000)::float8 AS next_ms
  FROM ${JOB_SCHEMA}.job WHERE name = ANY($1::text[]) AND state < 'active' GROUP BY name`;

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
      const sql = text === INSERT_JOB ? INSERT_JOB_ANNOUNCED : text;
      const result = await client.query(sql, values as unknown[]);
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

// Completing and failing a job are reported rather than thrown: the job stays active, expires and
// runs again, which at-least-once handlers tolerate.
const UNAWAITED = new Set([plans.completeJobs(JOB_SCHEMA), plans.failJobsById(JOB_SCHEMA)]);

/** Counts pg-boss's own statements so stop() can wait for the ones still running. */
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

const asError = (err: unknown) => (err instanceof Error ? err : new Error(String(err)));

/** A timer that may be moved earlier; `at` is when it fires (epoch ms). */
interface Alarm {
  at: number;
  timer: NodeJS.Timeout;
}

/**
 * The queue. Each worked queue has one poller in this process: it fetches jobs when woken, up to
 * its free places, and fetches again when a place frees while the last fetch came back full.
 * Wake-ups: the notification of a job's insert (from any process, at commit; a job that may start
 * later sets a timer), a job failed here (its retry or dead letter), maintenance run here, and a
 * check of every queue at once (one statement): every `idleCheckSeconds` while notifications
 * reach this process, every `pollingIntervalSeconds` otherwise.
 */
export async function createJobQueue(database: Database, options: JobQueueOptions = {}): Promise<JobQueue> {
  const onError = options.onError ?? ((err: unknown) => console.error('job queue error', err));
  const executor = trackedExecutor(baseExecutor(database), onError);
  const boss = bossFor(executor, options);
  boss.on('error', onError);
  const pollingMs = Math.max(0.5, options.pollingIntervalSeconds ?? 1) * 1000;
  const idleCheckMs = Math.max(0.5, options.idleCheckSeconds ?? 30) * 1000;
  const { wakeups } = options;

  let started = false;
  let stopped = false;
  /** Whether a LISTEN on JOBS_CHANNEL is in effect: notifications then wake this process. */
  let live = false;
  const checkEveryMs = () => (live ? idleCheckMs : pollingMs);

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

  // ---- workers -------------------------------------------------------------------------------

  interface Worker {
    wake(): void;
    /** Wakes the worker in `ms` (an earlier alarm stays). */
    wakeIn(ms: number): void;
    /** Resolves once nothing runs or is being fetched; then fails back what still runs. */
    settle(timeoutMs: number): Promise<void>;
    clear(): void;
  }
  const workers = new Map<string, Worker>();

  function createWorker<T extends object>(
    name: string,
    handler: (job: Job<T>) => Promise<void>,
    workOptions: WorkOptions,
  ): Worker {
    const concurrency = Math.max(1, workOptions.concurrency ?? 1);
    const batchSize = Math.max(1, Math.min(workOptions.batchSize ?? concurrency, concurrency));
    const running = new Map<string, Promise<void>>();
    let pumping: Promise<void> | null = null;
    /** A fetch is due: woken, or the last fetch came back full. */
    let wanted = false;
    let alarm: Alarm | null = null;
    /** Jobs due later were announced: once the due ones are taken, look for the next moment. */
    let later = false;

    // Each run a span, the root of its own trace: the job outlives the request that queued it, and
    // a local worker may be woken inside some request's context (which then looked like its parent).
    const runJob = (job: Job<T>) =>
      withSpan(
        `job ${name}`,
        { 'messaging.system': 'pg-boss', 'messaging.destination.name': name, 'messaging.message.id': job.id },
        () => handler(job),
        SpanKind.CONSUMER,
        true,
      );

    function begin(row: { id: string; data: T; expireInSeconds: number | string }) {
      const expireMs = Math.max(1, Number(row.expireInSeconds)) * 1000;
      const run = (async () => {
        let timer: NodeJS.Timeout | undefined;
        try {
          // As pg-boss: a handler past the job's time limit fails the job (it is retried); the
          // handler is not stopped, but its place is free again.
          const expired = new Promise<never>((_, reject) => {
            timer = setTimeout(() => reject(new Error(`handler execution exceeded ${expireMs}ms`)), expireMs);
          });
          await Promise.race([runJob({ id: row.id, data: row.data }), expired]);
          clearTimeout(timer);
          await boss.complete(name, row.id);
        } catch (err) {
          clearTimeout(timer);
          await boss.fail(name, row.id, asError(err));
          // Its retry (or its dead letter) becomes due later: find out when.
          scheduleCheck(0);
        }
      })()
        .catch(onError)
        .finally(() => {
          running.delete(row.id);
          if (wanted) void pump();
        });
      running.set(row.id, run);
    }

    async function fetchLoop() {
      try {
        while (wanted && !stopped && running.size < concurrency) {
          wanted = false;
          const limit = Math.min(batchSize, concurrency - running.size);
          const { rows } = await executor.executeSql(FETCH_JOBS, [name, limit]);
          // A full fetch suggests more are waiting: fetch again once places are free.
          if (rows.length >= limit) wanted = true;
          else if (later) {
            // One alarm is kept per queue: the jobs due after it get theirs from a check. A job
            // that became due between this fetch and that check is woken by the check (it has no
            // alarm: only jobs due later get one).
            later = false;
            scheduleCheck(0);
          }
          for (const row of rows) begin(row);
        }
      } catch (err) {
        onError(Object.assign(asError(err), { queue: name }));
        wanted = false;
        worker.wakeIn(pollingMs);
      }
    }

    function pump(): Promise<void> {
      pumping ??= fetchLoop().finally(() => {
        pumping = null;
        // Woken while the last fetch was in flight, with places free: fetch again.
        if (wanted && !stopped && running.size < concurrency) void pump();
      });
      return pumping;
    }

    const worker: Worker = {
      wake() {
        if (stopped || !started) return;
        wanted = true;
        void pump();
      },
      wakeIn(ms) {
        if (stopped) return;
        if (ms <= 0) {
          worker.wake();
          return;
        }
        later = true;
        const at = Date.now() + ms;
        if (alarm && alarm.at <= at) return;
        if (alarm) clearTimeout(alarm.timer);
        alarm = {
          at,
          timer: setTimeout(() => {
            alarm = null;
            worker.wake();
          }, ms),
        };
      },
      async settle(timeoutMs) {
        await pumping;
        const deadline = Date.now() + timeoutMs;
        while (running.size > 0 && Date.now() < deadline) {
          await Promise.race([
            Promise.allSettled([...running.values()]),
            new Promise((r) => setTimeout(r, 50)),
          ]);
        }
        // As pg-boss: jobs still running are handed back to the queue (retried, here or elsewhere).
        for (const id of running.keys())
          await boss.fail(name, id, new Error('pg-boss shut down while active'));
      },
      clear() {
        if (alarm) clearTimeout(alarm.timer);
        alarm = null;
      },
    };
    return worker;
  }

  // ---- checks of every queue ------------------------------------------------------------------

  let check: Alarm | null = null;
  let checking: Promise<void> | null = null;
  let checkAgain = false;

  /** Runs the check of every queue in `ms` (an earlier one stays). */
  function scheduleCheck(ms: number) {
    if (stopped || !started) return;
    const at = Date.now() + ms;
    if (check && check.at <= at) return;
    if (check) clearTimeout(check.timer);
    check = { at, timer: setTimeout(runCheck, ms) };
  }

  function runCheck() {
    check = null;
    if (checking) {
      checkAgain = true;
      return;
    }
    checking = (async () => {
      try {
        const names = [...workers.keys()];
        if (names.length === 0) return;
        const { rows } = await executor.executeSql(NEXT_DUE, [names]);
        for (const row of rows as Array<{ name: string; due_now: boolean; next_ms: number | null }>) {
          const worker = workers.get(row.name);
          if (row.due_now) worker?.wake();
          if (row.next_ms !== null) worker?.wakeIn(Math.max(1, Number(row.next_ms)));
        }
      } catch (err) {
        onError(err);
      }
    })().finally(() => {
      checking = null;
      if (checkAgain) {
        checkAgain = false;
        scheduleCheck(0);
      }
    });
  }

  /** The periodic check: every `idleCheckSeconds` while the LISTEN is live, else every polling interval. */
  let tick: NodeJS.Timeout | null = null;
  function scheduleTick() {
    if (tick) clearTimeout(tick);
    tick = null;
    if (stopped || !started) return;
    tick = setTimeout(() => {
      tick = null;
      scheduleCheck(0);
      scheduleTick();
    }, checkEveryMs());
  }

  // ---- repeated tasks -------------------------------------------------------------------------

  interface Task {
    name: string;
    intervalMs: number;
    task: () => Promise<unknown>;
    alarm: Alarm | null;
    running: Promise<void> | null;
    lastStart: number;
    /** Woken while running: runs again (after its interval). */
    woken: boolean;
  }
  const tasks = new Map<string, Task>();

  function scheduleTask(entry: Task, ms: number) {
    if (stopped || !started) return;
    const at = Date.now() + ms;
    if (entry.alarm && entry.alarm.at <= at) return;
    if (entry.alarm) clearTimeout(entry.alarm.timer);
    entry.alarm = { at, timer: setTimeout(() => runTask(entry), ms) };
  }

  function runTask(entry: Task) {
    entry.alarm = null;
    if (stopped || entry.running) return;
    entry.woken = false;
    entry.lastStart = Date.now();
    entry.running = entry
      .task()
      .catch((err) => {
        onError(Object.assign(asError(err), { task: entry.name }));
        return true;
      })
      .then((result) => {
        entry.running = null;
        const idle = result === false && !entry.woken && live;
        scheduleTask(
          entry,
          idle ? idleCheckMs : Math.max(0, entry.lastStart + entry.intervalMs - Date.now()),
        );
      });
  }

  function wakeTask(entry: Task) {
    if (entry.running) {
      entry.woken = true;
      return;
    }
    scheduleTask(entry, Math.max(0, entry.lastStart + entry.intervalMs - Date.now()));
  }

  // ---- notifications --------------------------------------------------------------------------

  function onNotice(payload: string) {
    if (stopped) return;
    const space = payload.indexOf(' ');
    const name = space < 0 ? payload : payload.slice(0, space);
    const worker = workers.get(name);
    if (worker) worker.wakeIn(space < 0 ? 0 : Number(payload.slice(space + 1)) || 0);
    const task = tasks.get(name);
    if (task) wakeTask(task);
  }

  function setLive(value: boolean) {
    live = value;
    if (value || stopped || !started) return;
    // No notification reaches this process any more: poll until the LISTEN is back.
    scheduleTick();
    for (const entry of tasks.values()) if (!entry.running) scheduleTask(entry, entry.intervalMs);
  }

  if (wakeups) {
    wakeups.onListening(JOBS_CHANNEL, setLive);
    // Notifications sent while the LISTEN was down are lost: look at everything once.
    wakeups.onReconnect(() => {
      if (stopped || !started) return;
      scheduleCheck(0);
      for (const entry of tasks.values()) wakeTask(entry);
    });
  }
  // Maintenance here may have failed expired jobs into retry (or their dead letters).
  boss.on('maintenance', () => scheduleCheck(0));

  async function startWorker<T extends object>(
    name: string,
    handler: (job: Job<T>) => Promise<void>,
    workOptions: WorkOptions,
  ) {
    await ensureQueue(name);
    const worker = createWorker(name, handler, workOptions);
    workers.set(name, worker);
    worker.wake();
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
      const id = await boss.send(name, data, bossOptions);
      // The insert announced itself; without a LISTEN, a job sent outside a transaction is woken
      // here at once (one sent in a transaction waits for the next check).
      if (!live && !executor && id) {
        const delayMs =
          startAfter === undefined
            ? 0
            : startAfter instanceof Date
              ? startAfter.getTime() - Date.now()
              : startAfter * 1000;
        workers.get(name)?.wakeIn(delayMs);
      }
      return id;
    },
    async work(name, handler, workOptions = {}) {
      if (workers.has(name)) throw new Error(`jobs.work: queue ${name} is already worked`);
      const run = () => startWorker(name, handler, workOptions);
      if (started) await run();
      else pendingWork.push(run);
    },
    repeat(name, intervalMs, task) {
      const entry: Task = { name, intervalMs, task, alarm: null, running: null, lastStart: 0, woken: false };
      tasks.set(name, entry);
      if (started) scheduleTask(entry, intervalMs);
    },
    async start() {
      if (started || stopped) return;
      await startSerialized(database, () => boss.start());
      if (wakeups) await wakeups.listen(JOBS_CHANNEL, onNotice).catch(onError);
      started = true;
      // Recover at once the expired jobs of processes that died, rather than a maintenance interval later.
      await boss.maintain().catch(onError);
      for (const run of pendingWork.splice(0)) await run();
      for (const entry of tasks.values()) scheduleTask(entry, entry.intervalMs);
      // Jobs retried later (e.g. just expired by that maintenance) get their alarms.
      scheduleCheck(0);
      scheduleTick();
    },
    async stop() {
      if (stopped) return;
      stopped = true;
      if (!started) return;
      if (check) clearTimeout(check.timer);
      check = null;
      if (tick) clearTimeout(tick);
      tick = null;
      for (const entry of tasks.values()) if (entry.alarm) clearTimeout(entry.alarm.timer);
      for (const worker of workers.values()) worker.clear();
      await Promise.allSettled([...tasks.values()].map((entry) => entry.running));
      await checking;
      const timeoutMs = options.stopTimeoutMs ?? 10_000;
      await Promise.allSettled([...workers.values()].map((worker) => worker.settle(timeoutMs)));
      await boss.stop({ graceful: false, close: false });
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
