import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { contextOf } from '../../http/context.js';
import { PageQuery, pagination } from '../../http/pagination.js';
import { Message, v1Responses } from '../../http/schemas.js';
import { presentWebhook } from './presenter.js';
import {
  CreatedWebhookResponse,
  CreateWebhookBody,
  OrganizationWebhookParams,
  WebhookListResponse,
  WebhookResponse,
} from './schemas.js';
import {
  createOrganizationWebhook,
  deleteOrganizationWebhook,
  getOrganizationWebhook,
  listOrganizationWebhooks,
} from './service.js';

const tags = ['Webhooks'];

/**
 * Organization webhooks (`/api/v1/webhooks`): the project webhooks' shapes, `project_id` null, for
 * the events of every project and the organization's own (documents). Organization admins only.
 */
export const organizationWebhookRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.get(
    '/webhooks',
    {
      schema: {
        operationId: 'listOrganizationWebhooks',
        description:
          "The organization's webhook subscriptions, which receive the events of every project and the organization's document events. Organization admins only. Paginated.",
        tags,
        summary: "The organization's webhooks (without their secrets); admins only",
        querystring: PageQuery,
        response: v1Responses({ 200: WebhookListResponse }),
      },
    },
    async (request) => {
      const { rows, total } = await listOrganizationWebhooks(contextOf(request), request.query);
      return { webhooks: rows.map(presentWebhook), pagination: pagination(request.query, total) };
    },
  );

  app.post(
    '/webhooks',
    {
      schema: {
        operationId: 'createOrganizationWebhook',
        description:
          'Creates an organization webhook. Its events may be any webhook event, including document_processed and document_failed. The signing secret (whsec_...) is returned once.',
        tags,
        summary:
          "Subscribe a URL to events of every project and the organization's documents; the signing secret is in this response only",
        body: CreateWebhookBody,
        response: v1Responses({ 201: CreatedWebhookResponse }),
      },
    },
    async (request, reply) => {
      const { row, secret } = await createOrganizationWebhook(contextOf(request), request.body);
      reply.status(201);
      return { webhook: { ...presentWebhook(row), secret } };
    },
  );

  app.get(
    '/webhooks/:id',
    {
      schema: {
        operationId: 'getOrganizationWebhook',
        summary: 'Get an organization webhook',
        description: 'One organization webhook subscription (without its secret).',
        tags,
        params: OrganizationWebhookParams,
        response: v1Responses({ 200: WebhookResponse }),
      },
    },
    async (request) => ({
      webhook: presentWebhook(await getOrganizationWebhook(contextOf(request), request.params.id)),
    }),
  );

  app.delete(
    '/webhooks/:id',
    {
      schema: {
        operationId: 'deleteOrganizationWebhook',
        summary: 'Delete an organization webhook',
        description: 'No further events are sent to it; pending retries stop.',
        tags,
        params: OrganizationWebhookParams,
        response: v1Responses({ 200: Message }),
      },
    },
    async (request) => {
      await deleteOrganizationWebhook(contextOf(request), request.params.id);
      return { message: 'Webhook deleted' };
    },
  );
};
