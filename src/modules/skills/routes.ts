import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { contextOf } from '../../http/context.js';
import { PageQuery, pagination } from '../../http/pagination.js';
import { IdParams, Message, v1Responses } from '../../http/schemas.js';
import { presentSkill } from './presenter.js';
import {
  ArtifactTypeSlugParams,
  CreateSkillBody,
  SkillListResponse,
  SkillResponse,
  UpdateSkillBody,
} from './schemas.js';
import {
  createSkill,
  deleteSkill,
  getSkill,
  listSkills,
  listSkillsOfArtifactType,
  updateSkill,
} from './service.js';

const tags = ['Skills'];

export const skillRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.get(
    '/skills',
    {
      schema: {
        operationId: 'listSkills',
        summary: 'List skills',
        description: "The organization's skills with their slash commands. Paginated.",
        tags,
        querystring: PageQuery,
        response: v1Responses({ 200: SkillListResponse }),
      },
    },
    async (request) => {
      const { rows, total } = await listSkills(contextOf(request), request.query);
      return {
        skills: rows.map((s) => presentSkill(s.row, s.artifactTypeIds)),
        pagination: pagination(request.query, total),
      };
    },
  );

  // Spec 4.2, and the deprecated `prompt_templates` spelling of the same list (spec 9).
  for (const [segment, deprecated] of [
    ['skills', false],
    ['prompt_templates', true],
  ] as const) {
    app.get(
      `/artifact_types/:artifact_type_slug/${segment}`,
      {
        schema: {
          operationId: deprecated ? 'listArtifactTypePromptTemplates' : 'listArtifactTypeSkills',
          description: deprecated
            ? 'The same list as /artifact_types/{artifact_type_slug}/skills, under its former name (spec 9).'
            : 'The skills that produce this artifact type, with their slash commands. Paginated.',
          tags,
          summary: deprecated
            ? 'Deprecated: use /artifact_types/{artifact_type_slug}/skills'
            : 'List the skills of an artifact type',
          deprecated,
          params: ArtifactTypeSlugParams,
          querystring: PageQuery,
          response: v1Responses({ 200: SkillListResponse }),
        },
      },
      async (request) => {
        const { rows, total } = await listSkillsOfArtifactType(
          contextOf(request),
          request.params.artifact_type_slug,
          request.query,
        );
        return {
          skills: rows.map((s) => presentSkill(s.row, s.artifactTypeIds)),
          pagination: pagination(request.query, total),
        };
      },
    );
  }

  app.post(
    '/skills',
    {
      schema: {
        operationId: 'createSkill',
        summary: 'Create a skill',
        description:
          'A skill is an instruction template for one or more artifact types; its slash command (`/` + the slug of its name) runs it in chats. Admins only.',
        tags,
        body: CreateSkillBody,
        response: v1Responses({ 201: SkillResponse }),
      },
    },
    async (request, reply) => {
      const skill = await createSkill(contextOf(request), request.body);
      reply.status(201);
      return { skill: presentSkill(skill.row, skill.artifactTypeIds) };
    },
  );

  app.get(
    '/skills/:id',
    {
      schema: {
        operationId: 'getSkill',
        summary: 'Get a skill',
        description: 'One skill of the organization.',
        tags,
        params: IdParams,
        response: v1Responses({ 200: SkillResponse }),
      },
    },
    async (request) => {
      const skill = await getSkill(contextOf(request), request.params.id);
      return { skill: presentSkill(skill.row, skill.artifactTypeIds) };
    },
  );

  app.put(
    '/skills/:id',
    {
      schema: {
        operationId: 'updateSkill',
        summary: 'Update a skill',
        description: 'Changes the given fields; omitted fields stay. Admins only.',
        tags,
        params: IdParams,
        body: UpdateSkillBody,
        response: v1Responses({ 200: SkillResponse }),
      },
    },
    async (request) => {
      const skill = await updateSkill(contextOf(request), request.params.id, request.body);
      return { skill: presentSkill(skill.row, skill.artifactTypeIds) };
    },
  );

  app.delete(
    '/skills/:id',
    {
      schema: {
        operationId: 'deleteSkill',
        summary: 'Delete a skill',
        description: 'Its slash command stops working and agents no longer offer it. Admins only.',
        tags,
        params: IdParams,
        response: v1Responses({ 200: Message }),
      },
    },
    async (request) => {
      await deleteSkill(contextOf(request), request.params.id);
      return { message: 'Skill deleted' };
    },
  );
};
