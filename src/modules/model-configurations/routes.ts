import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { contextOf } from '../../http/context.js';
import { PageQuery, pagination } from '../../http/pagination.js';
import { IdParams, Message, v1Responses } from '../../http/schemas.js';
import { presentModelConfiguration } from './presenter.js';
import {
  CreateModelConfigurationBody,
  ModelConfigurationListResponse,
  ModelConfigurationResponse,
  UpdateModelConfigurationBody,
} from './schemas.js';
import {
  createModelConfiguration,
  deleteModelConfiguration,
  getModelConfiguration,
  listModelConfigurations,
  updateModelConfiguration,
} from './service.js';

const tags = ['Model configurations'];

export const modelConfigurationRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.get(
    '/model_configurations',
    {
      schema: {
        operationId: 'listModelConfigurations',
        summary: 'List model configurations',
        description: "The organization's model configurations (API keys are write-only). Paginated.",
        tags,
        querystring: PageQuery,
        response: v1Responses({ 200: ModelConfigurationListResponse }),
      },
    },
    async (request) => {
      const { rows, total } = await listModelConfigurations(contextOf(request), request.query);
      return {
        model_configurations: rows.map((m) => presentModelConfiguration(m.row, m.isDefault)),
        pagination: pagination(request.query, total),
      };
    },
  );

  app.post(
    '/model_configurations',
    {
      schema: {
        operationId: 'createModelConfiguration',
        summary: 'Create a model configuration',
        description:
          'A provider, model, optional base URL and key, and credit prices; `is_default: true` makes it the default for chats and generations. Admins only.',
        tags,
        body: CreateModelConfigurationBody,
        response: v1Responses({ 201: ModelConfigurationResponse }),
      },
    },
    async (request, reply) => {
      const created = await createModelConfiguration(contextOf(request), request.body);
      reply.status(201);
      return { model_configuration: presentModelConfiguration(created.row, created.isDefault) };
    },
  );

  app.get(
    '/model_configurations/:id',
    {
      schema: {
        operationId: 'getModelConfiguration',
        summary: 'Get a model configuration',
        description: 'One model configuration of the organization.',
        tags,
        params: IdParams,
        response: v1Responses({ 200: ModelConfigurationResponse }),
      },
    },
    async (request) => {
      const found = await getModelConfiguration(contextOf(request), request.params.id);
      return { model_configuration: presentModelConfiguration(found.row, found.isDefault) };
    },
  );

  app.put(
    '/model_configurations/:id',
    {
      schema: {
        operationId: 'updateModelConfiguration',
        summary: 'Update a model configuration',
        description: 'Changes the given fields; `is_default: true` moves the default here. Admins only.',
        tags,
        params: IdParams,
        body: UpdateModelConfigurationBody,
        response: v1Responses({ 200: ModelConfigurationResponse }),
      },
    },
    async (request) => {
      const updated = await updateModelConfiguration(contextOf(request), request.params.id, request.body);
      return { model_configuration: presentModelConfiguration(updated.row, updated.isDefault) };
    },
  );

  app.delete(
    '/model_configurations/:id',
    {
      schema: {
        operationId: 'deleteModelConfiguration',
        description: 'Admins only; the default configuration cannot be deleted (422).',
        tags,
        summary: 'Delete a model configuration (not the default)',
        params: IdParams,
        response: v1Responses({ 200: Message }),
      },
    },
    async (request) => {
      await deleteModelConfiguration(contextOf(request), request.params.id);
      return { message: 'Model configuration deleted' };
    },
  );
};
