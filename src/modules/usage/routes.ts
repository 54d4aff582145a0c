import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { contextOf } from '../../http/context.js';
import { v1Responses } from '../../http/schemas.js';
import { UsageQuery, UsageResponse } from './schemas.js';
import { usageReport } from './service.js';

export const usageRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.get(
    '/usage',
    {
      schema: {
        operationId: 'getUsage',
        description:
          'Totals of input and output tokens and credits charged in a time range, from the ledger rows written when each turn or generation ended. Admins only.',
        tags: ['Usage'],
        summary: 'Token and credit usage from the ledger, grouped by day, project, key or model',
        querystring: UsageQuery,
        response: v1Responses({ 200: UsageResponse }),
      },
    },
    async (request) => ({ usage: await usageReport(contextOf(request), request.query) }),
  );
};
