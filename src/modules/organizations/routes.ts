import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { actorOf } from '../../http/context.js';
import { PageQuery, pagination } from '../../http/pagination.js';
import { IdParams, Message, v1Responses } from '../../http/schemas.js';
import { presentUser } from '../users/presenter.js';
import { presentOrganization } from './presenter.js';
import {
  CreatedOrganizationResponse,
  CreateOrganizationBody,
  CreditsBody,
  OrganizationListResponse,
  OrganizationResponse,
  UpdateOrganizationBody,
} from './schemas.js';
import {
  addCredits,
  createOrganizationAs,
  deactivateOrganization,
  getOrganization,
  listOrganizations,
  renameOrganization,
} from './service.js';

const tags = ['Organizations (super admin)'];
const config = { access: 'super_admin' as const };

export const organizationRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const { database } = app.deps;

  app.get(
    '/admin/organizations',
    {
      config,
      schema: {
        operationId: 'listOrganizations',
        summary: 'List organizations',
        description: 'Every organization, deactivated ones included. Super admin keys only. Paginated.',
        tags,
        querystring: PageQuery,
        response: v1Responses({ 200: OrganizationListResponse }),
      },
    },
    async (request) => {
      const { rows, total } = await listOrganizations(database.db, request.query);
      return { organizations: rows.map(presentOrganization), pagination: pagination(request.query, total) };
    },
  );

  app.post(
    '/admin/organizations',
    {
      config,
      schema: {
        operationId: 'createOrganization',
        description:
          'Creates the organization with its admin user, default group and default model configuration; the organization key is in this response only. Super admin keys only.',
        tags,
        summary: 'Create an organization with its admin user; returns an organization key once',
        body: CreateOrganizationBody,
        response: v1Responses({ 201: CreatedOrganizationResponse }),
      },
    },
    async (request, reply) => {
      const { organization, user, orgKey, defaultGroupId } = await createOrganizationAs(
        database.db,
        app.deps,
        actorOf(request),
        {
          name: request.body.organization.name,
          email: request.body.user.email,
          userName: request.body.user.name,
        },
      );
      reply.status(201);
      return {
        organization: presentOrganization(organization),
        user: presentUser(user, [defaultGroupId]),
        key: orgKey,
      };
    },
  );

  app.get(
    '/admin/organizations/:id',
    {
      config,
      schema: {
        operationId: 'getOrganization',
        summary: 'Get an organization',
        description: 'One organization with its credit balance. Super admin keys only.',
        tags,
        params: IdParams,
        response: v1Responses({ 200: OrganizationResponse }),
      },
    },
    async (request) => ({
      organization: presentOrganization(await getOrganization(database.db, request.params.id)),
    }),
  );

  app.put(
    '/admin/organizations/:id',
    {
      config,
      schema: {
        operationId: 'updateOrganization',
        summary: 'Update an organization',
        description: 'Changes the given fields; omitted fields stay. Super admin keys only.',
        tags,
        params: IdParams,
        body: UpdateOrganizationBody,
        response: v1Responses({ 200: OrganizationResponse }),
      },
    },
    async (request) => {
      const name = request.body.name ?? request.body.organization?.name;
      return {
        organization: presentOrganization(
          await renameOrganization(database.db, actorOf(request), request.params.id, name),
        ),
      };
    },
  );

  app.delete(
    '/admin/organizations/:id',
    {
      config,
      schema: {
        operationId: 'deactivateOrganization',
        description:
          'Super admin keys only; the organization stays readable by super admins with `active: false`.',
        tags,
        summary: 'Deactivate an organization (its keys stop working; nothing is deleted)',
        params: IdParams,
        response: v1Responses({ 200: Message }),
      },
    },
    async (request) => {
      await deactivateOrganization(database.db, actorOf(request), request.params.id);
      return { message: 'Organization deactivated' };
    },
  );

  app.post(
    '/admin/organizations/:id/credits',
    {
      config,
      schema: {
        operationId: 'addOrganizationCredits',
        summary: 'Add credits',
        description:
          "Adds `amount` (negative to remove) to the organization's credit balance. Super admin keys only.",
        tags,
        params: IdParams,
        body: CreditsBody,
        response: v1Responses({ 200: OrganizationResponse }),
      },
    },
    async (request) => ({
      organization: presentOrganization(
        await addCredits(database.db, actorOf(request), request.params.id, request.body.amount),
      ),
    }),
  );
};
