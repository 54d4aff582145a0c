import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { contextOf } from '../../http/context.js';
import { PageQuery, pagination } from '../../http/pagination.js';
import { IdParams, Message, v1Responses } from '../../http/schemas.js';
import { presentApiKey } from './presenter.js';
import { ApiKeyListResponse, CreateApiKeyBody, CreatedApiKeyResponse } from './schemas.js';
import { createApiKey, listApiKeys, revokeApiKey } from './service.js';

const tags = ['API keys'];

export const apiKeyRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.get(
    '/api_keys',
    {
      schema: {
        operationId: 'listApiKeys',
        summary: 'List API keys',
        description:
          "The organization's keys without their secrets (prefix, kind, owner). Admins only. Paginated.",
        tags,
        querystring: PageQuery,
        response: v1Responses({ 200: ApiKeyListResponse }),
      },
    },
    async (request) => {
      const { rows, total } = await listApiKeys(contextOf(request), request.query);
      return { api_keys: rows.map(presentApiKey), pagination: pagination(request.query, total) };
    },
  );

  app.post(
    '/api_keys',
    {
      schema: {
        operationId: 'createApiKey',
        description:
          'Creates an organization key or a personal key for a user; the secret (`key`) is in this response only and is stored as a hash. Admins only.',
        tags,
        summary: 'Create a key; its secret is in this response only',
        body: CreateApiKeyBody,
        response: v1Responses({ 201: CreatedApiKeyResponse }),
      },
    },
    async (request, reply) => {
      const { row, secret } = await createApiKey(contextOf(request), request.body);
      reply.status(201);
      return { api_key: presentApiKey(row), key: secret };
    },
  );

  app.delete(
    '/api_keys/:id',
    {
      schema: {
        operationId: 'revokeApiKey',
        description:
          'The key stops working at once; requests with it then get 401 (v1) or 403 (v2). Admins only.',
        tags,
        summary: 'Revoke a key',
        params: IdParams,
        response: v1Responses({ 200: Message }),
      },
    },
    async (request) => {
      await revokeApiKey(contextOf(request), request.params.id);
      return { message: 'API key revoked' };
    },
  );
};
