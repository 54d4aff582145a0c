import { and, count, eq, inArray, isNull, sql } from 'drizzle-orm';
import { fieldsOf, recordAudit } from '../../audit/record.js';
import type { ServiceContext } from '../../core/context.js';
import { principalsChanged } from '../../core/principal-cache.js';
import { apiKeys, groupMembers, groups, users } from '../../db/schema/index.js';
import { notFound } from '../../http/errors.js';
import { offsetOf, type PageQuery } from '../../http/pagination.js';
import { requireAdmin, requireAdminToRead } from '../../policies/roles.js';
import type { CreateUserBody, UpdateUserBody } from './schemas.js';

const inOrg = (ctx: ServiceContext) =>
  and(eq(users.organizationId, ctx.principal.organizationId), isNull(users.deletedAt));

async function groupIdsOf(ctx: ServiceContext, userIds: number[]) {
  const byUser = new Map<number, number[]>(userIds.map((id) => [id, []]));
  if (userIds.length === 0) return byUser;
  const rows = await ctx.db
    .select({ userId: groupMembers.userId, groupId: groupMembers.groupId })
    .from(groupMembers)
    .where(inArray(groupMembers.userId, userIds))
    .orderBy(groupMembers.groupId);
  for (const row of rows) byUser.get(row.userId)?.push(row.groupId);
  return byUser;
}

export async function listUsers(ctx: ServiceContext, page: PageQuery) {
  requireAdminToRead(ctx.principal, 'users');
  const [rows, [{ total }]] = await Promise.all([
    ctx.db
      .select()
      .from(users)
      .where(inOrg(ctx))
      .orderBy(users.id)
      .limit(page.page_size)
      .offset(offsetOf(page)),
    ctx.db.select({ total: count() }).from(users).where(inOrg(ctx)),
  ]);
  const groupIds = await groupIdsOf(
    ctx,
    rows.map((r) => r.id),
  );
  return { rows: rows.map((row) => ({ row, groupIds: groupIds.get(row.id)! })), total };
}

export async function getUser(ctx: ServiceContext, id: number) {
  requireAdminToRead(ctx.principal, 'users');
  const [row] = await ctx.db
    .select()
    .from(users)
    .where(and(eq(users.id, id), inOrg(ctx)));
  if (!row) throw notFound('User');
  return { row, groupIds: (await groupIdsOf(ctx, [row.id])).get(row.id)! };
}

/** New users join the organization's default group, so they can use what everyone can. */
export async function createUser(ctx: ServiceContext, body: CreateUserBody) {
  requireAdmin(ctx.principal);
  const orgId = ctx.principal.organizationId;
  const id = await ctx.db.transaction(async (tx) => {
    const [row] = await tx
      .insert(users)
      .values({
        organizationId: orgId,
        email: body.email,
        name: body.name ?? '',
        role: body.role ?? 'member',
      })
      .returning({ id: users.id });
    const [group] = await tx
      .select({ id: groups.id })
      .from(groups)
      .where(and(eq(groups.organizationId, orgId), eq(groups.isDefault, true)));
    if (group) await tx.insert(groupMembers).values({ groupId: group.id, userId: row.id });
    await recordAudit(tx, ctx, {
      action: 'user.created',
      resource: { type: 'user', id: row.id },
      changedFields: fieldsOf(body),
    });
    return row.id;
  });
  return getUser(ctx, id);
}

export async function updateUser(ctx: ServiceContext, id: number, body: UpdateUserBody) {
  requireAdmin(ctx.principal);
  await ctx.db.transaction(async (tx) => {
    const [row] = await tx
      .update(users)
      .set({ email: body.email, name: body.name, role: body.role, updatedAt: sql`now()` })
      .where(and(eq(users.id, id), inOrg(ctx)))
      .returning({ id: users.id });
    if (!row) throw notFound('User');
    await recordAudit(tx, ctx, {
      action: 'user.updated',
      resource: { type: 'user', id },
      changedFields: fieldsOf(body),
    });
  });
  principalsChanged(ctx.db);
  return getUser(ctx, id);
}

/** Removal keeps the row (chats and ledger rows point at it) but revokes the user's keys and memberships. */
export async function deleteUser(ctx: ServiceContext, id: number) {
  requireAdmin(ctx.principal);
  await ctx.db.transaction(async (tx) => {
    const [row] = await tx
      .update(users)
      .set({ deletedAt: sql`now()`, updatedAt: sql`now()` })
      .where(and(eq(users.id, id), inOrg(ctx)))
      .returning({ id: users.id });
    if (!row) throw notFound('User');
    await tx.delete(groupMembers).where(eq(groupMembers.userId, id));
    await tx
      .update(apiKeys)
      .set({ revokedAt: sql`now()` })
      .where(and(eq(apiKeys.userId, id), isNull(apiKeys.revokedAt)));
    await recordAudit(tx, ctx, { action: 'user.deleted', resource: { type: 'user', id } });
  });
  principalsChanged(ctx.db);
}
