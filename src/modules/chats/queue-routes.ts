import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { contextOf } from '../../http/context.js';
import { Id, ok, Timestamp, v2Responses } from '../../http/schemas.js';
import { QUEUE_LIMIT } from '../../turns/queue-store.js';
import { findChat } from './service.js';

const tags = ['Chats'];

export const QueuedMessageView = Type.Object(
  {
    message_id: Id({
      description: 'The id of the waiting message (its chat message gets its own id once its turn starts)',
    }),
    content: Type.String(),
    position: Type.Integer({ minimum: 1, description: '1 is next' }),
    created_at: Timestamp,
  },
  { title: 'QueuedMessage' },
);
const ChatQueueView = Type.Object({ queued: Type.Array(QueuedMessageView) }, { title: 'ChatQueue' });
const QueueEntryParams = Type.Object({ id: Id(), message_id: Id() });

/** The messages waiting for a busy chat (`if_busy: "enqueue"`, issue 17). */
export async function queueRoutes(parent: FastifyInstance): Promise<void> {
  const app = parent.withTypeProvider<TypeBoxTypeProvider>();
  const { chatQueue } = app.deps;

  app.get(
    '/chats/:id/queue',
    {
      schema: {
        operationId: 'listChatQueue',
        tags,
        summary: 'List the messages waiting for the chat, next first',
        description: `Messages sent with \`if_busy: "enqueue"\` (or \`"interrupt"\`) that wait for the chat's running turn to end, next first (at most ${QUEUE_LIMIT} enqueued). They are not history until their turn starts.`,
        params: Type.Object({ id: Id() }),
        response: v2Responses({ 200: ok(ChatQueueView) }),
      },
    },
    async (request) => {
      const ctx = contextOf(request);
      const chat = await findChat(ctx, request.params.id);
      return { status: 'ok' as const, response: { queued: await chatQueue.list(ctx, chat.id) } };
    },
  );

  app.delete(
    '/chats/:id/queue/:message_id',
    {
      schema: {
        operationId: 'removeQueuedMessage',
        tags,
        summary: 'Remove a waiting message from the chat queue (204)',
        description:
          'The message will not run; a client waiting for it gets 409 `dequeued` (as the status, or as an `error` event). 404 when it is not waiting (unknown, already started or removed).',
        params: QueueEntryParams,
        response: v2Responses({ 204: Type.Null({ description: 'Removed' }) }),
      },
    },
    async (request, reply) => {
      const ctx = contextOf(request);
      const chat = await findChat(ctx, request.params.id);
      await chatQueue.remove(ctx, chat.id, request.params.message_id);
      reply.status(204).send(null);
      return reply;
    },
  );
}
