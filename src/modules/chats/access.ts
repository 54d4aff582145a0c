import { and, eq, isNull } from 'drizzle-orm';
import type { OrgPrincipal } from '../../core/principal.js';
import type { Queryable } from '../../db/client.js';
import { agents, modelConfigurations, organizations } from '../../db/schema/index.js';
import { ApiError, badRequest, notFound } from '../../http/errors.js';
import { agentVisibleTo } from '../agents/access.js';
import { findProjectFor, type ProjectRow } from '../projects/access.js';

export type AgentRow = typeof agents.$inferSelect;
export type ModelConfigurationRow = typeof modelConfigurations.$inferSelect;

/**
 * The project a chat turn runs in. Spec 5 and 7.1: unknown -> 404, not allowed for the key's user
 * -> 401. Archived projects are read-only for chats: no new chats or turns (404 `project_archived`).
 */
export async function usableProject(
  db: Queryable,
  principal: OrgPrincipal,
  projectId: number,
): Promise<ProjectRow> {
  const found = await findProjectFor(db, principal, projectId);
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
  if (!allowed)
    throw new ApiError(401, 'agent_access_denied', `This key's user has no permission to agent ${agentId}`);
  return agent;
}

/** A chat model configuration of the organization (404 for another organization's or a deleted one). */
export async function chatModelConfiguration(
  db: Queryable,
  organizationId: number,
  id: number,
): Promise<ModelConfigurationRow> {
  const [row] = await db
    .select()
    .from(modelConfigurations)
    .where(
      and(
        eq(modelConfigurations.id, id),
        eq(modelConfigurations.organizationId, organizationId),
        isNull(modelConfigurations.deletedAt),
      ),
    );
  if (!row) throw notFound('Model configuration');
  if (row.purpose !== 'chat')
    throw badRequest(
      `Model configuration ${id} is an embedding model and cannot answer chats`,
      { model_configuration_id: ['is not a chat model'] },
      'invalid_model_configuration',
    );
  return row;
}

/** The model a new chat pins: the one asked for, else the agent's, else the organization's default. */
export async function modelForNewChat(
  db: Queryable,
  organizationId: number,
  requested: number | undefined,
  agent: AgentRow | null,
): Promise<ModelConfigurationRow> {
  if (requested !== undefined) return chatModelConfiguration(db, organizationId, requested);
  if (agent?.modelConfigurationId) {
    const fromAgent = await chatModelConfiguration(db, organizationId, agent.modelConfigurationId).catch(
      () => null,
    );
    if (fromAgent) return fromAgent;
  }
  const [org] = await db
    .select({ id: organizations.defaultModelConfigurationId })
    .from(organizations)
    .where(eq(organizations.id, organizationId));
  if (!org?.id)
    throw new ApiError(500, 'no_default_model', 'The organization has no default model configuration');
  return chatModelConfiguration(db, organizationId, org.id);
}
