import { and, count, desc, eq, gte, lt, type SQL } from 'drizzle-orm';
import type { ServiceContext } from '../../core/context.js';
import type { Db } from '../../db/client.js';
import { auditEvents } from '../../db/schema/index.js';
import { badRequest, forbidden } from '../../http/errors.js';
import { offsetOf } from '../../http/pagination.js';
import { requireAdminToRead } from '../../policies/roles.js';
import type { AdminAuditEventQuery, AuditEventQuery } from './schemas.js';

function filtersOf(query: AuditEventQuery): (SQL | undefined)[] {
  // Compared as timestamptz by PostgreSQL, so microseconds in the bounds count.
  if (query.from && query.to && Date.parse(query.from) >= Date.parse(query.to))
    throw badRequest('from must be before to', { from: ['must be before to'] });
  return [
    query.from ? gte(auditEvents.occurredAt, query.from) : undefined,
    query.to ? lt(auditEvents.occurredAt, query.to) : undefined,
    query.action ? eq(auditEvents.action, query.action) : undefined,
    query.resource_type ? eq(auditEvents.resourceType, query.resource_type) : undefined,
    query.actor_api_key_id ? eq(auditEvents.actorApiKeyId, query.actor_api_key_id) : undefined,
  ];
}

async function page(db: Db, where: SQL | undefined, query: AuditEventQuery) {
  const [rows, [{ total }]] = await Promise.all([
    db
      .select()
      .from(auditEvents)
      .where(where)
      .orderBy(desc(auditEvents.id))
      .limit(query.page_size)
      .offset(offsetOf(query)),
    db.select({ total: count() }).from(auditEvents).where(where),
  ]);
  return { rows, total };
}

/**
 * The caller's organization's records, newest first; organization admins only. `organization_id`,
 * if given, must be the caller's own (it selects among organizations for super admins).
 */
export async function listAuditEvents(ctx: ServiceContext, query: AdminAuditEventQuery) {
  requireAdminToRead(ctx.principal, 'the audit log');
  if (query.organization_id !== undefined && query.organization_id !== ctx.principal.organizationId)
    throw forbidden("An organization's keys read its own audit log only");
  return page(
    ctx.db,
    and(eq(auditEvents.organizationId, ctx.principal.organizationId), ...filtersOf(query)),
    query,
  );
}

/** Every organization's records (or one's), for super admins. */
export async function listAllAuditEvents(db: Db, query: AdminAuditEventQuery) {
  return page(
    db,
    and(
      query.organization_id ? eq(auditEvents.organizationId, query.organization_id) : undefined,
      ...filtersOf(query),
    ),
    query,
  );
}
