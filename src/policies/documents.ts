import { and, eq, type SQL, sql } from 'drizzle-orm';
import type { OrgPrincipal } from '../core/principal.js';
import { documentGroups, documents, groupMembers, projectGroups } from '../db/schema/index.js';

/**
 * Who sees a document. Organization keys: every document of the organization. Personal keys, an
 * admin user's too: documents in at least one of their user's groups (issue 6: "personal keys
 * additionally only see documents in their user's groups"; an admin may join any group).
 */
export function documentVisibleTo(principal: OrgPrincipal): SQL {
  const inOrg = eq(documents.organizationId, principal.organizationId);
  if (principal.kind === 'organization') return inOrg;
  return and(inOrg, inGroupOfUser(principal.userId ?? 0))!;
}

/**
 * What a project's knowledge search may read: documents sharing a group with the project, and for
 * a personal key only those also in one of its user's groups.
 */
export function documentVisibleToProject(principal: OrgPrincipal, projectId: number): SQL {
  const sharesProjectGroup = sql`exists (select 1 from ${documentGroups} join ${projectGroups} on ${projectGroups.groupId} = ${documentGroups.groupId}
        where ${documentGroups.documentId} = ${documents.id} and ${projectGroups.projectId} = ${projectId})`;
  return and(documentVisibleTo(principal), sharesProjectGroup)!;
}

function inGroupOfUser(userId: number): SQL {
  return sql`exists (select 1 from ${documentGroups} join ${groupMembers} on ${groupMembers.groupId} = ${documentGroups.groupId}
        where ${documentGroups.documentId} = ${documents.id} and ${groupMembers.userId} = ${userId})`;
}
