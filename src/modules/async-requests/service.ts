import { randomUUID } from 'node:crypto';
import { and, eq, inArray, sql } from 'drizzle-orm';
import type { FastifyBaseLogger } from 'fastify';
import { type ServiceContext, serviceContext } from '../../core/context.js';
import type { AppDeps } from '../../core/deps.js';
import {
  type AsyncRequestKind,
  type AsyncRequestRow,
  asyncRequests,
  webhookEvents,
} from '../../db/schema/index.js';
import { conflict, notFound, toApiError } from '../../http/errors.js';
import { recordEvent } from '../../jobs/outbox.js';
import { findProjectFor } from '../../policies/projects.js';
import {
  type GenerateArtifactInput,
  prepareGeneration,
  prepareRefinement,
  type RefineArtifactInput,
  runGeneration,
  runRefinement,
} from '../artifacts/generation.js';
import type { AsyncAcceptedResponse } from './schemas.js';

export const ASYNC_ARTIFACT_QUEUE = 'artifacts-async';
/** Receives requests whose job ran out of retries (its processes kept dying): they end as failed. */
export const ASYNC_ARTIFACT_FAILED_QUEUE = 'artifacts-async-failed';

export interface AsyncArtifactJob {
  requestId: string;
}

const OUTCOME: Record<AsyncRequestKind, { status: 'generated' | 'refined'; event: string }> = {
  generate: { status: 'generated', event: 'artifact_generated' },
  refine: { status: 'refined', event: 'artifact_refined' },
};

interface Accepted {
  kind: AsyncRequestKind;
  projectId: number;
  artifactTypeSlug: string;
  artifactId: number | null;
  input: Record<string, unknown>;
}

/**
 * Stores an accepted request and its job in one transaction: once the client has its id, the work
 * happens even if this process dies the next moment.
 */
async function accept(ctx: ServiceContext, jobs: AppDeps['jobs'], id: string, accepted: Accepted) {
  const { principal } = ctx;
  await ctx.db.transaction(async (tx) => {
    await tx.insert(asyncRequests).values({
      id,
      organizationId: principal.organizationId,
      projectId: accepted.projectId,
      kind: accepted.kind,
      artifactTypeSlug: accepted.artifactTypeSlug,
      artifactId: accepted.artifactId,
      input: accepted.input,
      principal: {
        kind: principal.kind,
        keyId: principal.keyId,
        userId: principal.userId,
        role: principal.role,
      },
    });
    await jobs.send(ASYNC_ARTIFACT_QUEUE, { requestId: id } satisfies AsyncArtifactJob, {
      db: tx,
      // A retry only follows a process dying mid-run (failures end the request as failed).
      retryLimit: 2,
      retryDelay: 2,
      retryBackoff: true,
      // The model has REPLY_TIMEOUT_MS; past this margin the run is presumed dead and retried.
      expireInSeconds: Math.ceil(ctx.config.replyTimeoutMs / 1000) + 120,
      deadLetter: ASYNC_ARTIFACT_FAILED_QUEUE,
    });
  });
}

/** `fire_and_forget: true` on generate: every synchronous check of the blocking call, then accept. */
export async function acceptGeneration(
  ctx: ServiceContext,
  jobs: AppDeps['jobs'],
  input: GenerateArtifactInput,
): Promise<AsyncAcceptedResponse> {
  const prepared = await prepareGeneration(ctx, input);
  const id = randomUUID();
  await accept(ctx, jobs, id, {
    kind: 'generate',
    projectId: prepared.project.id,
    artifactTypeSlug: prepared.artifactType.slug,
    artifactId: null,
    input: { ...input, asyncEventId: id },
  });
  return {
    message: 'Artifact generation accepted; a webhook reports the result',
    api_async_create_event_id: id,
  };
}

/** `fire_and_forget: true` on refine. */
export async function acceptRefinement(
  ctx: ServiceContext,
  jobs: AppDeps['jobs'],
  input: RefineArtifactInput,
): Promise<AsyncAcceptedResponse> {
  const prepared = await prepareRefinement(ctx, input);
  const id = randomUUID();
  await accept(ctx, jobs, id, {
    kind: 'refine',
    projectId: prepared.project.id,
    artifactTypeSlug: prepared.artifact.artifactTypeSlug,
    artifactId: prepared.artifact.id,
    input: { ...input, asyncEventId: id },
  });
  return {
    message: 'Artifact refinement accepted; a webhook reports the result',
    api_async_create_event_id: id,
  };
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export async function getAsyncRequest(ctx: ServiceContext, id: string): Promise<AsyncRequestRow> {
  // The column is a uuid: an id of another form names no request (and must not reach the cast).
  if (!UUID.test(id)) throw notFound('Async request');
  const [row] = await ctx.db
    .select()
    .from(asyncRequests)
    .where(and(eq(asyncRequests.id, id), eq(asyncRequests.organizationId, ctx.principal.organizationId)));
  // Requests of projects the key may not use are as invisible as the projects.
  const project = row ? await findProjectFor(ctx.db, ctx.principal, row.projectId) : null;
  if (!row || !project?.allowed) throw notFound('Async request');
  return row;
}

async function settle(deps: AppDeps, row: AsyncRequestRow, artifactId: number) {
  await deps.database.db
    .update(asyncRequests)
    .set({ status: OUTCOME[row.kind].status, artifactId, error: null, updatedAt: sql`now()` })
    .where(and(eq(asyncRequests.id, row.id), eq(asyncRequests.status, 'accepted')));
}

/**
 * The artifact code records its event in the transaction that writes the artifact. If that
 * committed but the process died before the request was marked, the event tells the outcome:
 * running the model again would make a second artifact.
 */
async function settleFromOutbox(deps: AppDeps, row: AsyncRequestRow): Promise<boolean> {
  const [event] = await deps.database.db
    .select({ eventData: webhookEvents.eventData })
    .from(webhookEvents)
    .where(
      and(
        eq(webhookEvents.organizationId, row.organizationId),
        inArray(webhookEvents.eventName, ['artifact_generated', 'artifact_refined']),
        sql`${webhookEvents.eventData}->>'api_async_create_event_id' = ${row.id}`,
      ),
    )
    .limit(1);
  if (!event) return false;
  await settle(deps, row, Number(event.eventData.artifact_id));
  return true;
}

/**
 * Marks the request failed and records `artifact_generation_failed` in the same transaction; the
 * event carries `reason` (an addition to the spec's fields). False when it had already ended.
 */
async function fail(
  deps: Pick<AppDeps, 'database'>,
  row: AsyncRequestRow,
  message: string,
): Promise<boolean> {
  return deps.database.db.transaction(async (tx) => {
    const updated = await tx
      .update(asyncRequests)
      .set({ status: 'failed', error: message, updatedAt: sql`now()` })
      .where(and(eq(asyncRequests.id, row.id), eq(asyncRequests.status, 'accepted')))
      .returning({ id: asyncRequests.id });
    if (updated.length === 0) return false;
    await recordEvent(tx, {
      organizationId: row.organizationId,
      projectId: row.projectId,
      eventName: 'artifact_generation_failed',
      eventData: {
        api_async_create_event_id: row.id,
        project_id: row.projectId,
        artifact_type_slug: row.artifactTypeSlug,
        reason: message,
      },
    });
    return true;
  });
}

export const CANCELLED = 'Cancelled by the client';
const CANCEL_POLL_MS = 500;

/**
 * Cancels an accepted request (issue 9): it ends as failed with `artifact_generation_failed`
 * carrying the cancellation reason. A job not started yet never runs; a running one notices
 * within CANCEL_POLL_MS (from any process) and aborts its model call. 409 once it has ended.
 */
export async function cancelAsyncRequest(ctx: ServiceContext, id: string): Promise<AsyncRequestRow> {
  const row = await getAsyncRequest(ctx, id);
  if (row.status !== 'accepted' || !(await fail(ctx, row, CANCELLED))) {
    throw conflict(`The request has already ended (${row.status})`, 'async_request_not_running');
  }
  return getAsyncRequest(ctx, id);
}

/** Aborts `controller` once the request is no longer accepted (cancelled from any process). */
function watchForCancel(deps: AppDeps, requestId: string, controller: AbortController): () => void {
  const timer = setInterval(() => {
    acceptedRequest(deps, requestId)
      .then((row) => {
        if (!row) controller.abort(new Error(CANCELLED));
      })
      .catch(() => {});
  }, CANCEL_POLL_MS);
  timer.unref();
  return () => clearInterval(timer);
}

async function acceptedRequest(deps: AppDeps, requestId: string) {
  const [row] = await deps.database.db.select().from(asyncRequests).where(eq(asyncRequests.id, requestId));
  return row?.status === 'accepted' ? row : null;
}

/**
 * The job: the same generation or refinement code as the blocking endpoints, acting as the key
 * that made the request. Every check runs again (the skill or the credits may have gone since).
 * A failure ends the request as failed; only an error while recording that is thrown (retried).
 */
export async function runAsyncRequest(deps: AppDeps, requestId: string, log: FastifyBaseLogger) {
  const row = await acceptedRequest(deps, requestId);
  if (!row || (await settleFromOutbox(deps, row))) return;
  const ctx = serviceContext(
    deps,
    { ...row.principal, organizationId: row.organizationId },
    log.child({
      organization_id: row.organizationId,
      project_id: row.projectId,
      api_async_create_event_id: row.id,
    }),
  );
  const controller = new AbortController();
  const stopWatching = watchForCancel(deps, row.id, controller);
  // Bounded like a blocking request: the job itself expires a little after REPLY_TIMEOUT_MS.
  const options = {
    families: deps.toolFamilies,
    signal: controller.signal,
    deadlineMs: deps.config.replyTimeoutMs,
  };
  let artifactId: number;
  try {
    if (row.kind === 'generate') {
      const input = row.input as unknown as GenerateArtifactInput;
      artifactId = (await runGeneration(ctx, await prepareGeneration(ctx, input), options)).artifact.id;
    } else {
      const input = row.input as unknown as RefineArtifactInput;
      artifactId = (await runRefinement(ctx, await prepareRefinement(ctx, input), options)).artifact.id;
    }
  } catch (err) {
    // A cancelled request has already been marked failed, with its event.
    if (controller.signal.aborted) return;
    const apiError = toApiError('v1', err);
    // Every failure is logged (the client sees only the webhook); ours at error level.
    ctx.log[apiError.status >= 500 ? 'error' : 'warn'](
      { err, status: apiError.status, code: apiError.code },
      'fire-and-forget artifact request failed',
    );
    await fail(deps, row, apiError.message);
    return;
  } finally {
    stopWatching();
  }
  await settle(deps, row, artifactId);
}

/** Retries exhausted (the processes running it kept dying): the request ends as failed. */
export async function failAbandonedRequest(deps: AppDeps, requestId: string) {
  const row = await acceptedRequest(deps, requestId);
  if (!row || (await settleFromOutbox(deps, row))) return;
  await fail(deps, row, 'The background job stopped before finishing, repeatedly; send the request again');
}
