import { randomBytes } from 'node:crypto';
import { and, count, eq, isNull } from 'drizzle-orm';
import { fieldsOf, recordAudit } from '../../audit/record.js';
import type { ServiceContext } from '../../core/context.js';
import { projectWebhooks, type WebhookEventName } from '../../db/schema/index.js';
import { notFound, unprocessable } from '../../http/errors.js';
import { offsetOf, type PageQuery } from '../../http/pagination.js';
import { checkOutboundUrl, OutboundUrlError } from '../../net/outbound.js';
import { findProjectFor } from '../../policies/projects.js';
import { requireAdmin, requireAdminToRead } from '../../policies/roles.js';
import { type CreateWebhookBody, ORGANIZATION_WEBHOOK_EVENTS, WEBHOOK_EVENTS } from './schemas.js';

/** Standard Webhooks secret format: `whsec_` + base64 of random bytes (32 here; the spec allows 24-64). */
export const newWebhookSecret = () => `whsec_${randomBytes(32).toString('base64')}`;

async function visibleProjectId(ctx: ServiceContext, projectId: number): Promise<number> {
  const found = await findProjectFor(ctx.db, ctx.principal, projectId);
  if (!found?.allowed) throw notFound('Project');
  return found.project.id;
}

const ofProject = (ctx: ServiceContext, projectId: number) =>
  and(
    eq(projectWebhooks.organizationId, ctx.principal.organizationId),
    eq(projectWebhooks.projectId, projectId),
  )!;

export async function listWebhooks(ctx: ServiceContext, projectId: number, page: PageQuery) {
  await visibleProjectId(ctx, projectId);
  const where = ofProject(ctx, projectId);
  const [rows, [{ total }]] = await Promise.all([
    ctx.db
      .select()
      .from(projectWebhooks)
      .where(where)
      .orderBy(projectWebhooks.id)
      .limit(page.page_size)
      .offset(offsetOf(page)),
    ctx.db.select({ total: count() }).from(projectWebhooks).where(where),
  ]);
  return { rows, total };
}

export async function getWebhook(ctx: ServiceContext, projectId: number, webhookId: number) {
  await visibleProjectId(ctx, projectId);
  const [row] = await ctx.db
    .select()
    .from(projectWebhooks)
    .where(and(ofProject(ctx, projectId), eq(projectWebhooks.id, webhookId)));
  if (!row) throw notFound('Webhook');
  return row;
}

function checkBody(
  ctx: ServiceContext,
  body: CreateWebhookBody,
  allowed: readonly WebhookEventName[] = WEBHOOK_EVENTS,
) {
  const details: Record<string, string[]> = {};
  try {
    checkOutboundUrl(body.url, ctx.config.outboundAllowPrivate);
  } catch (error) {
    if (!(error instanceof OutboundUrlError)) throw error;
    details.url = [error.message];
  }
  const unknown = body.events.filter((e) => !(allowed as readonly string[]).includes(e));
  if (unknown.length > 0) {
    details.events = [`unknown: ${unknown.join(', ')}; allowed: ${allowed.join(', ')}`];
  }
  if (Object.keys(details).length > 0) {
    throw unprocessable(
      `Invalid webhook: ${Object.entries(details)
        .map(([field, messages]) => `${field} ${messages.join(', ')}`)
        .join('; ')}`,
      details,
    );
  }
  return allowed.filter((e) => body.events.includes(e)) as WebhookEventName[];
}

/** The secret is returned here once; it is stored encrypted because deliveries sign with it. */
export async function createWebhook(ctx: ServiceContext, projectId: number, body: CreateWebhookBody) {
  requireAdmin(ctx.principal);
  await visibleProjectId(ctx, projectId);
  return insertWebhook(ctx, projectId, body, checkBody(ctx, body));
}

/** A project's webhook, or the organization's (`projectId` null), with its audit record. */
function insertWebhook(
  ctx: ServiceContext,
  projectId: number | null,
  body: CreateWebhookBody,
  events: WebhookEventName[],
) {
  const secret = newWebhookSecret();
  return ctx.db.transaction(async (tx) => {
    const [row] = await tx
      .insert(projectWebhooks)
      .values({
        organizationId: ctx.principal.organizationId,
        projectId,
        url: body.url,
        events,
        secretEncrypted: ctx.secrets.encrypt(secret),
      })
      .returning();
    await recordAudit(tx, ctx, {
      action: 'webhook.created',
      resource: { type: 'webhook', id: row.id },
      // The secret is generated here, never sent; it is named because it came into being.
      changedFields: [...fieldsOf(body), 'secret'],
    });
    return { row, secret };
  });
}

/** Removes the webhook and, with it, its delivery log and pending retries. */
export async function deleteWebhook(ctx: ServiceContext, projectId: number, webhookId: number) {
  requireAdmin(ctx.principal);
  await visibleProjectId(ctx, projectId);
  await ctx.db.transaction(async (tx) => {
    const [row] = await tx
      .delete(projectWebhooks)
      .where(and(ofProject(ctx, projectId), eq(projectWebhooks.id, webhookId)))
      .returning({ id: projectWebhooks.id });
    if (!row) throw notFound('Webhook');
    await recordAudit(tx, ctx, { action: 'webhook.deleted', resource: { type: 'webhook', id: webhookId } });
  });
}

// ---- organization webhooks: every project's events, and the organization's own (documents)

const ofOrganization = (ctx: ServiceContext) =>
  and(eq(projectWebhooks.organizationId, ctx.principal.organizationId), isNull(projectWebhooks.projectId))!;

/** Organization webhooks see every project's events: reading them is for admins, as writing is. */
export async function listOrganizationWebhooks(ctx: ServiceContext, page: PageQuery) {
  requireAdminToRead(ctx.principal, "the organization's webhooks");
  const where = ofOrganization(ctx);
  const [rows, [{ total }]] = await Promise.all([
    ctx.db
      .select()
      .from(projectWebhooks)
      .where(where)
      .orderBy(projectWebhooks.id)
      .limit(page.page_size)
      .offset(offsetOf(page)),
    ctx.db.select({ total: count() }).from(projectWebhooks).where(where),
  ]);
  return { rows, total };
}

export async function getOrganizationWebhook(ctx: ServiceContext, webhookId: number) {
  requireAdminToRead(ctx.principal, "the organization's webhooks");
  const [row] = await ctx.db
    .select()
    .from(projectWebhooks)
    .where(and(ofOrganization(ctx), eq(projectWebhooks.id, webhookId)));
  if (!row) throw notFound('Webhook');
  return row;
}

export async function createOrganizationWebhook(ctx: ServiceContext, body: CreateWebhookBody) {
  requireAdmin(ctx.principal);
  return insertWebhook(ctx, null, body, checkBody(ctx, body, ORGANIZATION_WEBHOOK_EVENTS));
}

export async function deleteOrganizationWebhook(ctx: ServiceContext, webhookId: number) {
  requireAdmin(ctx.principal);
  await ctx.db.transaction(async (tx) => {
    const [row] = await tx
      .delete(projectWebhooks)
      .where(and(ofOrganization(ctx), eq(projectWebhooks.id, webhookId)))
      .returning({ id: projectWebhooks.id });
    if (!row) throw notFound('Webhook');
    await recordAudit(tx, ctx, { action: 'webhook.deleted', resource: { type: 'webhook', id: webhookId } });
  });
}
