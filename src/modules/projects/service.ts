import { and, count, eq, isNull, type SQL, sql } from 'drizzle-orm';
import { fieldsOf, recordAudit } from '../../audit/record.js';
import type { ServiceContext } from '../../core/context.js';
import type { Queryable } from '../../db/client.js';
import {
  integrationProjects,
  type ProjectRow,
  projectCategories,
  projectGroups,
  projects,
} from '../../db/schema/index.js';
import { notFound } from '../../http/errors.js';
import { offsetOf } from '../../http/pagination.js';
import { findProjectFor, projectVisibleTo } from '../../policies/projects.js';
import { requireAdmin } from '../../policies/roles.js';
import { checkCategoryIds } from '../categories/references.js';
import { changesGroups, lockGroupAssignments, resolveGroupAssignment } from '../groups/references.js';
import { linkedIds, replaceLinks } from '../link-tables.js';
import type { CreateProjectBody, ProjectListQuery, UpdateProjectBody } from './schemas.js';

async function linksOf(db: Queryable, ids: number[]) {
  const [groupIds, categoryIds] = await Promise.all([
    linkedIds(db, projectGroups, projectGroups.projectId, projectGroups.groupId, ids),
    linkedIds(db, projectCategories, projectCategories.projectId, projectCategories.categoryId, ids),
  ]);
  return (id: number) => ({ groupIds: groupIds.get(id)!, categoryIds: categoryIds.get(id)! });
}

const withLinks = async (db: Queryable, row: ProjectRow) => ({
  row,
  links: (await linksOf(db, [row.id]))(row.id),
});

export async function listProjects(ctx: ServiceContext, query: ProjectListQuery) {
  const where: SQL = query.include_archived
    ? projectVisibleTo(ctx.principal)
    : and(projectVisibleTo(ctx.principal), isNull(projects.archivedAt))!;
  const [rows, [{ total }]] = await Promise.all([
    ctx.db
      .select()
      .from(projects)
      .where(where)
      .orderBy(projects.id)
      .limit(query.page_size)
      .offset(offsetOf(query)),
    ctx.db.select({ total: count() }).from(projects).where(where),
  ]);
  const links = await linksOf(
    ctx.db,
    rows.map((r) => r.id),
  );
  return { rows: rows.map((row) => ({ row, links: links(row.id) })), total };
}

/** v1 never reveals a project the key may not use: missing and not-allowed are both 404. */
async function visibleProject(db: Queryable, ctx: ServiceContext, id: number): Promise<ProjectRow> {
  const found = await findProjectFor(db, ctx.principal, id);
  if (!found?.allowed) throw notFound('Project');
  return found.project;
}

export async function getProject(ctx: ServiceContext, id: number) {
  return withLinks(ctx.db, await visibleProject(ctx.db, ctx, id));
}

export async function createProject(ctx: ServiceContext, body: CreateProjectBody) {
  requireAdmin(ctx.principal);
  const orgId = ctx.principal.organizationId;
  return ctx.db.transaction(async (tx) => {
    await lockGroupAssignments(tx, orgId);
    const groupIds = await resolveGroupAssignment(tx, orgId, body);
    const categoryIds = await checkCategoryIds(tx, orgId, body.category_ids ?? []);
    const [row] = await tx
      .insert(projects)
      .values({ organizationId: orgId, name: body.name, overview: body.overview ?? '' })
      .returning();
    await tx.insert(projectGroups).values(groupIds.map((groupId) => ({ projectId: row.id, groupId })));
    if (categoryIds.length > 0) {
      await tx
        .insert(projectCategories)
        .values(categoryIds.map((categoryId) => ({ projectId: row.id, categoryId })));
    }
    await recordAudit(tx, ctx, {
      action: 'project.created',
      resource: { type: 'project', id: row.id },
      changedFields: fieldsOf(body),
    });
    return { row, links: { groupIds, categoryIds } };
  });
}

/** PUT: any subset; `group_ids` / `category_ids`, when given, replace the assignments (spec 4.3). */
export async function updateProject(ctx: ServiceContext, id: number, body: UpdateProjectBody) {
  requireAdmin(ctx.principal);
  const orgId = ctx.principal.organizationId;
  return ctx.db.transaction(async (tx) => {
    await lockGroupAssignments(tx, orgId);
    await visibleProject(tx, ctx, id);
    if (changesGroups(body)) {
      const groupIds = await resolveGroupAssignment(tx, orgId, body);
      await replaceLinks(
        tx,
        projectGroups,
        projectGroups.projectId,
        id,
        groupIds.map((groupId) => ({ projectId: id, groupId })),
      );
    }
    if (body.category_ids !== undefined) {
      const categoryIds = await checkCategoryIds(tx, orgId, body.category_ids);
      await replaceLinks(
        tx,
        projectCategories,
        projectCategories.projectId,
        id,
        categoryIds.map((categoryId) => ({ projectId: id, categoryId })),
      );
    }
    const [row] = await tx
      .update(projects)
      .set({ name: body.name, overview: body.overview, updatedAt: sql`now()` })
      .where(eq(projects.id, id))
      .returning();
    await recordAudit(tx, ctx, {
      action: 'project.updated',
      resource: { type: 'project', id },
      changedFields: fieldsOf(body),
    });
    return withLinks(tx, row);
  });
}

/** Soft delete: chats, artifacts and ledger rows keep pointing at the project. */
export async function deleteProject(ctx: ServiceContext, id: number) {
  requireAdmin(ctx.principal);
  await ctx.db.transaction(async (tx) => {
    await visibleProject(tx, ctx, id);
    await tx
      .update(projects)
      .set({ deletedAt: sql`now()`, updatedAt: sql`now()` })
      .where(and(eq(projects.id, id), isNull(projects.deletedAt)));
    // The row stays (soft delete), so nothing cascades: an integration limited to this project
    // loses it (and, with no project left, applies to none; docs/integrations.md).
    await tx.delete(integrationProjects).where(eq(integrationProjects.projectId, id));
    await recordAudit(tx, ctx, { action: 'project.deleted', resource: { type: 'project', id } });
  });
}

/** Archiving twice keeps the first `archived_at`. */
export async function setArchived(ctx: ServiceContext, id: number, archived: boolean) {
  requireAdmin(ctx.principal);
  return ctx.db.transaction(async (tx) => {
    await visibleProject(tx, ctx, id);
    const [row] = await tx
      .update(projects)
      .set({
        archivedAt: archived ? sql`coalesce(${projects.archivedAt}, now())` : null,
        updatedAt: sql`now()`,
      })
      .where(eq(projects.id, id))
      .returning();
    await recordAudit(tx, ctx, {
      action: archived ? 'project.archived' : 'project.unarchived',
      resource: { type: 'project', id },
      changedFields: ['archived_at'],
    });
    return withLinks(tx, row);
  });
}
