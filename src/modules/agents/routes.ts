import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { contextOf } from '../../http/context.js';
import { PageQuery, pagination } from '../../http/pagination.js';
import { IdParams, Message, v1Responses } from '../../http/schemas.js';
import { presentAgent } from './presenter.js';
import { AgentListResponse, AgentResponse, CreateAgentBody, UpdateAgentBody } from './schemas.js';
import { createAgent, deleteAgent, getAgent, listAgents, updateAgent } from './service.js';

const tags = ['Agents'];

export const agentRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.get(
    '/agents',
    {
      schema: {
        operationId: 'listAgents',
        description:
          'Agents the calling key may use: every agent for organization keys and admins; for members, agents without groups and those sharing a group with them. Paginated.',
        tags,
        summary: 'Agents the key may use',
        querystring: PageQuery,
        response: v1Responses({ 200: AgentListResponse }),
      },
    },
    async (request) => {
      const { rows, total } = await listAgents(contextOf(request), request.query);
      return {
        agents: rows.map((a) => presentAgent(a.row, a.links)),
        pagination: pagination(request.query, total),
      };
    },
  );

  app.post(
    '/agents',
    {
      schema: {
        operationId: 'createAgent',
        summary: 'Create an agent',
        description:
          'An agent bundles instructions, an optional model configuration, skills, tool families and groups; chats may name it with `agent_id`. Admins only.',
        tags,
        body: CreateAgentBody,
        response: v1Responses({ 201: AgentResponse }),
      },
    },
    async (request, reply) => {
      const agent = await createAgent(contextOf(request), request.body);
      reply.status(201);
      return { agent: presentAgent(agent.row, agent.links) };
    },
  );

  app.get(
    '/agents/:id',
    {
      schema: {
        operationId: 'getAgent',
        summary: 'Get an agent',
        description: 'One agent the calling key may use; 404 otherwise.',
        tags,
        params: IdParams,
        response: v1Responses({ 200: AgentResponse }),
      },
    },
    async (request) => {
      const agent = await getAgent(contextOf(request), request.params.id);
      return { agent: presentAgent(agent.row, agent.links) };
    },
  );

  app.put(
    '/agents/:id',
    {
      schema: {
        operationId: 'updateAgent',
        summary: 'Update an agent',
        description: 'Changes the given fields; omitted fields stay. Admins only.',
        tags,
        params: IdParams,
        body: UpdateAgentBody,
        response: v1Responses({ 200: AgentResponse }),
      },
    },
    async (request) => {
      const agent = await updateAgent(contextOf(request), request.params.id, request.body);
      return { agent: presentAgent(agent.row, agent.links) };
    },
  );

  app.delete(
    '/agents/:id',
    {
      schema: {
        operationId: 'deleteAgent',
        summary: 'Delete an agent',
        description: 'The agent can no longer be named by new chats. Admins only.',
        tags,
        params: IdParams,
        response: v1Responses({ 200: Message }),
      },
    },
    async (request) => {
      await deleteAgent(contextOf(request), request.params.id);
      return { message: 'Agent deleted' };
    },
  );
};
