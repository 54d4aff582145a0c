import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { contextOf } from '../../http/context.js';
import { V1Error, v1Responses } from '../../http/schemas.js';
import { presentAsyncRequest } from './presenter.js';
import { AsyncRequestParams, AsyncRequestResponse } from './schemas.js';
import { cancelAsyncRequest, getAsyncRequest } from './service.js';

export const asyncRequestRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.get(
    '/async_requests/:id',
    {
      schema: {
        operationId: 'getAsyncRequest',
        description:
          'The status of a fire-and-forget generation or refinement by its `api_async_create_event_id`: `accepted` while it runs, then `generated`, `refined` or `failed`. An unknown id is 404 whatever its form.',
        tags: ['Artifacts'],
        summary: 'Status of a fire-and-forget generation or refinement',
        params: AsyncRequestParams,
        response: v1Responses({ 200: AsyncRequestResponse }),
      },
    },
    async (request) => ({
      async_request: presentAsyncRequest(await getAsyncRequest(contextOf(request), request.params.id)),
    }),
  );

  app.post(
    '/async_requests/:id/cancel',
    {
      schema: {
        operationId: 'cancelAsyncRequest',
        summary: 'Cancel a fire-and-forget request',
        description:
          'Stops a request still running: it ends as `failed` and `artifact_generation_failed` is sent with the reason. 409 when it has already ended.',
        tags: ['Artifacts'],
        params: AsyncRequestParams,
        response: v1Responses({ 200: AsyncRequestResponse, 409: V1Error }),
      },
    },
    async (request) => ({
      async_request: presentAsyncRequest(await cancelAsyncRequest(contextOf(request), request.params.id)),
    }),
  );
};
