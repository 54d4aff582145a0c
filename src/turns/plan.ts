import type { OrgPrincipal } from '../core/principal.js';
import { type Database, rowOf, selectList } from '../db/client.js';
import {
  type AgentRow,
  agents,
  type ChatRow,
  chats,
  type ModelConfigurationRow,
  modelConfigurations,
  type ProjectRow,
  projects,
} from '../db/schema/index.js';

/** Everything a turn needs, checked before the request is accepted (404/401 come from its checks). */
export interface TurnPlan {
  chat: ChatRow;
  project: ProjectRow;
  agent: AgentRow | null;
  configuration: ModelConfigurationRow;
}

/**
 * A chat with its project, agent and model configuration as the turn checks see them, in one
 * statement (issue 14: it sits on the path to the first token; it was four round trips). The
 * joins apply the lookups' own conditions (organization, not deleted); the access rules of
 * src/policies (a member's groups) come back as flags, so each refusal is still told apart.
 */
export const PLAN_SELECT = `
select ${selectList(chats, 'c', 'c_')}, ${selectList(projects, 'p', 'p_')},
  ${selectList(agents, 'a', 'a_')}, ${selectList(modelConfigurations, 'm', 'm_')},
  exists (select 1 from project_groups pg join group_members gm on gm.group_id = pg.group_id
          where pg.project_id = p.id and gm.user_id = $4) as project_shared,
  (not exists (select 1 from agent_groups ag where ag.agent_id = a.id)
   or exists (select 1 from agent_groups ag join group_members gm on gm.group_id = ag.group_id
              where ag.agent_id = a.id and gm.user_id = $4)) as agent_shared
from chats c
left join projects p on p.id = c.project_id and p.organization_id = $2 and p.deleted_at is null
left join agents a on a.id = c.agent_id and a.organization_id = $2 and a.deleted_at is null
left join model_configurations m
  on m.id = c.model_configuration_id and m.organization_id = $2 and m.deleted_at is null
where c.id = $1 and c.organization_id = $2 and c.api_key_id = $3 and c.archived_at is null`;

/** The parameters of PLAN_SELECT: $1 chat, $2 organization, $3 key, $4 user (0: none). */
export const planParams = (principal: OrgPrincipal, chatId: number) => [
  chatId,
  principal.organizationId,
  principal.keyId,
  principal.userId ?? 0,
];

export interface PlanRows {
  chat: ChatRow;
  /** Null: no such live project in the organization. */
  project: ProjectRow | null;
  /** Whether the key's user may use the project (src/policies/projects.ts). */
  projectAllowed: boolean;
  /** Null: the chat has no agent, or it is gone (`chat.agentId` tells). */
  agent: AgentRow | null;
  /** Whether the key's user may use the agent (src/policies/agents.ts). */
  agentAllowed: boolean;
  /** Null: no such live configuration in the organization. */
  configuration: ModelConfigurationRow | null;
}

/** The rows behind a turn's plan; null when the key has no such chat (the caller's 404). */
export async function loadPlanRows(
  database: Database,
  principal: OrgPrincipal,
  chatId: number,
): Promise<PlanRows | null> {
  const { rows } = await database.query<Record<string, unknown>>(PLAN_SELECT, planParams(principal, chatId));
  const raw = rows[0];
  return raw ? planRowsOf(principal, raw) : null;
}

/** PLAN_SELECT's row as PlanRows. */
export function planRowsOf(principal: OrgPrincipal, raw: Record<string, unknown>): PlanRows {
  // Admins (organization keys, admin users) reach every project and agent of the organization.
  const admin = principal.role === 'admin';
  return {
    chat: rowOf(chats, raw, 'c_'),
    project: raw.p_id === null ? null : rowOf(projects, raw, 'p_'),
    projectAllowed: admin || raw.project_shared === true,
    agent: raw.a_id === null ? null : rowOf(agents, raw, 'a_'),
    agentAllowed: admin || raw.agent_shared === true,
    configuration: raw.m_id === null ? null : rowOf(modelConfigurations, raw, 'm_'),
  };
}
