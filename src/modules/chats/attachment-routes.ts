import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import { and, eq } from 'drizzle-orm';
import type { FastifyInstance } from 'fastify';
import { chatAttachments } from '../../db/schema/index.js';
import { contextOf } from '../../http/context.js';
import { ApiError, notFound } from '../../http/errors.js';
import { Id, v2Responses } from '../../http/schemas.js';
import { findChat } from './service.js';

/** GET /chats/:id/attachments/:attachment_id: an image's bytes, to the key that owns the chat. */
export async function attachmentRoutes(parent: FastifyInstance): Promise<void> {
  const app = parent.withTypeProvider<TypeBoxTypeProvider>();
  app.get(
    '/chats/:id/attachments/:attachment_id',
    {
      schema: {
        operationId: 'getChatAttachment',
        tags: ['Chats'],
        summary: "An image attachment's bytes",
        description:
          'The image as it was sent (its media type), to the key that owns the chat. A document attachment has no bytes here (404): read the document through the documents API.',
        params: Type.Object({ id: Id(), attachment_id: Id() }),
        response: {
          ...v2Responses({}),
          200: {
            description: 'The image',
            content: {
              'image/png': { schema: { type: 'string', format: 'binary' } },
              'image/jpeg': { schema: { type: 'string', format: 'binary' } },
              'image/webp': { schema: { type: 'string', format: 'binary' } },
              'image/gif': { schema: { type: 'string', format: 'binary' } },
            },
          },
        },
      },
    },
    async (request, reply) => {
      const ctx = contextOf(request);
      const chat = await findChat(ctx, request.params.id);
      const [row] = await ctx.db
        .select()
        .from(chatAttachments)
        .where(
          and(
            eq(chatAttachments.id, request.params.attachment_id),
            eq(chatAttachments.chatId, chat.id),
            eq(chatAttachments.organizationId, ctx.principal.organizationId),
          ),
        );
      if (!row) throw notFound('Attachment');
      if (!row.data)
        throw new ApiError(
          404,
          'attachment_not_found',
          `Attachment ${row.id} is a document: read it with GET /api/v1/data_center/documents/${row.documentId}`,
        );
      reply.header('content-type', row.mediaType).header('cache-control', 'private, max-age=3600');
      return reply.send(row.data);
    },
  );
}
