import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import { contextOf } from '../../http/context.js';
import { pagination } from '../../http/pagination.js';
import { IdParams, ok, v2Responses } from '../../http/schemas.js';
import { messageRoutes } from './messages-routes.js';
import { presentChat } from './presenter.js';
import { createChatRuntime } from './runtime.js';
import { ChatCreated, ChatList, ChatListQuery, ChatRead, CreateChatBody } from './schemas.js';
import { archiveChat, createChat, findChat, listChats, messageCount } from './service.js';
import { streamRoutes } from './stream-routes.js';
import { chatOfStream } from './turn-cancel.js';
import { awaitTurn, reattachStream, streamTurn, withExtra } from './turn-http.js';
import { requireContent } from './validation.js';

const tags = ['Chats'];

export const STREAM_NOTE =
  'With `stream: true` the answer is HTTP 200 `text/event-stream` with the events `content`, `tool_start`, `tool_result`, `done` and `error` (spec 6.1), each with an `id:` line (its sequence number in the turn). A repeat with the same `Idempotency-Key` and body reattaches to the same stream from its start.';

/** Chat endpoints of spec 4.1 (`/api/v2/chats...`). */
export const chatRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const runtime = createChatRuntime(app);
  const { replyTimeoutMs } = app.deps.config;

  app.post(
    '/chats',
    {
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
      const { body } = request;
      if (body.content !== undefined) requireContent(body.content);
      const ctx = contextOf(request);
      const repeated = request.idempotencyStream;
      if (repeated) {
        // The first request's chat and turn, not new ones.
        await reattachStream(
          reply,
          runtime,
          repeated,
          () => chatOfStream(ctx, repeated),
          request.idempotencyStreamAfter,
        );
        return reply;
      }
      const { chat, plan } = await createChat(ctx, body);
      const view = presentChat(chat);
      if (body.content === undefined) {
        reply.status(201);
        return { status: 'ok' as const, response: { chat: view } };
      }
      const content = body.content;
      if (body.stream) {
        await streamTurn(
          request,
          reply,
          runtime,
          () => runtime.runner.begin(ctx, plan, content, { announceChat: view }),
          { announceChat: view, replyTimeoutMs },
        );
        return reply;
      }
      const extra = { chat_id: chat.id };
      const turn = await runtime.runner.begin(ctx, plan, content).catch((err) => {
        throw withExtra(err, extra);
      });
      const message = await awaitTurn(turn, replyTimeoutMs, extra);
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
    async (request) => {
      const { rows, total } = await listChats(contextOf(request), request.query);
      return {
        status: 'ok' as const,
        response: {
          chats: rows.map((row) => presentChat(row)),
          pagination: pagination(request.query, total),
        },
      };
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

  await messageRoutes(app, runtime);
  await streamRoutes(app, runtime);
};
