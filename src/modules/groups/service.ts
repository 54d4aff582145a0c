import { and, count, eq, inArray, isNull, sql } from 'drizzle-orm';
import type { PgColumn, PgTable } from 'drizzle-orm/pg-core';
import { fieldsOf, recordAudit } from '../../audit/record.js';
import type { ServiceContext } from '../../core/context.js';
import type { Queryable } from '../../db/client.js';
import {
  agentGroups,
  agents,
  categories,
  categoryGroups,
  type GroupRow,
  groupMembers,
  groups,
  projectGroups,
  projects,
  users,
} from '../../db/schema/index.js';
import { notFound, unprocessable } from '../../http/errors.js';
import { offsetOf, type PageQuery } from '../../http/pagination.js';
import { requireAdmin } from '../../policies/roles.js';
import { lockGroupAssignments } from './references.js';
import type { CreateGroupBody, UpdateGroupBody } from './schemas.js';

const inOrg = (ctx: ServiceContext) => eq(groups.organizationId, ctx.principal.organizationId);

async function memberIdsOf(db: Queryable, groupIds: number[]) {
  const byGroup = new Map<number, number[]>(groupIds.map((id) => [id, []]));
  if (groupIds.length === 0) return byGroup;
  const rows = await db
    .select({ groupId: groupMembers.groupId, userId: groupMembers.userId })
    .from(groupMembers)
    .innerJoin(users, eq(users.id, groupMembers.userId))
    .where(and(inArray(groupMembers.groupId, groupIds), isNull(users.deletedAt)))
    .orderBy(groupMembers.userId);
  for (const row of rows) byGroup.get(row.groupId)?.push(row.userId);
  return byGroup;
}

const withMembers = async (db: Queryable, row: GroupRow) => ({
  row,
  userIds: (await memberIdsOf(db, [row.id])).get(row.id)!,
});

export async function listGroups(ctx: ServiceContext, page: PageQuery) {
  const [rows, [{ total }]] = await Promise.all([
    ctx.db
      .select()
      .from(groups)
      .where(inOrg(ctx))
      .orderBy(groups.id)
      .limit(page.page_size)
      .offset(offsetOf(page)),
    ctx.db.select({ total: count() }).from(groups).where(inOrg(ctx)),
  ]);
  const members = await memberIdsOf(
    ctx.db,
    rows.map((r) => r.id),
  );
  return { rows: rows.map((row) => ({ row, userIds: members.get(row.id)! })), total };
}

async function findGroup(db: Queryable, ctx: ServiceContext, id: number): Promise<GroupRow> {
  const [row] = await db
    .select()
    .from(groups)
    .where(and(eq(groups.id, id), inOrg(ctx)));
  if (!row) throw notFound('Group');
  return row;
}

export async function getGroup(ctx: ServiceContext, id: number) {
  return withMembers(ctx.db, await findGroup(ctx.db, ctx, id));
}

export async function createGroup(ctx: ServiceContext, body: CreateGroupBody) {
  requireAdmin(ctx.principal);
  return ctx.db.transaction(async (tx) => {
    const [row] = await tx
      .insert(groups)
      .values({
        organizationId: ctx.principal.organizationId,
        name: body.name,
        description: body.description ?? '',
      })
      .returning();
    await recordAudit(tx, ctx, {
      action: 'group.created',
      resource: { type: 'group', id: row.id },
      changedFields: fieldsOf(body),
    });
    return { row, userIds: [] as number[] };
  });
}

export async function updateGroup(ctx: ServiceContext, id: number, body: UpdateGroupBody) {
  requireAdmin(ctx.principal);
  return ctx.db.transaction(async (tx) => {
    const [row] = await tx
      .update(groups)
      .set({ name: body.name, description: body.description, updatedAt: sql`now()` })
      .where(and(eq(groups.id, id), inOrg(ctx)))
      .returning();
    if (!row) throw notFound('Group');
    await recordAudit(tx, ctx, {
      action: 'group.updated',
      resource: { type: 'group', id },
      changedFields: fieldsOf(body),
    });
    return withMembers(tx, row);
  });
}

/** What would be left without any group if `groupId` went: categories, live projects and agents. */
async function soleDependants(tx: Queryable, groupId: number) {
  // Correlated: the owner column refers to the outer row; `other` is every link of that owner.
  const onlyGroup = (table: PgTable, owner: PgColumn) =>
    sql`(select count(*) from ${table} other where other.${sql.identifier(owner.name)} = ${owner}) = 1`;
  const [soleCategories, soleProjects, soleAgents] = await Promise.all([
    tx
      .select({ id: categories.id, name: categories.name })
      .from(categoryGroups)
      .innerJoin(categories, eq(categories.id, categoryGroups.categoryId))
      .where(and(eq(categoryGroups.groupId, groupId), onlyGroup(categoryGroups, categoryGroups.categoryId)))
      .orderBy(categories.id),
    tx
      .select({ id: projects.id, name: projects.name })
      .from(projectGroups)
      .innerJoin(projects, eq(projects.id, projectGroups.projectId))
      .where(
        and(
          eq(projectGroups.groupId, groupId),
          isNull(projects.deletedAt),
          onlyGroup(projectGroups, projectGroups.projectId),
        ),
      )
      .orderBy(projects.id),
    tx
      .select({ id: agents.id, name: agents.name })
      .from(agentGroups)
      .innerJoin(agents, eq(agents.id, agentGroups.agentId))
      .where(
        and(
          eq(agentGroups.groupId, groupId),
          isNull(agents.deletedAt),
          onlyGroup(agentGroups, agentGroups.agentId),
        ),
      )
      .orderBy(agents.id),
  ]);
  return { categories: soleCategories, projects: soleProjects, agents: soleAgents };
}

const describe = (kind: string, rows: { id: number; name: string }[]) =>
  rows.map((r) => `${kind} "${r.name}" (id ${r.id}) would have no group left`);

/**
 * The default group stays (new users join it). A group that is the last one of a category or a
 * project cannot go: spec 8 says those always keep one. Nor the last group of an agent, since an
 * agent without groups is open to everyone.
 */
export async function deleteGroup(ctx: ServiceContext, id: number) {
  requireAdmin(ctx.principal);
  await ctx.db.transaction(async (tx) => {
    await lockGroupAssignments(tx, ctx.principal.organizationId);
    const group = await findGroup(tx, ctx, id);
    if (group.isDefault) {
      throw unprocessable(
        'The default group cannot be deleted',
        { id: ['is the default group'] },
        'default_group',
      );
    }
    const sole = await soleDependants(tx, id);
    const details: Record<string, string[]> = {};
    if (sole.categories.length) details.categories = describe('category', sole.categories);
    if (sole.projects.length) details.projects = describe('project', sole.projects);
    if (sole.agents.length) details.agents = describe('agent', sole.agents);
    if (Object.keys(details).length > 0) {
      const names = [
        ...sole.categories.map((c) => `category "${c.name}"`),
        ...sole.projects.map((p) => `project "${p.name}"`),
        ...sole.agents.map((a) => `agent "${a.name}"`),
      ];
      throw unprocessable(
        `The group is the last group of ${names.join(', ')}; give them another group first`,
        details,
        'last_group',
      );
    }
    await tx.delete(groups).where(eq(groups.id, id));
    await recordAudit(tx, ctx, { action: 'group.deleted', resource: { type: 'group', id } });
  });
}

export async function addMember(ctx: ServiceContext, groupId: number, userId: number) {
  requireAdmin(ctx.principal);
  return ctx.db.transaction(async (tx) => {
    await findGroup(tx, ctx, groupId);
    const [user] = await tx
      .select({ id: users.id })
      .from(users)
      .where(
        and(
          eq(users.id, userId),
          eq(users.organizationId, ctx.principal.organizationId),
          isNull(users.deletedAt),
        ),
      );
    if (!user) throw notFound('User');
    const added = await tx
      .insert(groupMembers)
      .values({ groupId, userId })
      .onConflictDoNothing()
      .returning({ userId: groupMembers.userId });
    const [row] = await tx
      .update(groups)
      .set({ updatedAt: sql`now()` })
      .where(eq(groups.id, groupId))
      .returning();
    if (added.length > 0) {
      await recordAudit(tx, ctx, {
        action: 'group.member_added',
        resource: { type: 'group', id: groupId },
        changedFields: ['user_ids'],
      });
    }
    return { ...(await withMembers(tx, row)), added: added.length > 0 };
  });
}

export async function removeMember(ctx: ServiceContext, groupId: number, userId: number) {
  requireAdmin(ctx.principal);
  await ctx.db.transaction(async (tx) => {
    await findGroup(tx, ctx, groupId);
    const removed = await tx
      .delete(groupMembers)
      .where(and(eq(groupMembers.groupId, groupId), eq(groupMembers.userId, userId)))
      .returning({ userId: groupMembers.userId });
    if (removed.length === 0) throw notFound('Group member');
    await tx.update(groups).set({ updatedAt: sql`now()` }).where(eq(groups.id, groupId));
    await recordAudit(tx, ctx, {
      action: 'group.member_removed',
      resource: { type: 'group', id: groupId },
      changedFields: ['user_ids'],
    });
  });
}
