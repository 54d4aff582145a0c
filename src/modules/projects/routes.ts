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
    { schema: { tags, body: CreateProjectBody, response: v1Responses({ 201: ProjectResponse }) } },
    async (request, reply) => {
      const project = await createProject(contextOf(request), request.body);
      reply.status(201);
      return { project: presentProject(project.row, project.links) };
    },
  );

  app.get(
    '/projects/:id',
    { schema: { tags, params: IdParams, response: v1Responses({ 200: ProjectResponse }) } },
    async (request) => {
      const project = await getProject(contextOf(request), request.params.id);
      return { project: presentProject(project.row, project.links) };
    },
  );

  app.put(
    '/projects/:id',
    {
      schema: {
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
    { schema: { tags, params: IdParams, response: v1Responses({ 200: Message }) } },
    async (request) => {
      await deleteProject(contextOf(request), request.params.id);
      return { message: 'Project deleted' };
    },
  );

  app.post(
    '/projects/:id/archive',
    {
      schema: {
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
