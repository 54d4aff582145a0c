import { and, eq, exists, isNull, type SQL, sql } from 'drizzle-orm';
import type { OrgPrincipal } from '../core/principal.js';
import type { Queryable } from '../db/client.js';
import { groupMembers, type ProjectRow, projectGroups, projects } from '../db/schema/index.js';
import { ApiError, notFound } from '../http/errors.js';

/**
 * The one rule for "may this key use this project": organization keys and admin users reach every
 * project of their organization; members reach projects that share a group with them.
 */
export function projectVisibleTo(principal: OrgPrincipal): SQL {
  const inOrg = and(eq(projects.organizationId, principal.organizationId), isNull(projects.deletedAt))!;
  if (principal.role === 'admin') return inOrg;
  return and(inOrg, sharesGroupWithUser(principal.userId ?? 0))!;
}

export function sharesGroupWithUser(userId: number): SQL {
  // Drizzle's exists() adds no parentheses around raw SQL; the subquery needs them.
  return exists(
    sql`(select 1 from ${projectGroups} join ${groupMembers} on ${groupMembers.groupId} = ${projectGroups.groupId}
        where ${projectGroups.projectId} = ${projects.id} and ${groupMembers.userId} = ${userId})`,
  );
}

/**
 * Looks a project up for a principal. `missing`: no such project in the organization (or deleted);
 * `forbidden`: it exists but the key's user may not use it. Callers map these to their family's
 * status (v1: 404 for both, never revealing; v2 chats: 404 and 401, spec 5).
 */
export async function findProjectFor(
  db: Queryable,
  principal: OrgPrincipal,
  projectId: number,
): Promise<{ project: ProjectRow; allowed: boolean } | null> {
  const [row] = await db
    .select({
      project: projects,
      allowed:
        principal.role === 'admin'
          ? sql<boolean>`true`
          : sql<boolean>`${sharesGroupWithUser(principal.userId ?? 0)}`,
    })
    .from(projects)
    .where(
      and(
        eq(projects.id, projectId),
        eq(projects.organizationId, principal.organizationId),
        isNull(projects.deletedAt),
      ),
    );
  return row ? { project: row.project, allowed: Boolean(row.allowed) } : null;
}

/**
 * The project a chat turn runs in. Spec 5 and 7.1: unknown -> 404, not allowed for the key's user
 * -> 401. Archived projects are read-only for chats: no new chats or turns (404 `project_archived`).
 */
export async function usableProject(
  db: Queryable,
  principal: OrgPrincipal,
  projectId: number,
): Promise<ProjectRow> {
  return checkUsableProject(projectId, await findProjectFor(db, principal, projectId));
}

/** `usableProject`'s checks on a looked-up project (also read by the turn's one-statement plan). */
export function checkUsableProject(
  projectId: number,
  found: { project: ProjectRow; allowed: boolean } | null,
): ProjectRow {
  if (!found) throw notFound('Project');
  if (!found.allowed)
    throw new ApiError(
      401,
      'project_access_denied',
      `This key's user has no permission to project ${projectId}`,
    );
  if (found.project.archivedAt !== null)
    throw new ApiError(
      404,
      'project_archived',
      `Project ${projectId} is archived: its chats stay readable but it accepts no new chats or messages`,
    );
  return found.project;
}
