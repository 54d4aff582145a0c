import type { FastifyInstance } from 'fastify';
import type { Registry } from 'prom-client';

/**
 * Counts requests into the process's instruments (src/telemetry/metrics.ts: requests by route and
 * status, process metrics, turns, usage, webhooks, jobs, streams) and returns their registry.
 */
export function registerMetrics(app: FastifyInstance): Registry {
  const { metrics } = app.deps;
  app.addHook('onResponse', async (request, reply) => {
    metrics.httpRequest(
      request.method,
      request.routeOptions.url ?? 'unmatched',
      reply.statusCode,
      reply.elapsedTime / 1000,
    );
  });
  return metrics.registry;
}
