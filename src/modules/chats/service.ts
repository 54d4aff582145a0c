import { and, asc, count, eq, inArray, isNull, or, sql } from 'drizzle-orm';
import { recordAudit } from '../../audit/record.js';
import type { ServiceContext } from '../../core/context.js';
import type { OrgPrincipal } from '../../core/principal.js';
import type { Queryable } from '../../db/client.js';
import {
  type AgentRow,
  type ChatRow,
  chatMessages,
  chats,
  type MessageRow,
  type ToolExecutionRow,
  toolExecutions,
} from '../../db/schema/index.js';
import { notFound } from '../../http/errors.js';
import { agentAccessDenied, usableAgent } from '../../policies/agents.js';
import { checkUsableProject, usableProject } from '../../policies/projects.js';
import { loadPlanRows, type PlanRows, type TurnPlan } from '../../turns/plan.js';
import { dropChatQueue } from '../../turns/queue-store.js';
import { CHAT_REFUSAL, checkChatModel, chooseChatModel } from '../model-configurations/resolve.js';
import { attachmentsOf } from './attachments.js';
import { presentMessage } from './presenter.js';
import type { CreateChatBody, MessageView } from './schemas.js';

const TITLE_MAX = 60;

/** A chat's title from its first user message: one line, at most 60 characters, cut at a word. */
export function titleFrom(content: string): string | null {
  const line = content.replace(/\s+/g, ' ').trim();
  if (!line) return null;
  if (line.length <= TITLE_MAX) return line;
  const cut = line.slice(0, TITLE_MAX - 1);
  const space = cut.lastIndexOf(' ');
  return `${(space > TITLE_MAX / 2 ? cut.slice(0, space) : cut).trimEnd()}…`;
}

/** Chats the calling key created: the one visibility rule of spec 1 and 5. */
const ownedBy = (principal: OrgPrincipal) =>
  and(
    eq(chats.organizationId, principal.organizationId),
    eq(chats.apiKeyId, principal.keyId),
    isNull(chats.archivedAt),
  );

/**
 * What the model is given as the conversation: finished messages, and replies a cancel request
 * stopped (status `cancelled` without an error). A failed turn's messages never reach the model.
 */
export const conversationMessage = and(
  or(
    eq(chatMessages.status, 'completed'),
    and(eq(chatMessages.role, 'assistant'), eq(chatMessages.status, 'cancelled'), isNull(chatMessages.error)),
  ),
  // A reply replaced by a regenerated one is only listed among its versions (regenerate.ts).
  isNull(chatMessages.replacedById),
);

/**
 * History (and `message_count`): the conversation, plus both messages of each failed turn, shown
 * with `status: "failed"` so the user can tell their message was not answered (docs/decisions.md).
 * A reply still generating is not history yet.
 */
export const historyMessage = or(
  conversationMessage,
  // A failed regeneration leaves the reply it was to replace in place (docs/decisions.md).
  and(eq(chatMessages.status, 'failed'), isNull(chatMessages.regeneratesId)),
);

export async function findChat(
  ctx: Pick<ServiceContext, 'db' | 'principal'>,
  chatId: number,
): Promise<ChatRow> {
  const [row] = await ctx.db
    .select()
    .from(chats)
    .where(and(eq(chats.id, chatId), ownedBy(ctx.principal)));
  if (!row) throw notFound('Chat');
  return row;
}

export async function createChat(
  ctx: ServiceContext,
  body: CreateChatBody,
): Promise<{ chat: ChatRow; plan: TurnPlan }> {
  const { principal, db } = ctx;
  const project = await usableProject(db, principal, body.project_id);
  const agent = body.agent_id === undefined ? null : await usableAgent(db, principal, body.agent_id);
  // The model asked for, else the agent's (if still a usable chat model), else the organization's default.
  const model = await chooseChatModel(db, principal.organizationId, {
    requested: body.model_configuration_id,
    fallbacks: [agent?.modelConfigurationId ?? null],
    refusal: CHAT_REFUSAL,
  });
  const [row] = await db
    .insert(chats)
    .values({
      organizationId: principal.organizationId,
      apiKeyId: principal.keyId,
      userId: principal.kind === 'personal' ? principal.userId : null,
      projectId: project.id,
      agentId: agent?.id ?? null,
      modelConfigurationId: model.id,
      title: body.content === undefined ? null : titleFrom(body.content),
    })
    .returning();
  return { chat: row, plan: { chat: row, project, agent, configuration: model } };
}

/**
 * The checks before a message is accepted: the chat's project and agent must still be usable by
 * the key (404/401, spec 5) and its pinned model must still exist.
 */
export async function prepareTurn(ctx: ServiceContext, chatId: number): Promise<TurnPlan> {
  // One statement for the chat and the three lookups (they sit on the path to the model's first
  // token); the refusals come in the order of the checks: chat, project, agent, model.
  const rows = await loadPlanRows(ctx.database, ctx.principal, chatId);
  if (!rows) throw notFound('Chat');
  return checkPlan(rows);
}

/** prepareTurn's checks on the plan's rows: the refusals in the order chat, project, agent, model. */
export function checkPlan(rows: PlanRows): TurnPlan {
  const { chat } = rows;
  const project = checkUsableProject(
    chat.projectId,
    rows.project && { project: rows.project, allowed: rows.projectAllowed },
  );
  let agent: AgentRow | null = null;
  if (chat.agentId !== null) {
    if (!rows.agent) throw notFound('Agent');
    if (!rows.agentAllowed) throw agentAccessDenied(chat.agentId);
    agent = rows.agent;
  }
  const configuration = checkChatModel(chat.modelConfigurationId, rows.configuration, CHAT_REFUSAL);
  return { chat, project, agent, configuration };
}

export async function messageCount(db: Queryable, chatId: number): Promise<number> {
  const [{ total }] = await db
    .select({ total: count() })
    .from(chatMessages)
    .where(and(eq(chatMessages.chatId, chatId), historyMessage));
  return total;
}

export async function archiveChat(ctx: ServiceContext, chatId: number): Promise<void> {
  await ctx.db.transaction(async (tx) => {
    const archived = await tx
      .update(chats)
      .set({ archivedAt: sql`now()`, updatedAt: sql`now()` })
      .where(and(eq(chats.id, chatId), ownedBy(ctx.principal)))
      .returning({ id: chats.id });
    if (archived.length === 0) throw notFound('Chat');
    await dropChatQueue(tx, chatId);
    await recordAudit(tx, ctx, {
      action: 'chat.archived',
      resource: { type: 'chat', id: chatId },
      changedFields: ['archived_at'],
    });
  });
}

async function executionsOf(db: Queryable, messageIds: number[]): Promise<Map<number, ToolExecutionRow[]>> {
  const byMessage = new Map<number, ToolExecutionRow[]>();
  if (messageIds.length === 0) return byMessage;
  const rows = await db
    .select()
    .from(toolExecutions)
    .where(inArray(toolExecutions.messageId, messageIds))
    .orderBy(asc(toolExecutions.id));
  for (const row of rows) byMessage.set(row.messageId, [...(byMessage.get(row.messageId) ?? []), row]);
  return byMessage;
}

export async function presentMessages(db: Queryable, rows: MessageRow[]): Promise<MessageView[]> {
  const ids = rows.map((r) => r.id);
  const [executions, attachments] = await Promise.all([executionsOf(db, ids), attachmentsOf(db, ids)]);
  return rows.map((row) => presentMessage(row, executions.get(row.id), attachments.get(row.id)));
}

export async function messageView(db: Queryable, messageId: number): Promise<MessageView> {
  const [row] = await db.select().from(chatMessages).where(eq(chatMessages.id, messageId));
  if (!row) throw notFound('Message');
  const [view] = await presentMessages(db, [row]);
  return view;
}
