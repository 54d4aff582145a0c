import type { FastifyBaseLogger } from 'fastify';
import type { AppDeps } from '../core/deps.js';
import { registerDocumentWorker } from '../knowledge/worker.js';
import {
  ASYNC_ARTIFACT_FAILED_QUEUE,
  ASYNC_ARTIFACT_QUEUE,
  type AsyncArtifactJob,
  failAbandonedRequest,
  runAsyncRequest,
} from '../modules/async-requests/service.js';
import { drainOutbox } from './outbox-dispatch.js';
import { attemptDelivery, DELIVER_QUEUE, type DeliverJob } from './webhook-delivery.js';

/** The repeated tasks' names: the payloads that wake them on JOBS_CHANNEL (see the migration). */
export const OUTBOX_TASK = 'webhooks-outbox';
export const CHAT_QUEUE_TASK = 'chat-queue';

export interface WorkerOptions {
  /** How often this process looks for undispatched webhook events. */
  outboxIntervalMs?: number;
  /** How often this process looks for queued chat messages whose chat is free. */
  queueSweepIntervalMs?: number;
}

/**
 * Registers every background job handler on `deps.jobs`. The server, the worker-only process
 * (`cli worker`) and the test apps call it before `jobs.start()`, so all of them share the work.
 */
export async function registerWorkers(
  deps: AppDeps,
  log: FastifyBaseLogger,
  options: WorkerOptions = {},
): Promise<void> {
  await registerDocumentWorker(deps, log);
  // Woken by the insert of an event (trigger, migration 0017); at most once per interval.
  deps.jobs.repeat(OUTBOX_TASK, options.outboxIntervalMs ?? 1000, async () => (await drainOutbox(deps)) > 0);
  // Queued chat messages whose chat is free (their accepting process may have died, or their
  // turn's lease ran out): started here. Swept every interval while messages wait; otherwise
  // idle until a message is queued (trigger, migration 0017).
  deps.jobs.repeat(CHAT_QUEUE_TASK, options.queueSweepIntervalMs ?? 1000, async () => {
    if (!(await messagesWait(deps))) return false;
    await deps.chatQueue.sweep();
    return true;
  });

  // Up to 10 attempts run together; each has its own 10 s deadline.
  await deps.jobs.work<DeliverJob>(
    DELIVER_QUEUE,
    async (job) => {
      try {
        await attemptDelivery(deps, job.data, log);
      } catch (err) {
        log.error(
          { err, queue: DELIVER_QUEUE, job_id: job.id, delivery_id: job.data.deliveryId },
          'webhook delivery job failed; pg-boss retries it',
        );
        throw err;
      }
    },
    { concurrency: 10 },
  );

  // Generations run for minutes: several at once, so one long run does not hold up the next.
  await deps.jobs.work<AsyncArtifactJob>(
    ASYNC_ARTIFACT_QUEUE,
    (job) =>
      logJobFailure(
        log,
        ASYNC_ARTIFACT_QUEUE,
        job.id,
        { api_async_create_event_id: job.data.requestId },
        () => runAsyncRequest(deps, job.data.requestId, log),
      ),
    { concurrency: deps.database.kind === 'postgres' ? 8 : 4 },
  );
  await deps.jobs.work<AsyncArtifactJob>(ASYNC_ARTIFACT_FAILED_QUEUE, (job) =>
    logJobFailure(
      log,
      ASYNC_ARTIFACT_FAILED_QUEUE,
      job.id,
      { api_async_create_event_id: job.data.requestId },
      () => failAbandonedRequest(deps, job.data.requestId),
    ),
  );
}

/** Whether any chat message waits in a busy queue (the partial index of waiting messages). */
async function messagesWait(deps: AppDeps): Promise<boolean> {
  const { rows } = await deps.database.query<{ waiting: boolean }>(
    `select exists (select 1 from chat_queued_messages where status = 'queued') as waiting`,
  );
  return rows[0]?.waiting === true;
}

/** A job handler that threw (pg-boss retries it): logged with its queue, job and request ids. */
async function logJobFailure(
  log: FastifyBaseLogger,
  queue: string,
  jobId: string,
  ids: Record<string, unknown>,
  run: () => Promise<void>,
): Promise<void> {
  try {
    await run();
  } catch (err) {
    log.error({ err, queue, job_id: jobId, ...ids }, 'background job failed; pg-boss retries it');
    throw err;
  }
}
