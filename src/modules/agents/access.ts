import { and, eq, isNull, type SQL, sql } from 'drizzle-orm';
import type { OrgPrincipal } from '../../core/principal.js';
import { agentGroups, agents, groupMembers } from '../../db/schema/index.js';
import { isAdmin } from '../../http/policies.js';

/**
 * Who may see and use an agent (DESIGN.md 4): admins every agent of the organization; members
 * agents without groups, and agents sharing a group with them. Chats apply the same rule
 * (src/modules/chats/access.ts), answering 401 where v1 answers 404.
 */
export function agentVisibleTo(principal: OrgPrincipal): SQL {
  const live = and(eq(agents.organizationId, principal.organizationId), isNull(agents.deletedAt))!;
  if (isAdmin(principal)) return live;
  return and(
    live,
    sql`(not exists (select 1 from ${agentGroups} where ${agentGroups.agentId} = ${agents.id})
         or exists (select 1 from ${agentGroups} join ${groupMembers} on ${groupMembers.groupId} = ${agentGroups.groupId}
                    where ${agentGroups.agentId} = ${agents.id} and ${groupMembers.userId} = ${principal.userId ?? 0}))`,
  )!;
}
