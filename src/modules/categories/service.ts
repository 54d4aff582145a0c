import { and, count, eq, exists, type SQL, sql } from 'drizzle-orm';
import { fieldsOf, recordAudit } from '../../audit/record.js';
import type { ServiceContext } from '../../core/context.js';
import type { OrgPrincipal } from '../../core/principal.js';
import type { Queryable } from '../../db/client.js';
import { type CategoryRow, categories, categoryGroups, groupMembers } from '../../db/schema/index.js';
import { notFound } from '../../http/errors.js';
import { offsetOf, type PageQuery } from '../../http/pagination.js';
import { isAdmin, requireAdmin } from '../../policies/roles.js';
import { changesGroups, lockGroupAssignments, resolveGroupAssignment } from '../groups/references.js';
import { linkedIds, replaceLinks } from '../link-tables.js';
import type { CreateCategoryBody, UpdateCategoryBody } from './schemas.js';

/** Like projects: members see the categories that share a group with them. */
function categoryVisibleTo(principal: OrgPrincipal): SQL {
  const inOrg = eq(categories.organizationId, principal.organizationId);
  if (isAdmin(principal)) return inOrg;
  return and(
    inOrg,
    exists(
      sql`(select 1 from ${categoryGroups} join ${groupMembers} on ${groupMembers.groupId} = ${categoryGroups.groupId}
          where ${categoryGroups.categoryId} = ${categories.id} and ${groupMembers.userId} = ${principal.userId ?? 0})`,
    ),
  )!;
}

const groupIdsOf = (db: Queryable, ids: number[]) =>
  linkedIds(db, categoryGroups, categoryGroups.categoryId, categoryGroups.groupId, ids);

const withGroups = async (db: Queryable, row: CategoryRow) => ({
  row,
  groupIds: (await groupIdsOf(db, [row.id])).get(row.id)!,
});

export async function listCategories(ctx: ServiceContext, page: PageQuery) {
  const where = categoryVisibleTo(ctx.principal);
  const [rows, [{ total }]] = await Promise.all([
    ctx.db
      .select()
      .from(categories)
      .where(where)
      .orderBy(categories.id)
      .limit(page.page_size)
      .offset(offsetOf(page)),
    ctx.db.select({ total: count() }).from(categories).where(where),
  ]);
  const groups = await groupIdsOf(
    ctx.db,
    rows.map((r) => r.id),
  );
  return { rows: rows.map((row) => ({ row, groupIds: groups.get(row.id)! })), total };
}

async function findCategory(db: Queryable, ctx: ServiceContext, id: number): Promise<CategoryRow> {
  const [row] = await db
    .select()
    .from(categories)
    .where(and(eq(categories.id, id), categoryVisibleTo(ctx.principal)));
  if (!row) throw notFound('Category');
  return row;
}

export async function getCategory(ctx: ServiceContext, id: number) {
  return withGroups(ctx.db, await findCategory(ctx.db, ctx, id));
}

export async function createCategory(ctx: ServiceContext, body: CreateCategoryBody) {
  requireAdmin(ctx.principal);
  const orgId = ctx.principal.organizationId;
  return ctx.db.transaction(async (tx) => {
    await lockGroupAssignments(tx, orgId);
    const groupIds = await resolveGroupAssignment(tx, orgId, body);
    const [row] = await tx
      .insert(categories)
      .values({ organizationId: orgId, name: body.name, description: body.description ?? '' })
      .returning();
    await tx.insert(categoryGroups).values(groupIds.map((groupId) => ({ categoryId: row.id, groupId })));
    await recordAudit(tx, ctx, {
      action: 'category.created',
      resource: { type: 'category', id: row.id },
      changedFields: fieldsOf(body),
    });
    return { row, groupIds };
  });
}

/** `group_ids`, when given, replace the groups; they can never become none (spec 8). */
export async function updateCategory(ctx: ServiceContext, id: number, body: UpdateCategoryBody) {
  requireAdmin(ctx.principal);
  const orgId = ctx.principal.organizationId;
  return ctx.db.transaction(async (tx) => {
    await lockGroupAssignments(tx, orgId);
    await findCategory(tx, ctx, id);
    if (changesGroups(body)) {
      const groupIds = await resolveGroupAssignment(tx, orgId, body);
      await replaceLinks(
        tx,
        categoryGroups,
        categoryGroups.categoryId,
        id,
        groupIds.map((groupId) => ({ categoryId: id, groupId })),
      );
    }
    const [row] = await tx
      .update(categories)
      .set({ name: body.name, description: body.description, updatedAt: sql`now()` })
      .where(eq(categories.id, id))
      .returning();
    await recordAudit(tx, ctx, {
      action: 'category.updated',
      resource: { type: 'category', id },
      changedFields: fieldsOf(body),
    });
    return withGroups(tx, row);
  });
}

/** Projects lose the category; artifact types keep a null `category_id`. */
export async function deleteCategory(ctx: ServiceContext, id: number) {
  requireAdmin(ctx.principal);
  await ctx.db.transaction(async (tx) => {
    const [row] = await tx
      .delete(categories)
      .where(and(eq(categories.id, id), eq(categories.organizationId, ctx.principal.organizationId)))
      .returning({ id: categories.id });
    if (!row) throw notFound('Category');
    await recordAudit(tx, ctx, { action: 'category.deleted', resource: { type: 'category', id } });
  });
}
