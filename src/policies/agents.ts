import { and, eq, isNull, type SQL, sql } from 'drizzle-orm';
import type { OrgPrincipal } from '../core/principal.js';
import type { Queryable } from '../db/client.js';
import { type AgentRow, agentGroups, agents, groupMembers } from '../db/schema/index.js';
import { ApiError, notFound } from '../http/errors.js';
import { isAdmin } from './roles.js';

/**
 * Who may see and use an agent (DESIGN.md 4): admins every agent of the organization; members
 * agents without groups, and agents sharing a group with them. Chats apply the same rule
 * (`usableAgent` below), answering 401 where v1 answers 404.
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

/** An agent of the organization (404), usable by the key's user under the agents module's rule (401). */
export async function usableAgent(
  db: Queryable,
  principal: OrgPrincipal,
  agentId: number,
): Promise<AgentRow> {
  const [agent] = await db
    .select()
    .from(agents)
    .where(
      and(
        eq(agents.id, agentId),
        eq(agents.organizationId, principal.organizationId),
        isNull(agents.deletedAt),
      ),
    );
  if (!agent) throw notFound('Agent');
  const [allowed] = await db
    .select({ id: agents.id })
    .from(agents)
    .where(and(eq(agents.id, agentId), agentVisibleTo(principal)));
  if (!allowed) throw agentAccessDenied(agentId);
  return agent;
}

/** An agent of the organization the key's user may not use (spec 5: 401 on chats). */
export const agentAccessDenied = (agentId: number) =>
  new ApiError(401, 'agent_access_denied', `This key's user has no permission to agent ${agentId}`);
