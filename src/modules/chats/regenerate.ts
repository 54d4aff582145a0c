import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import { and, asc, desc, eq, gt, inArray, lt, lte, sql } from 'drizzle-orm';
import type { FastifyInstance } from 'fastify';
import type { ServiceContext } from '../../core/context.js';
import { chatMessages, chats, type MessageRow, toolExecutions } from '../../db/schema/index.js';
import { contextOf } from '../../http/context.js';
import { conflict, notFound } from '../../http/errors.js';
import { Id, ok, v2Responses } from '../../http/schemas.js';
import { requestArrival } from '../../telemetry/turn-timing.js';
import { copyAttachments } from './attachments.js';
import { presentChat } from './presenter.js';
import { ChatCreated, MessageCreated, MessageView } from './schemas.js';
import { conversationMessage, findChat, historyMessage, prepareTurn, presentMessages } from './service.js';
import { awaitTurn, reattachRepeat, STREAM_NOTE, streamTurn } from './turn-http.js';

const tags = ['Chats'];

const MessageParams = Type.Object({ id: Id(), message_id: Id() });
const RegenerateBody = Type.Object(
  { stream: Type.Optional(Type.Boolean({ default: false, description: 'Answer as text/event-stream' })) },
  { title: 'RegenerateBody' },
);
const ForkBody = Type.Object(
  { message_id: Id({ description: "The last message copied: the new chat's history ends with it" }) },
  { title: 'ForkBody' },
);
const VersionList = Type.Object(
  {
    versions: Type.Array(MessageView, {
      description: 'The replies this one replaced, oldest first ([] when it was never regenerated)',
    }),
  },
  { title: 'MessageVersions' },
);

/** A message of the chat that history shows (404 otherwise: unknown, another chat's, still generating, replaced). */
async function historyMessageOf(ctx: ServiceContext, chatId: number, messageId: number): Promise<MessageRow> {
  const [row] = await ctx.db
    .select()
    .from(chatMessages)
    .where(and(eq(chatMessages.id, messageId), eq(chatMessages.chatId, chatId), historyMessage));
  if (!row) throw notFound('Message');
  return row;
}

/**
 * The checks of a regeneration: the message is the chat's last reply in the conversation (409
 * otherwise), and the user message it answered.
 */
async function regenerationOf(ctx: ServiceContext, chatId: number, messageId: number) {
  const reply = await historyMessageOf(ctx, chatId, messageId);
  const notLast = () =>
    conflict(
      "Only the chat's last assistant message can be regenerated; fork the chat to answer an earlier message again",
      'not_last_message',
    );
  if (reply.role !== 'assistant') throw notLast();
  if (reply.status === 'failed')
    throw conflict('A failed reply cannot be regenerated: send the message again', 'not_last_message');
  const [later] = await ctx.db
    .select({ id: chatMessages.id })
    .from(chatMessages)
    .where(and(eq(chatMessages.chatId, chatId), gt(chatMessages.id, reply.id), historyMessage))
    .limit(1);
  if (later) throw notLast();
  const [question] = await ctx.db
    .select()
    .from(chatMessages)
    .where(
      and(
        eq(chatMessages.chatId, chatId),
        lt(chatMessages.id, reply.id),
        eq(chatMessages.role, 'user'),
        conversationMessage,
      ),
    )
    .orderBy(desc(chatMessages.id))
    .limit(1);
  if (!question) throw notLast();
  return { reply, question };
}

/** The replies `messageId` replaced (or, for a replaced reply, the other versions of its place). */
async function versionsOf(ctx: ServiceContext, chatId: number, messageId: number): Promise<MessageView[]> {
  await findChat(ctx, chatId);
  const [row] = await ctx.db
    .select()
    .from(chatMessages)
    .where(
      and(
        eq(chatMessages.id, messageId),
        eq(chatMessages.chatId, chatId),
        eq(chatMessages.role, 'assistant'),
      ),
    );
  if (!row || row.status === 'generating') throw notFound('Message');
  const current = row.replacedById ?? row.id;
  const rows = await ctx.db
    .select()
    .from(chatMessages)
    .where(and(eq(chatMessages.chatId, chatId), eq(chatMessages.replacedById, current)))
    .orderBy(asc(chatMessages.id));
  return presentMessages(ctx.db, rows);
}

/**
 * A new chat of the calling key with the same project, agent and model, and copies of the
 * history up to and including `messageId` (with their tool executions, citations and attachments).
 */
async function forkChat(ctx: ServiceContext, chatId: number, messageId: number) {
  const plan = await prepareTurn(ctx, chatId);
  const last = await historyMessageOf(ctx, chatId, messageId);
  const { principal } = ctx;
  return ctx.db.transaction(async (tx) => {
    const [chat] = await tx
      .insert(chats)
      .values({
        organizationId: principal.organizationId,
        apiKeyId: principal.keyId,
        userId: principal.kind === 'personal' ? principal.userId : null,
        projectId: plan.project.id,
        agentId: plan.agent?.id ?? null,
        modelConfigurationId: plan.configuration.id,
        title: plan.chat.title,
      })
      .returning();
    const rows = await tx
      .select()
      .from(chatMessages)
      .where(and(eq(chatMessages.chatId, chatId), lte(chatMessages.id, last.id), historyMessage))
      .orderBy(asc(chatMessages.id));
    if (rows.length === 0) return chat;
    const copies = await tx
      .insert(chatMessages)
      .values(
        rows.map(({ id: _id, chatId: _chat, regeneratesId: _r, replacedById: _b, ...row }) => ({
          ...row,
          chatId: chat.id,
        })),
      )
      .returning({ id: chatMessages.id });
    // Inserted in order, so the copies' ids follow the originals'.
    const idOf = new Map(rows.map((row, i) => [row.id, copies[i].id]));
    const executions = await tx
      .select()
      .from(toolExecutions)
      .where(inArray(toolExecutions.messageId, [...idOf.keys()]))
      .orderBy(asc(toolExecutions.id));
    if (executions.length > 0)
      await tx
        .insert(toolExecutions)
        .values(executions.map(({ id: _id, ...e }) => ({ ...e, messageId: idOf.get(e.messageId)! })));
    await copyAttachments(tx, idOf, chat.id);
    await tx.update(chats).set({ updatedAt: sql`now()` }).where(eq(chats.id, chat.id));
    return chat;
  });
}

/** Regenerating a reply, its versions, and forking a chat (issue 18). */
export async function regenerateRoutes(parent: FastifyInstance): Promise<void> {
  const app = parent.withTypeProvider<TypeBoxTypeProvider>();
  const { deps } = app;

  app.post(
    '/chats/:id/messages/:message_id/regenerate',
    {
      schema: {
        operationId: 'regenerateMessage',
        tags,
        summary: "Regenerate the chat's last reply",
        description: `Runs a new turn for the user message the reply answered; the new reply takes the old one's place in history once it completes (the old one is listed by GET .../versions). Only the chat's last assistant message: 409 otherwise. A failed regeneration leaves the old reply in place. ${STREAM_NOTE}`,
        params: MessageParams,
        body: RegenerateBody,
        response: v2Responses({ 200: ok(MessageCreated) }),
      },
    },
    async (request, reply) => {
      const arrivedAt = requestArrival(reply);
      const ctx = contextOf(request);
      if (await reattachRepeat(request, reply, deps)) return reply;
      const { id, message_id: messageId } = request.params;
      const plan = await prepareTurn(ctx, id);
      const { reply: old, question } = await regenerationOf(ctx, id, messageId);
      const options = {
        arrivedAt,
        additions: { regenerate: { userMessageId: question.id, replacedMessageId: old.id } },
      };
      const start = () => deps.turns.begin(ctx, plan, question.content, options);
      if (request.body?.stream) {
        await streamTurn(request, reply, deps, start, {});
        return reply;
      }
      const message = await awaitTurn(reply, await start(), deps.config.replyTimeoutMs);
      return { status: 'ok' as const, response: { message } };
    },
  );

  app.get(
    '/chats/:id/messages/:message_id/versions',
    {
      schema: {
        operationId: 'listMessageVersions',
        tags,
        summary: 'List the replies a regenerated reply replaced',
        description:
          'The earlier versions of an assistant message, oldest first: the replies regeneration replaced. For a replaced reply, the other replaced versions of the same place. 404 for a message that is not an assistant message of the chat.',
        params: MessageParams,
        response: v2Responses({ 200: ok(VersionList) }),
      },
    },
    async (request) => {
      const { id, message_id: messageId } = request.params;
      return {
        status: 'ok' as const,
        response: { versions: await versionsOf(contextOf(request), id, messageId) },
      };
    },
  );

  app.post(
    '/chats/:id/fork',
    {
      schema: {
        operationId: 'forkChat',
        tags,
        summary: 'Fork a chat at a message',
        description:
          "A new chat owned by the calling key, with the same project, agent and model, holding copies of the history up to and including `message_id` (tool executions, citations and attachments included). Editing a message is a fork at the message before it, followed by a send. 404 when the message is not in the chat's history.",
        params: Type.Object({ id: Id() }),
        body: ForkBody,
        response: v2Responses({ 201: ok(ChatCreated) }),
      },
    },
    async (request, reply) => {
      const chat = await forkChat(contextOf(request), request.params.id, request.body.message_id);
      reply.status(201);
      return { status: 'ok' as const, response: { chat: presentChat(chat) } };
    },
  );
}
