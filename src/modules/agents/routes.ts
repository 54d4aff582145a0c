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
    { schema: { tags, body: CreateAgentBody, response: v1Responses({ 201: AgentResponse }) } },
    async (request, reply) => {
      const agent = await createAgent(contextOf(request), request.body);
      reply.status(201);
      return { agent: presentAgent(agent.row, agent.links) };
    },
  );

  app.get(
    '/agents/:id',
    { schema: { tags, params: IdParams, response: v1Responses({ 200: AgentResponse }) } },
    async (request) => {
      const agent = await getAgent(contextOf(request), request.params.id);
      return { agent: presentAgent(agent.row, agent.links) };
    },
  );

  app.put(
    '/agents/:id',
    {
      schema: {
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
    { schema: { tags, params: IdParams, response: v1Responses({ 200: Message }) } },
    async (request) => {
      await deleteAgent(contextOf(request), request.params.id);
      return { message: 'Agent deleted' };
    },
  );
};
