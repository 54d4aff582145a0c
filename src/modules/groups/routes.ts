import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { contextOf } from '../../http/context.js';
import { PageQuery, pagination } from '../../http/pagination.js';
import { IdParams, Message, v1Responses } from '../../http/schemas.js';
import { presentGroup } from './presenter.js';
import {
  AddMemberBody,
  CreateGroupBody,
  GroupListResponse,
  GroupResponse,
  MemberParams,
  UpdateGroupBody,
} from './schemas.js';
import {
  addMember,
  createGroup,
  deleteGroup,
  getGroup,
  listGroups,
  removeMember,
  updateGroup,
} from './service.js';

const tags = ['Groups'];

export const groupRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.get(
    '/groups',
    {
      schema: {
        operationId: 'listGroups',
        summary: 'List groups',
        description: "The organization's groups. Paginated.",
        tags,
        querystring: PageQuery,
        response: v1Responses({ 200: GroupListResponse }),
      },
    },
    async (request) => {
      const { rows, total } = await listGroups(contextOf(request), request.query);
      return {
        groups: rows.map((g) => presentGroup(g.row, g.userIds)),
        pagination: pagination(request.query, total),
      };
    },
  );

  app.post(
    '/groups',
    {
      schema: {
        operationId: 'createGroup',
        summary: 'Create a group',
        description: 'Groups decide which members reach which projects, categories and agents. Admins only.',
        tags,
        body: CreateGroupBody,
        response: v1Responses({ 201: GroupResponse }),
      },
    },
    async (request, reply) => {
      const group = await createGroup(contextOf(request), request.body);
      reply.status(201);
      return { group: presentGroup(group.row, group.userIds) };
    },
  );

  app.get(
    '/groups/:id',
    {
      schema: {
        operationId: 'getGroup',
        summary: 'Get a group',
        description: 'One group of the organization.',
        tags,
        params: IdParams,
        response: v1Responses({ 200: GroupResponse }),
      },
    },
    async (request) => {
      const group = await getGroup(contextOf(request), request.params.id);
      return { group: presentGroup(group.row, group.userIds) };
    },
  );

  app.put(
    '/groups/:id',
    {
      schema: {
        operationId: 'updateGroup',
        summary: 'Update a group',
        description: 'Changes the given fields; omitted fields stay. Admins only.',
        tags,
        params: IdParams,
        body: UpdateGroupBody,
        response: v1Responses({ 200: GroupResponse }),
      },
    },
    async (request) => {
      const group = await updateGroup(contextOf(request), request.params.id, request.body);
      return { group: presentGroup(group.row, group.userIds) };
    },
  );

  app.delete(
    '/groups/:id',
    {
      schema: {
        operationId: 'deleteGroup',
        description:
          'Admins only; 422 for the default group or the last group of a category, project or agent.',
        tags,
        summary: 'Delete a group (not the default group, nor the last group of a category, project or agent)',
        params: IdParams,
        response: v1Responses({ 200: Message }),
      },
    },
    async (request) => {
      await deleteGroup(contextOf(request), request.params.id);
      return { message: 'Group deleted' };
    },
  );

  app.post(
    '/groups/:id/members',
    {
      schema: {
        operationId: 'addGroupMember',
        description: 'Adds a user of the organization to the group. Admins only.',
        tags,
        summary: 'Add a user to the group (201; 200 when already a member)',
        params: IdParams,
        body: AddMemberBody,
        response: v1Responses({ 200: GroupResponse, 201: GroupResponse }),
      },
    },
    async (request, reply) => {
      const group = await addMember(contextOf(request), request.params.id, request.body.user_id);
      reply.status(group.added ? 201 : 200);
      return { group: presentGroup(group.row, group.userIds) };
    },
  );

  app.delete(
    '/groups/:id/members/:user_id',
    {
      schema: {
        operationId: 'removeGroupMember',
        description: 'The user loses access to what the group gave. Admins only.',
        tags,
        summary: 'Remove a user from the group',
        params: MemberParams,
        response: v1Responses({ 200: Message }),
      },
    },
    async (request) => {
      await removeMember(contextOf(request), request.params.id, request.params.user_id);
      return { message: 'Member removed from group' };
    },
  );
};
