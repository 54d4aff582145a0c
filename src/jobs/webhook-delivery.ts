import { and, eq, gt, ne, sql } from 'drizzle-orm';
import type { FastifyBaseLogger } from 'fastify';
import { Webhook } from 'standardwebhooks';
import type { Config } from '../config.js';
import type { SecretBox } from '../crypto/secret-box.js';
import type { Database, Queryable } from '../db/client.js';
import { projectWebhooks, webhookDeliveries } from '../db/schema/index.js';
import type { ServiceMetrics, WebhookOutcomeLabel } from '../telemetry/metrics.js';
import { withSpan } from '../telemetry/tracing.js';
import type { JobQueue } from './queue.js';
import { type PostOutcome, postWebhook } from './webhook-http.js';

export const DELIVER_QUEUE = 'webhooks-deliver';

/** DESIGN.md 4: a receiver gets 10 s per attempt. */
export const ATTEMPT_TIMEOUT_MS = 10_000;
/** At most this many attempts in flight per webhook, across every process. */
export const MAX_IN_FLIGHT_PER_WEBHOOK = 4;
/** Retries continue for about a day after a delivery is created (or redelivered). */
export const RETRY_WINDOW_HOURS = 24;
/** Longest wait between two attempts, as a multiple of WEBHOOK_RETRY_BASE_MS (1 h at the default 10 s). */
const MAX_DELAY_FACTOR = 360;
/** An attempt holds its lease this long; longer than the attempt timeout plus bookkeeping. */
export const LEASE_SECONDS = 30;
/** Namespace of the per-webhook advisory lock (the other key is the webhook id). */
const LOCK_NAMESPACE = 0x77686b;

export interface DeliveryDeps {
  config: Config;
  database: Database;
  secrets: SecretBox;
  jobs: JobQueue;
  metrics: ServiceMetrics;
}

/** Where failed attempts are reported (a receiver's error is the customer's to fix: a warning). */
type AttemptLog = Pick<FastifyBaseLogger, 'warn'>;

export interface DeliverJob {
  deliveryId: number;
  /** The delivery's `schedule_seq` when this job was scheduled. */
  seq: number;
}

/**
 * Delay before attempt n+1 after n failed attempts: exponential from the base, capped, with
 * ±25% jitter so receivers recovering from an outage are not hit in lockstep.
 */
export function retryDelayMs(failedAttempts: number, baseMs: number, random: () => number = Math.random) {
  const exponential = baseMs * 2 ** Math.min(Math.max(failedAttempts - 1, 0), 30);
  const capped = Math.min(exponential, baseMs * MAX_DELAY_FACTOR);
  return Math.max(1, Math.round(capped * (0.75 + random() * 0.5)));
}

/** Enqueues an attempt of a delivery; with `db` a transaction, it commits with the caller's rows. */
export function scheduleAttempt(
  jobs: JobQueue,
  job: DeliverJob,
  options: { db?: Queryable; delayMs?: number } = {},
) {
  return jobs.send(DELIVER_QUEUE, job, {
    db: options.db,
    ...(options.delayMs ? { startAfter: options.delayMs / 1000 } : {}),
    // pg-boss retries only cover a process dying mid-attempt; delivery retries are scheduled here.
    retryLimit: 5,
    retryDelay: 5,
    retryBackoff: true,
    expireInSeconds: LEASE_SECONDS * 2,
  });
}

/** The Standard Webhooks headers for one attempt: a fresh timestamp, the same `webhook-id`. */
export function signedHeaders(secret: string, messageId: string, body: string, at = new Date()) {
  const signature = new Webhook(secret).sign(messageId, at, body);
  return {
    'webhook-id': messageId,
    'webhook-timestamp': String(Math.floor(at.getTime() / 1000)),
    'webhook-signature': signature,
  };
}

export function deliveryBody(eventName: string, eventData: Record<string, unknown>): string {
  return JSON.stringify({ event_name: eventName, event_data: eventData });
}

type Claim =
  | { kind: 'skip' }
  | { kind: 'deferred' }
  | {
      kind: 'attempt';
      organizationId: number;
      projectId: number | null;
      webhookId: number;
      messageId: string;
      eventName: string;
      eventData: Record<string, unknown>;
      url: string;
      secretEncrypted: string;
    };

/**
 * Runs one attempt of a delivery job: claim a lease (bounded per webhook), POST outside any
 * transaction, then record the outcome and, on failure, schedule the next attempt in the same
 * transaction. Returns what happened, for callers that attempt inline (the test endpoint).
 */
export async function attemptDelivery(
  deps: DeliveryDeps,
  job: DeliverJob,
  log?: AttemptLog,
): Promise<Claim['kind']> {
  const { db } = deps.database;
  const claim = await db.transaction(async (tx): Promise<Claim> => {
    const [row] = await tx
      .select({
        status: webhookDeliveries.status,
        seq: webhookDeliveries.scheduleSeq,
        organizationId: webhookDeliveries.organizationId,
        projectId: webhookDeliveries.projectId,
        webhookId: webhookDeliveries.webhookId,
        messageId: webhookDeliveries.messageId,
        eventName: webhookDeliveries.eventName,
        eventData: webhookDeliveries.eventData,
        leased: sql<boolean>`coalesce(${webhookDeliveries.leasedUntil} > now(), false)`,
      })
      .from(webhookDeliveries)
      .where(eq(webhookDeliveries.id, job.deliveryId))
      .for('update');
    // Delivered, failed, deleted with its webhook, or superseded by a later schedule.
    if (!row) return { kind: 'skip' };
    if (row.status !== 'pending' || row.seq !== job.seq) return { kind: 'skip' };
    if (row.leased) {
      // Another attempt of this delivery is in flight (a job retried after its process died).
      await scheduleAttempt(deps.jobs, job, { db: tx, delayMs: LEASE_SECONDS * 1000 });
      return { kind: 'deferred' };
    }
    await tx.execute(sql`select pg_advisory_xact_lock(${LOCK_NAMESPACE}, ${row.webhookId})`);
    const [{ inFlight }] = await tx
      .select({ inFlight: sql<number>`count(*)::int` })
      .from(webhookDeliveries)
      .where(
        and(
          eq(webhookDeliveries.webhookId, row.webhookId),
          ne(webhookDeliveries.id, job.deliveryId),
          gt(webhookDeliveries.leasedUntil, sql`now()`),
        ),
      );
    if (inFlight >= MAX_IN_FLIGHT_PER_WEBHOOK) {
      await scheduleAttempt(deps.jobs, job, { db: tx, delayMs: 1000 + Math.random() * 2000 });
      return { kind: 'deferred' };
    }
    const [webhook] = await tx
      .select({ url: projectWebhooks.url, secretEncrypted: projectWebhooks.secretEncrypted })
      .from(projectWebhooks)
      .where(eq(projectWebhooks.id, row.webhookId));
    if (!webhook) return { kind: 'skip' };
    await tx
      .update(webhookDeliveries)
      .set({ leasedUntil: sql`now() + make_interval(secs => ${LEASE_SECONDS})` })
      .where(eq(webhookDeliveries.id, job.deliveryId));
    return {
      kind: 'attempt',
      organizationId: row.organizationId,
      projectId: row.projectId,
      webhookId: row.webhookId,
      messageId: row.messageId,
      eventName: row.eventName,
      eventData: row.eventData,
      ...webhook,
    };
  });
  if (claim.kind !== 'attempt') return claim.kind;

  const outcome = await send(deps, claim);
  if (!outcome.ok) {
    log?.warn(
      {
        organization_id: claim.organizationId,
        project_id: claim.projectId,
        webhook_id: claim.webhookId,
        delivery_id: job.deliveryId,
        webhook_message_id: claim.messageId,
        event_name: claim.eventName,
        status_code: outcome.statusCode,
        error: outcome.error,
      },
      'webhook delivery attempt failed',
    );
  }
  await recordOutcome(deps, job, outcome);
  return 'attempt';
}

async function send(deps: DeliveryDeps, claim: Extract<Claim, { kind: 'attempt' }>): Promise<PostOutcome> {
  let headers: Record<string, string>;
  const body = deliveryBody(claim.eventName, claim.eventData);
  try {
    headers = signedHeaders(deps.secrets.decrypt(claim.secretEncrypted), claim.messageId, body);
  } catch (err) {
    // A secret that cannot be read (SECRET_KEY changed) fails the attempt like a receiver error.
    return {
      ok: false,
      statusCode: null,
      error: `could not sign the delivery: ${err instanceof Error ? err.message : String(err)}`,
    };
  }
  return withSpan(
    'webhook.deliver',
    {
      'scriptorium.webhook.event': claim.eventName,
      'scriptorium.webhook.message_id': claim.messageId,
    },
    async (span) => {
      const outcome = await postWebhook(claim.url, body, headers, {
        allowPrivate: deps.config.outboundAllowPrivate,
        timeoutMs: ATTEMPT_TIMEOUT_MS,
      });
      span.setAttributes({
        'http.response.status_code': outcome.statusCode ?? 0,
        ...(outcome.ok ? {} : { 'error.type': outcome.error ?? 'failed' }),
      });
      return outcome;
    },
  );
}

async function recordOutcome(deps: DeliveryDeps, job: DeliverJob, outcome: PostOutcome) {
  const recorded = await deps.database.db.transaction(async (tx): Promise<WebhookOutcomeLabel | null> => {
    const [row] = await tx
      .select({
        seq: webhookDeliveries.scheduleSeq,
        status: webhookDeliveries.status,
        attemptCount: webhookDeliveries.attemptCount,
      })
      .from(webhookDeliveries)
      .where(eq(webhookDeliveries.id, job.deliveryId))
      .for('update');
    if (!row) return null;
    const attempt = {
      attemptCount: sql`${webhookDeliveries.attemptCount} + 1`,
      lastStatusCode: outcome.statusCode,
      lastError: outcome.error,
      lastAttemptAt: sql`now()`,
      leasedUntil: null,
      updatedAt: sql`now()`,
    };
    const where = eq(webhookDeliveries.id, job.deliveryId);
    if (outcome.ok) {
      await tx
        .update(webhookDeliveries)
        .set({ ...attempt, status: 'delivered', deliveredAt: sql`now()`, nextAttemptAt: null })
        .where(where);
      return 'delivered';
    }
    // Redelivered while this attempt ran: the newer schedule owns the next attempt.
    if (row.seq !== job.seq || row.status !== 'pending') {
      await tx.update(webhookDeliveries).set(attempt).where(where);
      return 'superseded';
    }
    const delayMs = retryDelayMs(row.attemptCount + 1, deps.config.webhookRetryBaseMs);
    const delay = sql`make_interval(secs => ${delayMs / 1000})`;
    const [next] = await tx
      .update(webhookDeliveries)
      .set({
        ...attempt,
        status: sql`case when now() + ${delay} > ${webhookDeliveries.retryUntil} then 'failed' else 'pending' end`,
        nextAttemptAt: sql`case when now() + ${delay} > ${webhookDeliveries.retryUntil} then null else now() + ${delay} end`,
        scheduleSeq: sql`${webhookDeliveries.scheduleSeq} + 1`,
      })
      .where(where)
      .returning({ status: webhookDeliveries.status, seq: webhookDeliveries.scheduleSeq });
    if (next.status === 'pending') {
      await scheduleAttempt(deps.jobs, { deliveryId: job.deliveryId, seq: next.seq }, { db: tx, delayMs });
      return 'retrying';
    }
    return 'failed';
  });
  if (recorded) deps.metrics.webhookAttempt(recorded);
}
