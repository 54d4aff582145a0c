import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { contextOf } from '../../http/context.js';
import { PageQuery, pagination } from '../../http/pagination.js';
import { IdParams, Message, v1Responses } from '../../http/schemas.js';
import { presentCategory } from './presenter.js';
import { CategoryListResponse, CategoryResponse, CreateCategoryBody, UpdateCategoryBody } from './schemas.js';
import { createCategory, deleteCategory, getCategory, listCategories, updateCategory } from './service.js';

const tags = ['Categories'];

export const categoryRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.get(
    '/categories',
    {
      schema: {
        operationId: 'listCategories',
        summary: 'List categories',
        description: 'Categories the calling key may see. Paginated.',
        tags,
        querystring: PageQuery,
        response: v1Responses({ 200: CategoryListResponse }),
      },
    },
    async (request) => {
      const { rows, total } = await listCategories(contextOf(request), request.query);
      return {
        categories: rows.map((c) => presentCategory(c.row, c.groupIds)),
        pagination: pagination(request.query, total),
      };
    },
  );

  app.post(
    '/categories',
    {
      schema: {
        operationId: 'createCategory',
        summary: 'Create a category',
        description: 'A category groups projects; it belongs to one or more groups. Admins only.',
        tags,
        body: CreateCategoryBody,
        response: v1Responses({ 201: CategoryResponse }),
      },
    },
    async (request, reply) => {
      const category = await createCategory(contextOf(request), request.body);
      reply.status(201);
      return { category: presentCategory(category.row, category.groupIds) };
    },
  );

  app.get(
    '/categories/:id',
    {
      schema: {
        operationId: 'getCategory',
        summary: 'Get a category',
        description: 'One category the calling key may see.',
        tags,
        params: IdParams,
        response: v1Responses({ 200: CategoryResponse }),
      },
    },
    async (request) => {
      const category = await getCategory(contextOf(request), request.params.id);
      return { category: presentCategory(category.row, category.groupIds) };
    },
  );

  app.put(
    '/categories/:id',
    {
      schema: {
        operationId: 'updateCategory',
        summary: 'Update a category',
        description: 'Changes the given fields; omitted fields stay. Admins only.',
        tags,
        params: IdParams,
        body: UpdateCategoryBody,
        response: v1Responses({ 200: CategoryResponse }),
      },
    },
    async (request) => {
      const category = await updateCategory(contextOf(request), request.params.id, request.body);
      return { category: presentCategory(category.row, category.groupIds) };
    },
  );

  app.delete(
    '/categories/:id',
    {
      schema: {
        operationId: 'deleteCategory',
        summary: 'Delete a category',
        description: 'Deletes the category. Admins only.',
        tags,
        params: IdParams,
        response: v1Responses({ 200: Message }),
      },
    },
    async (request) => {
      await deleteCategory(contextOf(request), request.params.id);
      return { message: 'Category deleted' };
    },
  );
};
