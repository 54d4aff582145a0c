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
  deps.jobs.repeat('webhooks-outbox', options.outboxIntervalMs ?? 1000, () => drainOutbox(deps));
  // Queued chat messages whose chat is free (their accepting process may have died): started here.
  deps.jobs.repeat('chat-queue', options.queueSweepIntervalMs ?? 1000, () => deps.chatQueue.sweep());

  // Up to 10 attempts run together per poll; each has its own 10 s deadline.
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
    { batchSize: 10 },
  );

  // Generations run for minutes: independent loops, so one long run does not hold up the next.
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
