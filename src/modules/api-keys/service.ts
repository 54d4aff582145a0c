import { and, count, desc, eq, isNull, sql } from 'drizzle-orm';
import { fieldsOf, recordAudit } from '../../audit/record.js';
import type { ServiceContext } from '../../core/context.js';
import { principalsChanged } from '../../core/principal-cache.js';
import type { Queryable } from '../../db/client.js';
import { apiKeys, users } from '../../db/schema/index.js';
import { notFound, unprocessable } from '../../http/errors.js';
import { offsetOf, type PageQuery } from '../../http/pagination.js';
import { requireAdmin, requireAdminToRead } from '../../policies/roles.js';
import type { CreateApiKeyBody } from './schemas.js';
import { type KeyKind, newKeySecret } from './secrets.js';

export interface NewKey {
  organizationId: number | null;
  userId: number | null;
  kind: KeyKind;
  name?: string;
}

export async function insertApiKey(tx: Queryable, key: NewKey) {
  const { secret, hash, prefix } = newKeySecret(key.kind);
  const [row] = await tx
    .insert(apiKeys)
    .values({
      organizationId: key.organizationId,
      userId: key.userId,
      kind: key.kind,
      name: key.name ?? '',
      prefix,
      keyHash: hash,
    })
    .returning();
  return { row, secret };
}

export async function createApiKey(ctx: ServiceContext, body: CreateApiKeyBody) {
  requireAdmin(ctx.principal);
  const orgId = ctx.principal.organizationId;
  if (body.kind === 'personal') {
    if (body.user_id === undefined || body.user_id === null)
      throw unprocessable('user_id is required for a personal key', { user_id: ['is required'] });
    const [user] = await ctx.db
      .select({ id: users.id })
      .from(users)
      .where(and(eq(users.id, body.user_id), eq(users.organizationId, orgId), isNull(users.deletedAt)));
    if (!user) throw notFound('User');
  } else if (body.user_id !== undefined && body.user_id !== null) {
    throw unprocessable('An organization key belongs to no user', {
      user_id: ['must be absent for an organization key'],
    });
  }
  return ctx.db.transaction(async (tx) => {
    const created = await insertApiKey(tx, {
      organizationId: orgId,
      userId: body.kind === 'personal' ? body.user_id! : null,
      kind: body.kind,
      name: body.name,
    });
    await recordAudit(tx, ctx, {
      action: 'api_key.created',
      resource: { type: 'api_key', id: created.row.id },
      changedFields: fieldsOf(body),
    });
    return created;
  });
}

export async function listApiKeys(ctx: ServiceContext, page: PageQuery) {
  requireAdminToRead(ctx.principal, 'API keys');
  const where = eq(apiKeys.organizationId, ctx.principal.organizationId);
  const [rows, [{ total }]] = await Promise.all([
    ctx.db
      .select()
      .from(apiKeys)
      .where(where)
      .orderBy(desc(apiKeys.id))
      .limit(page.page_size)
      .offset(offsetOf(page)),
    ctx.db.select({ total: count() }).from(apiKeys).where(where),
  ]);
  return { rows, total };
}

export async function revokeApiKey(ctx: ServiceContext, id: number) {
  requireAdmin(ctx.principal);
  await ctx.db.transaction(async (tx) => {
    const [row] = await tx
      .update(apiKeys)
      .set({ revokedAt: sql`now()` })
      .where(
        and(
          eq(apiKeys.id, id),
          eq(apiKeys.organizationId, ctx.principal.organizationId),
          isNull(apiKeys.revokedAt),
        ),
      )
      .returning({ id: apiKeys.id });
    if (!row) throw notFound('API key');
    await recordAudit(tx, ctx, {
      action: 'api_key.revoked',
      resource: { type: 'api_key', id },
      changedFields: ['revoked_at'],
    });
  });
  principalsChanged(ctx.db);
}
