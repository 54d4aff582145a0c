import { randomUUID } from 'node:crypto';
import { and, count, desc, eq, isNull, sql } from 'drizzle-orm';
import { recordAudit } from '../../audit/record.js';
import type { ServiceContext } from '../../core/context.js';
import type { AppDeps } from '../../core/deps.js';
import { projectWebhooks, type WebhookDeliveryRow, webhookDeliveries } from '../../db/schema/index.js';
import { notFound } from '../../http/errors.js';
import { offsetOf, type PageQuery } from '../../http/pagination.js';
import { messageIdOf } from '../../jobs/outbox-dispatch.js';
import {
  attemptDelivery,
  LEASE_SECONDS,
  RETRY_WINDOW_HOURS,
  scheduleAttempt,
} from '../../jobs/webhook-delivery.js';
import { findProjectFor } from '../../policies/projects.js';
import { requireAdmin, requireAdminToRead } from '../../policies/roles.js';

export const TEST_EVENT_NAME = 'webhook_test';

/** Whose webhook: a project's (its id), or the organization's own (`null`: admins only). */
export type WebhookOwner = number | null;

/** The webhook of a project the key may use, or an organization webhook; 404 for anything else (never revealing other orgs'). */
async function findWebhook(ctx: ServiceContext, owner: WebhookOwner, webhookId: number) {
  if (owner === null) {
    // Writes (redeliver, test) check requireAdmin before; here the read's refusal.
    requireAdminToRead(ctx.principal, "the organization's webhooks");
  } else {
    const found = await findProjectFor(ctx.db, ctx.principal, owner);
    if (!found?.allowed) throw notFound('Project');
  }
  const [webhook] = await ctx.db
    .select({ id: projectWebhooks.id, projectId: projectWebhooks.projectId })
    .from(projectWebhooks)
    .where(
      and(
        eq(projectWebhooks.id, webhookId),
        owner === null ? isNull(projectWebhooks.projectId) : eq(projectWebhooks.projectId, owner),
        eq(projectWebhooks.organizationId, ctx.principal.organizationId),
      ),
    );
  if (!webhook) throw notFound('Webhook');
  return webhook;
}

async function deliveryById(
  ctx: ServiceContext,
  webhookId: number,
  deliveryId: number,
): Promise<WebhookDeliveryRow> {
  const [row] = await ctx.db
    .select()
    .from(webhookDeliveries)
    .where(
      and(
        eq(webhookDeliveries.id, deliveryId),
        eq(webhookDeliveries.webhookId, webhookId),
        eq(webhookDeliveries.organizationId, ctx.principal.organizationId),
      ),
    );
  if (!row) throw notFound('Delivery');
  return row;
}

/** Newest first: the log answers "what happened lately". */
export async function listDeliveries(
  ctx: ServiceContext,
  projectId: WebhookOwner,
  webhookId: number,
  page: PageQuery,
) {
  const webhook = await findWebhook(ctx, projectId, webhookId);
  const where = eq(webhookDeliveries.webhookId, webhook.id);
  const [rows, [{ total }]] = await Promise.all([
    ctx.db
      .select()
      .from(webhookDeliveries)
      .where(where)
      .orderBy(desc(webhookDeliveries.id))
      .limit(page.page_size)
      .offset(offsetOf(page)),
    ctx.db.select({ total: count() }).from(webhookDeliveries).where(where),
  ]);
  return { rows, total };
}

/**
 * Sends a delivery again, now, with the same `webhook-id` and a fresh retry window: receivers that
 * processed it already can drop it. A superseded schedule (a pending retry) does nothing.
 */
export async function redeliver(
  ctx: ServiceContext,
  jobs: AppDeps['jobs'],
  projectId: WebhookOwner,
  webhookId: number,
  deliveryId: number,
): Promise<WebhookDeliveryRow> {
  requireAdmin(ctx.principal);
  const webhook = await findWebhook(ctx, projectId, webhookId);
  const existing = await deliveryById(ctx, webhook.id, deliveryId);
  return ctx.db.transaction(async (tx) => {
    const [row] = await tx
      .update(webhookDeliveries)
      .set({
        status: 'pending',
        scheduleSeq: sql`${webhookDeliveries.scheduleSeq} + 1`,
        nextAttemptAt: sql`now()`,
        deliveredAt: null,
        // Test events get one attempt per send, like the first.
        retryUntil:
          existing.eventId === null ? sql`now()` : sql`now() + make_interval(hours => ${RETRY_WINDOW_HOURS})`,
        updatedAt: sql`now()`,
      })
      .where(eq(webhookDeliveries.id, existing.id))
      .returning();
    await scheduleAttempt(jobs, { deliveryId: row.id, seq: row.scheduleSeq }, { db: tx });
    await recordAudit(tx, ctx, {
      action: 'webhook.redelivered',
      resource: { type: 'webhook', id: webhook.id },
    });
    return row;
  });
}

/**
 * A signed `webhook_test` delivery, attempted at once so the caller sees the receiver's answer.
 * A job is enqueued with it, so a crash mid-attempt still ends in an attempt; test events are
 * not retried (redeliver sends one again).
 */
export async function sendTestEvent(
  ctx: ServiceContext,
  deps: AppDeps,
  projectId: WebhookOwner,
  webhookId: number,
): Promise<WebhookDeliveryRow> {
  requireAdmin(ctx.principal);
  const webhook = await findWebhook(ctx, projectId, webhookId);
  const created = await ctx.db.transaction(async (tx) => {
    const [row] = await tx
      .insert(webhookDeliveries)
      .values({
        organizationId: ctx.principal.organizationId,
        projectId: webhook.projectId,
        webhookId: webhook.id,
        eventId: null,
        messageId: messageIdOf(randomUUID()),
        eventName: TEST_EVENT_NAME,
        eventData: {
          ...(webhook.projectId === null ? {} : { project_id: webhook.projectId }),
          webhook_id: webhook.id,
          message: 'A test event from Scriptorium: the signature and your endpoint work.',
        },
        retryUntil: sql`now()`,
        nextAttemptAt: sql`now()`,
      })
      .returning();
    // The safety net fires only after an inline attempt's lease would have ended, so the inline
    // attempt always gets the claim; after it, the job finds the delivery settled.
    await scheduleAttempt(
      deps.jobs,
      { deliveryId: row.id, seq: 0 },
      { db: tx, delayMs: LEASE_SECONDS * 1000 },
    );
    await recordAudit(tx, ctx, { action: 'webhook.tested', resource: { type: 'webhook', id: webhook.id } });
    return row;
  });
  await attemptDelivery(deps, { deliveryId: created.id, seq: 0 }, ctx.log);
  return deliveryById(ctx, webhook.id, created.id);
}
