import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { contextOf } from '../../http/context.js';
import { PageQuery, pagination } from '../../http/pagination.js';
import { IdParams, ok, v2Responses } from '../../http/schemas.js';
import type { ChatRuntime } from './runtime.js';
import { MessageCreated, MessageList, SendMessageBody } from './schemas.js';
import { listMessages, prepareTurn } from './service.js';
import { awaitTurn, reattachStream, streamTurn } from './turn-http.js';
import { requireContent } from './validation.js';

const tags = ['Chats'];

/** Send a message and read history (spec 4.1). */
export async function messageRoutes(parent: FastifyInstance, runtime: ChatRuntime): Promise<void> {
  const app = parent.withTypeProvider<TypeBoxTypeProvider>();
  const { replyTimeoutMs } = app.deps.config;

  app.post(
    '/chats/:id/messages',
    {
      schema: {
        operationId: 'sendMessage',
        tags,
        summary: 'Send a message; one turn at a time per chat (409 otherwise)',
        description:
          "With `stream: true` the answer is HTTP 200 `text/event-stream` with the events `content`, `tool_start`, `tool_result`, `done` and `error` (spec 6.1), each with an `id:` line (its sequence number in the turn); a repeat with the same `Idempotency-Key` and body reattaches to the same stream. A message starting with a skill's slash command runs that skill.",
        params: IdParams,
        body: SendMessageBody,
        response: v2Responses({ 200: ok(MessageCreated) }),
      },
    },
    async (request, reply) => {
      const { content, stream } = request.body;
      requireContent(content);
      const ctx = contextOf(request);
      if (request.idempotencyStream) {
        await reattachStream(
          reply,
          runtime,
          request.idempotencyStream,
          undefined,
          request.idempotencyStreamAfter,
        );
        return reply;
      }
      const plan = await prepareTurn(ctx, request.params.id);
      if (stream) {
        await streamTurn(request, reply, runtime, () => runtime.runner.begin(ctx, plan, content), {
          replyTimeoutMs,
        });
        return reply;
      }
      const turn = await runtime.runner.begin(ctx, plan, content);
      const message = await awaitTurn(turn, replyTimeoutMs);
      return { status: 'ok' as const, response: { message } };
    },
  );

  app.get(
    '/chats/:id/messages',
    {
      schema: {
        operationId: 'listMessages',
        description: "The chat's messages with their tool executions, oldest first. Paginated.",
        tags,
        summary: 'Read history, oldest first',
        params: IdParams,
        querystring: PageQuery,
        response: v2Responses({ 200: ok(MessageList) }),
      },
    },
    async (request) => {
      const { messages, total } = await listMessages(contextOf(request), request.params.id, request.query);
      return { status: 'ok' as const, response: { messages, pagination: pagination(request.query, total) } };
    },
  );
}
