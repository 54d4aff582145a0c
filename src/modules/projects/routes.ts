import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { contextOf } from '../../http/context.js';
import { pagination } from '../../http/pagination.js';
import { IdParams, Message, v1Responses } from '../../http/schemas.js';
import { presentProject } from './presenter.js';
import {
  CreateProjectBody,
  ProjectListQuery,
  ProjectListResponse,
  ProjectResponse,
  UpdateProjectBody,
} from './schemas.js';
import {
  createProject,
  deleteProject,
  getProject,
  listProjects,
  setArchived,
  updateProject,
} from './service.js';

const tags = ['Projects'];

export const projectRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.get(
    '/projects',
    {
      schema: {
        operationId: 'listProjects',
        description:
          'Projects the calling key may use (members: those sharing a group with them). Paginated.',
        tags,
        summary: 'Projects the key may use; archived ones only with include_archived=true',
        querystring: ProjectListQuery,
        response: v1Responses({ 200: ProjectListResponse }),
      },
    },
    async (request) => {
      const { rows, total } = await listProjects(contextOf(request), request.query);
      return {
        projects: rows.map((p) => presentProject(p.row, p.links)),
        pagination: pagination(request.query, total),
      };
    },
  );

  app.post(
    '/projects',
    {
      schema: {
        operationId: 'createProject',
        summary: 'Create a project',
        description:
          'A project scopes chats, artifacts, documents and webhooks; it belongs to one or more groups. Admins only.',
        tags,
        body: CreateProjectBody,
        response: v1Responses({ 201: ProjectResponse }),
      },
    },
    async (request, reply) => {
      const project = await createProject(contextOf(request), request.body);
      reply.status(201);
      return { project: presentProject(project.row, project.links) };
    },
  );

  app.get(
    '/projects/:id',
    {
      schema: {
        operationId: 'getProject',
        summary: 'Get a project',
        description: 'One project the calling key may use (an extension), archived ones included.',
        tags,
        params: IdParams,
        response: v1Responses({ 200: ProjectResponse }),
      },
    },
    async (request) => {
      const project = await getProject(contextOf(request), request.params.id);
      return { project: presentProject(project.row, project.links) };
    },
  );

  app.put(
    '/projects/:id',
    {
      schema: {
        operationId: 'updateProject',
        summary: 'Update a project',
        description: 'Changes the given fields; omitted fields stay. Admins only.',
        tags,
        params: IdParams,
        body: UpdateProjectBody,
        response: v1Responses({ 200: ProjectResponse }),
      },
    },
    async (request) => {
      const project = await updateProject(contextOf(request), request.params.id, request.body);
      return { project: presentProject(project.row, project.links) };
    },
  );

  app.delete(
    '/projects/:id',
    {
      schema: {
        operationId: 'deleteProject',
        summary: 'Delete a project',
        description: 'The project and what it holds are no longer reachable by any key. Admins only.',
        tags,
        params: IdParams,
        response: v1Responses({ 200: Message }),
      },
    },
    async (request) => {
      await deleteProject(contextOf(request), request.params.id);
      return { message: 'Project deleted' };
    },
  );

  app.post(
    '/projects/:id/archive',
    {
      schema: {
        operationId: 'archiveProject',
        description:
          'Archived projects are hidden from lists unless `include_archived=true`, stay readable, and accept no new generations or chats.',
        tags,
        summary: 'Archive a project: hidden from lists, still readable, no new generations or chats',
        params: IdParams,
        response: v1Responses({ 200: ProjectResponse }),
      },
    },
    async (request) => {
      const project = await setArchived(contextOf(request), request.params.id, true);
      return { project: presentProject(project.row, project.links) };
    },
  );

  app.post(
    '/projects/:id/unarchive',
    {
      schema: {
        operationId: 'unarchiveProject',
        description: 'The project is listed and usable again.',
        tags,
        summary: 'Bring an archived project back (extension)',
        params: IdParams,
        response: v1Responses({ 200: ProjectResponse }),
      },
    },
    async (request) => {
      const project = await setArchived(contextOf(request), request.params.id, false);
      return { project: presentProject(project.row, project.links) };
    },
  );
};
