import { and, count, eq, sql } from 'drizzle-orm';
import { fieldsOf, recordAudit } from '../../audit/record.js';
import type { ServiceContext } from '../../core/context.js';
import type { Queryable } from '../../db/client.js';
import { type AgentRow, type AgentTool, agentGroups, agentSkills, agents } from '../../db/schema/index.js';
import { notFound, unprocessable } from '../../http/errors.js';
import { offsetOf, type PageQuery } from '../../http/pagination.js';
import { agentVisibleTo } from '../../policies/agents.js';
import { requireAdmin } from '../../policies/roles.js';
import { checkGroupIds, lockGroupAssignments } from '../groups/references.js';
import { linkedIds, replaceLinks } from '../link-tables.js';
import { chatModelConfiguration, fieldRefusal } from '../model-configurations/resolve.js';
import { checkSkillIds } from '../skills/references.js';
import { AGENT_TOOLS, type CreateAgentBody, type UpdateAgentBody } from './schemas.js';

async function linksOf(db: Queryable, ids: number[]) {
  const [skillIds, groupIds] = await Promise.all([
    linkedIds(db, agentSkills, agentSkills.agentId, agentSkills.skillId, ids),
    linkedIds(db, agentGroups, agentGroups.agentId, agentGroups.groupId, ids),
  ]);
  return (id: number) => ({ skillIds: skillIds.get(id)!, groupIds: groupIds.get(id)! });
}

const withLinks = async (db: Queryable, row: AgentRow) => ({
  row,
  links: (await linksOf(db, [row.id]))(row.id),
});

export async function listAgents(ctx: ServiceContext, page: PageQuery) {
  const where = agentVisibleTo(ctx.principal);
  const [rows, [{ total }]] = await Promise.all([
    ctx.db.select().from(agents).where(where).orderBy(agents.id).limit(page.page_size).offset(offsetOf(page)),
    ctx.db.select({ total: count() }).from(agents).where(where),
  ]);
  const links = await linksOf(
    ctx.db,
    rows.map((r) => r.id),
  );
  return { rows: rows.map((row) => ({ row, links: links(row.id) })), total };
}

async function findAgent(db: Queryable, ctx: ServiceContext, id: number): Promise<AgentRow> {
  const [row] = await db
    .select()
    .from(agents)
    .where(and(agentVisibleTo(ctx.principal), eq(agents.id, id)));
  if (!row) throw notFound('Agent');
  return row;
}

export async function getAgent(ctx: ServiceContext, id: number) {
  return withLinks(ctx.db, await findAgent(ctx.db, ctx, id));
}

function checkTools(tools: string[]): AgentTool[] {
  const unknown = tools.filter((tool) => !(AGENT_TOOLS as readonly string[]).includes(tool));
  if (unknown.length > 0) {
    throw unprocessable(`Unknown tools: ${unknown.join(', ')}`, {
      tools: [`unknown: ${unknown.join(', ')}; allowed: ${AGENT_TOOLS.join(', ')}`],
    });
  }
  // Kept in the canonical order, once each.
  return AGENT_TOOLS.filter((tool) => tools.includes(tool));
}

/** `["*"]` (every tool) or distinct tool names; `*` among names would be ambiguous (422). */
function checkApprovalList(names: string[]): string[] {
  const distinct = [...new Set(names.map((name) => name.trim()))];
  if (distinct.includes('*') && distinct.length > 1) {
    throw unprocessable('"*" (every tool) must be the only entry of tools_requiring_approval', {
      tools_requiring_approval: ['"*" stands alone: ["*"] for every tool, or tool names'],
    });
  }
  if (distinct.some((name) => name === '')) {
    throw unprocessable('Tool names must not be blank', {
      tools_requiring_approval: ['a tool name must not be blank'],
    });
  }
  return distinct;
}

/** Every reference is checked against the organization before anything is written (422 otherwise). */
async function checkReferences(tx: Queryable, orgId: number, body: UpdateAgentBody) {
  const tools = body.tools === undefined ? undefined : checkTools(body.tools);
  const toolsRequiringApproval =
    body.tools_requiring_approval === undefined
      ? undefined
      : checkApprovalList(body.tools_requiring_approval);
  if (body.model_configuration_id !== undefined && body.model_configuration_id !== null) {
    await chatModelConfiguration(tx, orgId, body.model_configuration_id, fieldRefusal());
  }
  const skillIds = body.skill_ids === undefined ? undefined : await checkSkillIds(tx, orgId, body.skill_ids);
  const groupIds = body.group_ids === undefined ? undefined : await checkGroupIds(tx, orgId, body.group_ids);
  return { tools, toolsRequiringApproval, skillIds, groupIds };
}

export async function createAgent(ctx: ServiceContext, body: CreateAgentBody) {
  requireAdmin(ctx.principal);
  const orgId = ctx.principal.organizationId;
  return ctx.db.transaction(async (tx) => {
    await lockGroupAssignments(tx, orgId);
    const refs = await checkReferences(tx, orgId, body);
    const [row] = await tx
      .insert(agents)
      .values({
        organizationId: orgId,
        name: body.name,
        instructions: body.instructions,
        modelConfigurationId: body.model_configuration_id ?? null,
        // An agent adds instructions to a chat; unless told otherwise it keeps every tool a chat has.
        tools: refs.tools ?? [...AGENT_TOOLS],
        toolsRequiringApproval: refs.toolsRequiringApproval ?? [],
      })
      .returning();
    const skillIds = refs.skillIds ?? [];
    const groupIds = refs.groupIds ?? [];
    if (skillIds.length)
      await tx.insert(agentSkills).values(skillIds.map((skillId) => ({ agentId: row.id, skillId })));
    if (groupIds.length)
      await tx.insert(agentGroups).values(groupIds.map((groupId) => ({ agentId: row.id, groupId })));
    await recordAudit(tx, ctx, {
      action: 'agent.created',
      resource: { type: 'agent', id: row.id },
      changedFields: fieldsOf(body),
    });
    return { row, links: { skillIds, groupIds } };
  });
}

/** PUT: any subset; `skill_ids` and `group_ids`, when given, replace the links ([] clears them). */
export async function updateAgent(ctx: ServiceContext, id: number, body: UpdateAgentBody) {
  requireAdmin(ctx.principal);
  const orgId = ctx.principal.organizationId;
  return ctx.db.transaction(async (tx) => {
    await lockGroupAssignments(tx, orgId);
    await findAgent(tx, ctx, id);
    const refs = await checkReferences(tx, orgId, body);
    if (refs.skillIds) {
      await replaceLinks(
        tx,
        agentSkills,
        agentSkills.agentId,
        id,
        refs.skillIds.map((skillId) => ({ agentId: id, skillId })),
      );
    }
    if (refs.groupIds) {
      await replaceLinks(
        tx,
        agentGroups,
        agentGroups.agentId,
        id,
        refs.groupIds.map((groupId) => ({ agentId: id, groupId })),
      );
    }
    const [row] = await tx
      .update(agents)
      .set({
        name: body.name,
        instructions: body.instructions,
        modelConfigurationId: body.model_configuration_id,
        tools: refs.tools,
        toolsRequiringApproval: refs.toolsRequiringApproval,
        updatedAt: sql`now()`,
      })
      .where(eq(agents.id, id))
      .returning();
    await recordAudit(tx, ctx, {
      action: 'agent.updated',
      resource: { type: 'agent', id },
      changedFields: fieldsOf(body),
    });
    return withLinks(tx, row);
  });
}

/** Soft delete: chats that used the agent keep their reference. */
export async function deleteAgent(ctx: ServiceContext, id: number) {
  requireAdmin(ctx.principal);
  await ctx.db.transaction(async (tx) => {
    await findAgent(tx, ctx, id);
    await tx.update(agents).set({ deletedAt: sql`now()`, updatedAt: sql`now()` }).where(eq(agents.id, id));
    await recordAudit(tx, ctx, { action: 'agent.deleted', resource: { type: 'agent', id } });
  });
}
