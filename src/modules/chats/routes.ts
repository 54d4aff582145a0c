import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import { contextOf } from '../../http/context.js';
import { badRequest } from '../../http/errors.js';
import { sendJsonText } from '../../http/json-text.js';
import { pagination } from '../../http/pagination.js';
import { IdParams, ok, v2Responses } from '../../http/schemas.js';
import { requestArrival } from '../../telemetry/turn-timing.js';
import { chatOfStream } from '../../turns/reattach.js';
import { compileResponseFormat } from '../../turns/structured-output.js';
import { watchPauses } from '../../turns/turn-stops.js';
import { approvalRoutes, turnStops } from './approvals-routes.js';
import { attachmentRoutes } from './attachment-routes.js';
import { ATTACHMENT_BODY_LIMIT, prepareAttachments } from './attachments.js';
import { createEmptyChat } from './create-empty.js';
import { chatListPage } from './list-page.js';
import { messageRoutes } from './messages-routes.js';
import { presentChat } from './presenter.js';
import { queueRoutes } from './queue-routes.js';
import { regenerateRoutes } from './regenerate.js';
import { ChatCreated, ChatList, ChatListQuery, ChatRead, CreateChatBody } from './schemas.js';
import { archiveChat, createChat, findChat, messageCount } from './service.js';
import { streamRoutes } from './stream-routes.js';
import { awaitTurn, reattachStream, STREAM_NOTE, streamTurn, withExtra } from './turn-http.js';
import { requireContent } from './validation.js';

const tags = ['Chats'];

/** Chat endpoints of spec 4.1 (`/api/v2/chats...`). */
export const chatRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const { deps } = app;
  const { replyTimeoutMs } = deps.config;

  app.post(
    '/chats',
    {
      // Images come inline (up to ten of 5 MB each, in base64).
      bodyLimit: ATTACHMENT_BODY_LIMIT,
      schema: {
        operationId: 'createChat',
        tags,
        summary: 'Create a chat, optionally sending the first message',
        description: STREAM_NOTE,
        body: CreateChatBody,
        response: v2Responses({ 201: ok(ChatCreated) }),
      },
    },
    async (request, reply) => {
      const arrivedAt = requestArrival(reply);
      const { body } = request;
      if (body.content !== undefined) requireContent(body.content);
      if (body.response_format !== undefined && body.content === undefined)
        throw badRequest('response_format applies to a reply: send it with content', {
          response_format: ['needs content'],
        });
      if (body.attachments !== undefined && body.content === undefined)
        throw badRequest('attachments are sent with a message: send them with content', {
          attachments: ['needs content'],
        });
      const structured = compileResponseFormat(body.response_format);
      const ctx = contextOf(request);
      const repeated = request.idempotencyStream;
      if (repeated) {
        // The first request's chat and turn, not new ones.
        await reattachStream(
          reply,
          deps,
          repeated,
          () => chatOfStream(ctx, repeated),
          request.idempotencyStreamAfter,
        );
        return reply;
      }
      if (body.content === undefined && body.agent_id === undefined) {
        // The common empty chat: one statement (create-empty.ts).
        const chat = await createEmptyChat(ctx, body);
        deps.turns.created(ctx.principal, chat);
        reply.status(201);
        return { status: 'ok' as const, response: { chat } };
      }
      // Checked before the chat exists, so a refused attachment creates nothing.
      const attachments = await prepareAttachments(ctx, body.project_id, body.attachments);
      const additions = { structured, attachments };
      const { chat, plan } = await createChat(ctx, body);
      const view = presentChat(chat);
      if (body.content === undefined) {
        deps.turns.created(ctx.principal, view);
        reply.status(201);
        return { status: 'ok' as const, response: { chat: view } };
      }
      const content = body.content;
      if (body.stream) {
        await streamTurn(
          request,
          reply,
          deps,
          () => deps.turns.begin(ctx, plan, content, { announceChat: view, arrivedAt, additions }),
          { announceChat: view },
        );
        return reply;
      }
      const extra = { chat_id: chat.id };
      const turn = await deps.turns.begin(ctx, plan, content, { arrivedAt, additions }).catch((err) => {
        throw withExtra(err, extra);
      });
      const message = await awaitTurn(
        reply,
        turn,
        replyTimeoutMs,
        extra,
        watchPauses(turnStops(deps), plan, turn),
      );
      reply.status(201);
      return { status: 'ok' as const, response: { chat: view, message } };
    },
  );

  app.get(
    '/chats',
    {
      schema: {
        operationId: 'listChats',
        description:
          'Chats created with the calling key (a chat belongs to the key that created it), optionally of one project. Paginated.',
        tags,
        summary: "List the calling key's chats, newest first",
        querystring: ChatListQuery,
        response: v2Responses({ 200: ok(ChatList) }),
      },
    },
    async (request, reply) => {
      const { chatsJson, total } = await chatListPage(contextOf(request), request.query);
      // PostgreSQL wrote the chats' JSON (list-page.ts): sent as text, past the serializer.
      const page = JSON.stringify(pagination(request.query, total));
      return sendJsonText(reply, `{"status":"ok","response":{"chats":${chatsJson},"pagination":${page}}}`);
    },
  );

  app.get(
    '/chats/:id',
    {
      schema: {
        operationId: 'getChat',
        description:
          'One chat of the calling key, with its message count; 404 for chats of other keys and archived chats.',
        tags,
        summary: 'Get a chat',
        params: IdParams,
        response: v2Responses({ 200: ok(ChatRead) }),
      },
    },
    async (request) => {
      const ctx = contextOf(request);
      const chat = await findChat(ctx, request.params.id);
      return {
        status: 'ok' as const,
        response: { chat: presentChat(chat, await messageCount(ctx.db, chat.id)) },
      };
    },
  );

  app.delete(
    '/chats/:id',
    {
      schema: {
        operationId: 'archiveChat',
        description: 'Archives the chat: 204, and afterwards every chat endpoint answers 404 for it.',
        tags,
        summary: 'Archive a chat (204; afterwards 404 on every chat endpoint)',
        params: IdParams,
        response: v2Responses({ 204: Type.Null({ description: 'Archived' }) }),
      },
    },
    async (request, reply) => {
      await archiveChat(contextOf(request), request.params.id);
      reply.status(204).send(null);
      return reply;
    },
  );

  await messageRoutes(app);
  await streamRoutes(app);
  await approvalRoutes(app);
  await queueRoutes(app);
  await regenerateRoutes(app);
  await attachmentRoutes(app);
};
