import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { contextOf } from '../../http/context.js';
import { PageQuery, pagination } from '../../http/pagination.js';
import { v1Responses } from '../../http/schemas.js';
import { presentDelivery } from './presenter.js';
import {
  DeliveryListResponse,
  DeliveryParams,
  DeliveryResponse,
  OrganizationDeliveryParams,
  OrganizationWebhookParams,
  WebhookParams,
} from './schemas.js';
import { listDeliveries, redeliver, sendTestEvent } from './service.js';

const tags = ['Webhooks'];

export const webhookDeliveryRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.get(
    '/projects/:id/webhooks/:webhook_id/deliveries',
    {
      schema: {
        operationId: 'listWebhookDeliveries',
        description:
          'Every attempt to deliver an event to this webhook, with the response status or error. Paginated.',
        tags,
        summary: "A webhook's delivery log, newest first",
        params: WebhookParams,
        querystring: PageQuery,
        response: v1Responses({ 200: DeliveryListResponse }),
      },
    },
    async (request) => {
      const { id, webhook_id: webhookId } = request.params;
      const { rows, total } = await listDeliveries(contextOf(request), id, webhookId, request.query);
      return { deliveries: rows.map(presentDelivery), pagination: pagination(request.query, total) };
    },
  );

  app.post(
    '/projects/:id/webhooks/:webhook_id/deliveries/:delivery_id/redeliver',
    {
      schema: {
        operationId: 'redeliverWebhookDelivery',
        description: 'Queues the event again with the same `webhook-id`, so receivers can deduplicate it.',
        tags,
        summary: 'Send a delivery again (same webhook-id); it is attempted in the background',
        params: DeliveryParams,
        response: v1Responses({ 202: DeliveryResponse }),
      },
    },
    async (request, reply) => {
      const { id, webhook_id: webhookId, delivery_id: deliveryId } = request.params;
      const row = await redeliver(contextOf(request), app.deps.jobs, id, webhookId, deliveryId);
      reply.status(202);
      return { delivery: presentDelivery(row) };
    },
  );

  app.post(
    '/projects/:id/webhooks/:webhook_id/test',
    {
      schema: {
        operationId: 'testProjectWebhook',
        description:
          'Sends a signed `webhook_test` event at once and answers with the outcome of the attempt.',
        tags,
        summary: 'Send a signed webhook_test event now and report the attempt',
        params: WebhookParams,
        response: v1Responses({ 200: DeliveryResponse }),
      },
    },
    async (request) => {
      const { id, webhook_id: webhookId } = request.params;
      const row = await sendTestEvent(contextOf(request), app.deps, id, webhookId);
      return { delivery: presentDelivery(row) };
    },
  );

  // The same for organization webhooks (`/api/v1/webhooks/:id`).
  app.get(
    '/webhooks/:id/deliveries',
    {
      schema: {
        operationId: 'listOrganizationWebhookDeliveries',
        description:
          'Every attempt to deliver an event to this organization webhook, with the response status or error. Paginated.',
        tags,
        summary: "An organization webhook's delivery log, newest first",
        params: OrganizationWebhookParams,
        querystring: PageQuery,
        response: v1Responses({ 200: DeliveryListResponse }),
      },
    },
    async (request) => {
      const { rows, total } = await listDeliveries(
        contextOf(request),
        null,
        request.params.id,
        request.query,
      );
      return { deliveries: rows.map(presentDelivery), pagination: pagination(request.query, total) };
    },
  );

  app.post(
    '/webhooks/:id/deliveries/:delivery_id/redeliver',
    {
      schema: {
        operationId: 'redeliverOrganizationWebhookDelivery',
        description:
          'Schedules the delivery again with the same webhook-id; the attempt runs in the background (202).',
        tags,
        summary: 'Send a delivery of an organization webhook again (same webhook-id)',
        params: OrganizationDeliveryParams,
        response: v1Responses({ 202: DeliveryResponse }),
      },
    },
    async (request, reply) => {
      const { id, delivery_id: deliveryId } = request.params;
      const row = await redeliver(contextOf(request), app.deps.jobs, null, id, deliveryId);
      reply.status(202);
      return { delivery: presentDelivery(row) };
    },
  );

  app.post(
    '/webhooks/:id/test',
    {
      schema: {
        operationId: 'testOrganizationWebhook',
        description:
          'Sends a signed webhook_test event to the organization webhook at once and answers with the recorded attempt.',
        tags,
        summary: 'Send a signed webhook_test event to an organization webhook now and report the attempt',
        params: OrganizationWebhookParams,
        response: v1Responses({ 200: DeliveryResponse }),
      },
    },
    async (request) => {
      const row = await sendTestEvent(contextOf(request), app.deps, null, request.params.id);
      return { delivery: presentDelivery(row) };
    },
  );
};
