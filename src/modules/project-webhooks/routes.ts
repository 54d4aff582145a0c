import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { contextOf } from '../../http/context.js';
import { PageQuery, pagination } from '../../http/pagination.js';
import { IdParams, Message, v1Responses } from '../../http/schemas.js';
import { presentWebhook } from './presenter.js';
import {
  CreatedWebhookResponse,
  CreateWebhookBody,
  WebhookListResponse,
  WebhookParams,
  WebhookResponse,
} from './schemas.js';
import { createWebhook, deleteWebhook, getWebhook, listWebhooks } from './service.js';

const tags = ['Webhooks'];

export const projectWebhookRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.get(
    '/projects/:id/webhooks',
    {
      schema: {
        operationId: 'listProjectWebhooks',
        description: "The project's webhook subscriptions. Paginated.",
        tags,
        summary: "A project's webhooks (without their secrets)",
        params: IdParams,
        querystring: PageQuery,
        response: v1Responses({ 200: WebhookListResponse }),
      },
    },
    async (request) => {
      const { rows, total } = await listWebhooks(contextOf(request), request.params.id, request.query);
      return { webhooks: rows.map(presentWebhook), pagination: pagination(request.query, total) };
    },
  );

  app.post(
    '/projects/:id/webhooks',
    {
      schema: {
        operationId: 'createProjectWebhook',
        description:
          'Events are signed with Standard Webhooks headers (`webhook-id`, `webhook-timestamp`, `webhook-signature`) and retried with exponential backoff for about 24 hours. https and public addresses only, unless the operator allows private ones.',
        tags,
        summary: 'Subscribe a URL to artifact events; the signing secret is in this response only',
        params: IdParams,
        body: CreateWebhookBody,
        response: v1Responses({ 201: CreatedWebhookResponse }),
      },
    },
    async (request, reply) => {
      const { row, secret } = await createWebhook(contextOf(request), request.params.id, request.body);
      reply.status(201);
      return { webhook: { ...presentWebhook(row), secret } };
    },
  );

  app.get(
    '/projects/:id/webhooks/:webhook_id',
    {
      schema: {
        operationId: 'getProjectWebhook',
        summary: 'Get a webhook',
        description: 'One webhook subscription of the project (without its secret).',
        tags,
        params: WebhookParams,
        response: v1Responses({ 200: WebhookResponse }),
      },
    },
    async (request) => ({
      webhook: presentWebhook(
        await getWebhook(contextOf(request), request.params.id, request.params.webhook_id),
      ),
    }),
  );

  app.delete(
    '/projects/:id/webhooks/:webhook_id',
    {
      schema: {
        operationId: 'deleteProjectWebhook',
        summary: 'Delete a webhook',
        description: 'No further events are sent to it; pending retries stop.',
        tags,
        params: WebhookParams,
        response: v1Responses({ 200: Message }),
      },
    },
    async (request) => {
      await deleteWebhook(contextOf(request), request.params.id, request.params.webhook_id);
      return { message: 'Webhook deleted' };
    },
  );
};
