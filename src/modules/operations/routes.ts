import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { Registry } from 'prom-client';
import { asyncApiDocument } from './asyncapi.js';

const Status = Type.Object({ status: Type.String() });
const tags = ['Operations'];

export const operationRoutes =
  (metrics: Registry): FastifyPluginAsyncTypebox =>
  async (app) => {
    app.get(
      '/health',
      {
        schema: {
          operationId: 'getHealth',
          security: [],
          summary: 'Liveness',
          description: '200 while the process is up. Needs no API key.',
          tags,
          response: { 200: Status },
        },
      },
      async () => ({ status: 'ok' }),
    );

    app.get(
      '/ready',
      {
        schema: {
          operationId: 'getReadiness',
          security: [],
          summary: 'Readiness',
          description: '200 when the database answers, else 503. Needs no API key.',
          tags,
          response: { 200: Status, 503: Status },
        },
      },
      async (_request, reply) => {
        if (await app.deps.database.ping()) return { status: 'ready' };
        return reply.status(503).send({ status: 'database unavailable' });
      },
    );

    app.get('/metrics', { schema: { tags, hide: true } }, async (_request, reply) => {
      reply.type(metrics.contentType);
      return metrics.metrics();
    });

    app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());

    const asyncApi = asyncApiDocument(app.deps.config.publicBaseUrl);
    app.get('/asyncapi.json', { schema: { hide: true } }, async () => asyncApi);
  };
