import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { contextOf } from '../../http/context.js';
import { PageQuery, pagination } from '../../http/pagination.js';
import { IdParams, Message, v1Responses } from '../../http/schemas.js';
import { presentUser } from './presenter.js';
import { CreateUserBody, UpdateUserBody, UserListResponse, UserResponse } from './schemas.js';
import { createUser, deleteUser, getUser, listUsers, updateUser } from './service.js';

const tags = ['Users'];

export const userRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.get(
    '/users',
    {
      schema: {
        operationId: 'listUsers',
        summary: 'List users',
        description: "The organization's users. Admins only. Paginated.",
        tags,
        querystring: PageQuery,
        response: v1Responses({ 200: UserListResponse }),
      },
    },
    async (request) => {
      const { rows, total } = await listUsers(contextOf(request), request.query);
      return {
        users: rows.map((u) => presentUser(u.row, u.groupIds)),
        pagination: pagination(request.query, total),
      };
    },
  );

  app.post(
    '/users',
    {
      schema: {
        operationId: 'createUser',
        summary: 'Create a user',
        description:
          'A new user of the organization (role `member` unless given); they join the default group. Admins only.',
        tags,
        body: CreateUserBody,
        response: v1Responses({ 201: UserResponse }),
      },
    },
    async (request, reply) => {
      const user = await createUser(contextOf(request), request.body);
      reply.status(201);
      return { user: presentUser(user.row, user.groupIds) };
    },
  );

  app.get(
    '/users/:id',
    {
      schema: {
        operationId: 'getUser',
        summary: 'Get a user',
        description: 'One user of the organization.',
        tags,
        params: IdParams,
        response: v1Responses({ 200: UserResponse }),
      },
    },
    async (request) => {
      const user = await getUser(contextOf(request), request.params.id);
      return { user: presentUser(user.row, user.groupIds) };
    },
  );

  app.put(
    '/users/:id',
    {
      schema: {
        operationId: 'updateUser',
        summary: 'Update a user',
        description: 'Changes the given fields; omitted fields stay. Admins only.',
        tags,
        params: IdParams,
        body: UpdateUserBody,
        response: v1Responses({ 200: UserResponse }),
      },
    },
    async (request) => {
      const user = await updateUser(contextOf(request), request.params.id, request.body);
      return { user: presentUser(user.row, user.groupIds) };
    },
  );

  app.delete(
    '/users/:id',
    {
      schema: {
        operationId: 'deleteUser',
        summary: 'Delete a user',
        description: 'The user leaves every group and their personal keys are revoked. Admins only.',
        tags,
        params: IdParams,
        response: v1Responses({ 200: Message }),
      },
    },
    async (request) => {
      await deleteUser(contextOf(request), request.params.id);
      return { message: 'User deleted' };
    },
  );
};
