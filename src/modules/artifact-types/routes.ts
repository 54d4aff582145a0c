import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { contextOf } from '../../http/context.js';
import { PageQuery, pagination } from '../../http/pagination.js';
import { IdParams, Message, v1Responses } from '../../http/schemas.js';
import { presentArtifactType } from './presenter.js';
import {
  ArtifactTypeListResponse,
  ArtifactTypeResponse,
  CreateArtifactTypeBody,
  UpdateArtifactTypeBody,
} from './schemas.js';
import {
  createArtifactType,
  deleteArtifactType,
  getArtifactType,
  listArtifactTypes,
  updateArtifactType,
} from './service.js';

const tags = ['Artifact types'];

export const artifactTypeRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.get(
    '/artifact_types',
    {
      schema: {
        operationId: 'listArtifactTypes',
        description: "The organization's artifact types, oldest first. Paginated.",
        tags,
        summary: 'List artifact types (slug, name, description, ...)',
        querystring: PageQuery,
        response: v1Responses({ 200: ArtifactTypeListResponse }),
      },
    },
    async (request) => {
      const { rows, total } = await listArtifactTypes(contextOf(request), request.query);
      return { artifact_types: rows.map(presentArtifactType), pagination: pagination(request.query, total) };
    },
  );

  app.post(
    '/artifact_types',
    {
      schema: {
        operationId: 'createArtifactType',
        description:
          'The slug is lower-case ASCII words joined by hyphens, unique in the organization (`-2`, `-3` on a clash). Admins only.',
        tags,
        summary: 'Create an artifact type; its slug is generated from the name',
        body: CreateArtifactTypeBody,
        response: v1Responses({ 201: ArtifactTypeResponse }),
      },
    },
    async (request, reply) => {
      const row = await createArtifactType(contextOf(request), request.body);
      reply.status(201);
      return { artifact_type: presentArtifactType(row) };
    },
  );

  app.get(
    '/artifact_types/:id',
    {
      schema: {
        operationId: 'getArtifactType',
        description: 'One artifact type of the organization, by numeric id.',
        tags,
        summary: 'Get an artifact type by id (extension)',
        params: IdParams,
        response: v1Responses({ 200: ArtifactTypeResponse }),
      },
    },
    async (request) => ({
      artifact_type: presentArtifactType(await getArtifactType(contextOf(request), request.params.id)),
    }),
  );

  app.put(
    '/artifact_types/:id',
    {
      schema: {
        operationId: 'updateArtifactType',
        description:
          'Changes the name or description; the slug never changes, so URLs that use it stay valid. Admins only.',
        tags,
        summary: 'Update an artifact type; the slug stays',
        params: IdParams,
        body: UpdateArtifactTypeBody,
        response: v1Responses({ 200: ArtifactTypeResponse }),
      },
    },
    async (request) => ({
      artifact_type: presentArtifactType(
        await updateArtifactType(contextOf(request), request.params.id, request.body),
      ),
    }),
  );

  app.delete(
    '/artifact_types/:id',
    {
      schema: {
        operationId: 'deleteArtifactType',
        summary: 'Delete an artifact type',
        description:
          'The artifact type disappears from lists and its skills no longer offer it. Admins only.',
        tags,
        params: IdParams,
        response: v1Responses({ 200: Message }),
      },
    },
    async (request) => {
      await deleteArtifactType(contextOf(request), request.params.id);
      return { message: 'Artifact type deleted' };
    },
  );
};
