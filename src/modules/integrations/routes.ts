import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { contextOf } from '../../http/context.js';
import { PageQuery, pagination } from '../../http/pagination.js';
import { IdParams, Message, V1Error, v1Responses } from '../../http/schemas.js';
import { presentIntegration } from './presenter.js';
import {
  CreateIntegrationBody,
  IntegrationListResponse,
  IntegrationResponse,
  IntegrationToolsResponse,
  UpdateIntegrationBody,
} from './schemas.js';
import {
  createIntegration,
  deleteIntegration,
  getIntegration,
  listIntegrations,
  listIntegrationTools,
  updateIntegration,
} from './service.js';

const tags = ['Integrations'];

export const integrationRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.get(
    '/integrations',
    {
      schema: {
        operationId: 'listIntegrations',
        summary: 'List tool servers',
        description: "The organization's connected MCP tool servers (headers are write-only). Paginated.",
        tags,
        querystring: PageQuery,
        response: v1Responses({ 200: IntegrationListResponse }),
      },
    },
    async (request) => {
      const { rows, total } = await listIntegrations(contextOf(request), request.query);
      return {
        integrations: rows.map((i) => presentIntegration(i.row, i.projectIds)),
        pagination: pagination(request.query, total),
      };
    },
  );

  app.post(
    '/integrations',
    {
      schema: {
        operationId: 'createIntegration',
        summary: 'Connect a tool server',
        description:
          'Registers an MCP tool server (Streamable HTTP) whose tools chats and generations may call, for every project or the given ones. Admins only.',
        tags,
        body: CreateIntegrationBody,
        response: v1Responses({ 201: IntegrationResponse }),
      },
    },
    async (request, reply) => {
      const integration = await createIntegration(contextOf(request), request.body);
      reply.status(201);
      return { integration: presentIntegration(integration.row, integration.projectIds) };
    },
  );

  app.get(
    '/integrations/:id',
    {
      schema: {
        operationId: 'getIntegration',
        summary: 'Get a tool server',
        description: 'One connected tool server.',
        tags,
        params: IdParams,
        response: v1Responses({ 200: IntegrationResponse }),
      },
    },
    async (request) => {
      const integration = await getIntegration(contextOf(request), request.params.id);
      return { integration: presentIntegration(integration.row, integration.projectIds) };
    },
  );

  app.put(
    '/integrations/:id',
    {
      schema: {
        operationId: 'updateIntegration',
        summary: 'Update a tool server',
        description: 'Changes the given fields; the slug (the prefix of its tool names) stays. Admins only.',
        tags,
        params: IdParams,
        body: UpdateIntegrationBody,
        response: v1Responses({ 200: IntegrationResponse }),
      },
    },
    async (request) => {
      const integration = await updateIntegration(contextOf(request), request.params.id, request.body);
      return { integration: presentIntegration(integration.row, integration.projectIds) };
    },
  );

  app.delete(
    '/integrations/:id',
    {
      schema: {
        operationId: 'deleteIntegration',
        summary: 'Disconnect a tool server',
        description: 'Its tools are no longer offered. Admins only.',
        tags,
        params: IdParams,
        response: v1Responses({ 200: Message }),
      },
    },
    async (request) => {
      await deleteIntegration(contextOf(request), request.params.id);
      return { message: 'Integration deleted' };
    },
  );

  app.get(
    '/integrations/:id/tools',
    {
      schema: {
        operationId: 'listIntegrationTools',
        summary: "List a tool server's tools",
        tags,
        description:
          'Connects to the tool server and lists its tools. 502 `integration_unavailable` when the server cannot be reached or fails the protocol.',
        params: IdParams,
        response: v1Responses({ 200: IntegrationToolsResponse, 502: V1Error }),
      },
    },
    async (request) => {
      const tools = await listIntegrationTools(contextOf(request), request.params.id);
      return {
        tools: tools.map(({ modelName, tool }) => ({
          name: tool.name,
          model_name: modelName,
          description: tool.description,
          input_schema: tool.inputSchema,
        })),
      };
    },
  );
};
