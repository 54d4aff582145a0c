import { randomUUID } from 'node:crypto';
import cors from '@fastify/cors';
import rateLimit from '@fastify/rate-limit';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import Fastify, {
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
  type FastifyServerOptions,
} from 'fastify';
import { Redis } from 'ioredis';
import type { AppDeps } from './core/deps.js';
import { authenticate, keyHashOf } from './http/auth.js';
import { ApiError, clientErrorHandler, sendError } from './http/errors.js';
import { registerIdempotency } from './http/idempotency.js';
import { registerJsonBody } from './http/json-body.js';
import { openApiOptions, referencePageOptions } from './http/openapi.js';
import { validatorCompiler } from './http/validation.js';
import { agentRoutes } from './modules/agents/routes.js';
import { apiKeyRoutes } from './modules/api-keys/routes.js';
import { artifactTypeRoutes } from './modules/artifact-types/routes.js';
import { artifactRoutes } from './modules/artifacts/routes.js';
import { asyncRequestRoutes } from './modules/async-requests/routes.js';
import { auditEventRoutes } from './modules/audit-events/routes.js';
import { categoryRoutes } from './modules/categories/routes.js';
import { chatRoutes } from './modules/chats/routes.js';
import { consoleRoutes } from './modules/console/routes.js';
import { documentRoutes } from './modules/documents/routes.js';
import { groupRoutes } from './modules/groups/routes.js';
import { integrationRoutes } from './modules/integrations/routes.js';
import { modelConfigurationRoutes } from './modules/model-configurations/routes.js';
import { registerMetrics } from './modules/operations/metrics.js';
import { operationRoutes } from './modules/operations/routes.js';
import { organizationRoutes } from './modules/organizations/routes.js';
import { organizationWebhookRoutes } from './modules/project-webhooks/organization-routes.js';
import { projectWebhookRoutes } from './modules/project-webhooks/routes.js';
import { projectRoutes } from './modules/projects/routes.js';
import { shareRoutes } from './modules/share/routes.js';
import { skillRoutes } from './modules/skills/routes.js';
import { usageRoutes } from './modules/usage/routes.js';
import { userRoutes } from './modules/users/routes.js';
import { webhookDeliveryRoutes } from './modules/webhook-deliveries/routes.js';

/** Route plugins of each API family, registered under its prefix. */
const v1Modules = [
  organizationRoutes,
  userRoutes,
  apiKeyRoutes,
  usageRoutes,
  groupRoutes,
  categoryRoutes,
  projectRoutes,
  projectWebhookRoutes,
  organizationWebhookRoutes,
  artifactTypeRoutes,
  skillRoutes,
  agentRoutes,
  modelConfigurationRoutes,
  integrationRoutes,
  artifactRoutes,
  documentRoutes,
  webhookDeliveryRoutes,
  asyncRequestRoutes,
  auditEventRoutes,
];
const v2Modules: (typeof v1Modules)[number][] = [chatRoutes];

export interface BuildOptions {
  /** Replaces the process's logger (`deps.log`) for this app; tests silence it. */
  logger?: FastifyServerOptions['logger'];
}

// Time left, after turns were given their chance to finish, to record cancellations before main.ts exits.
const CANCEL_MARGIN_MS = 3_000;

/** Longest path parameter the router matches; longer ones are 414 `uri_too_long`. */
const MAX_PARAM_LENGTH = 1000;

function routerError(error: { code?: string }): ApiError {
  if (error.code === 'FST_ERR_MAX_PARAM_LENGTH') {
    return new ApiError(
      414,
      'uri_too_long',
      `A path parameter is longer than ${MAX_PARAM_LENGTH} characters`,
    );
  }
  if (error.code === 'FST_ERR_BAD_URL') {
    return new ApiError(400, 'invalid_request', 'The URL is malformed: invalid percent-encoding');
  }
  return new ApiError(400, 'invalid_request', 'The request could not be routed');
}

export async function buildApp(deps: AppDeps, options: BuildOptions = {}): Promise<FastifyInstance> {
  const { config } = deps;
  const app = Fastify({
    ...(options.logger === undefined ? { loggerInstance: deps.log } : { logger: options.logger }),
    genReqId: (req) => {
      const given = req.headers['x-request-id'];
      return typeof given === 'string' && /^[\w.-]{1,128}$/.test(given) ? given : randomUUID();
    },
    bodyLimit: 1024 * 1024,
    // Long enough that an over-long id reaches its route and gets that route's 400 or 404.
    routerOptions: { maxParamLength: MAX_PARAM_LENGTH },
    // The router's own refusals (bad percent-encoding, a parameter past maxParamLength) answer in
    // the API family's envelope like every other error, never in Fastify's body.
    frameworkErrors: (error, request, reply) => sendError(request, reply, routerError(error)),
    clientErrorHandler,
    // New requests while the process drains get a 503 in the family's envelope (the hook below),
    // not Fastify's own body.
    return503OnClosing: false,
    forceCloseConnections: 'idle',
    // Avvio's plugin timeout (10 s by default) also bounds close(), whose preClose hook waits for
    // running turns for up to the grace period: a longer drain would fail the shutdown with
    // AVV_ERR_READY_TIMEOUT. main.ts keeps the overall deadline (SHUTDOWN_GRACE_MS).
    pluginTimeout: Math.max(10_000, config.shutdownGraceMs + 10_000),
  }).withTypeProvider<TypeBoxTypeProvider>();

  app.decorate('deps', deps);
  // preClose runs before the server waits for open connections: streams read from other processes
  // end (their clients reattach elsewhere with Last-Event-ID), and running turns get the grace
  // period to finish, then are cancelled, so their streams end instead of holding the shutdown up.
  // The resources themselves are closed by the composition root (src/root.ts) after the app.
  let closing = false;
  // A callback hook, not an async one: it runs on every request and almost always does nothing.
  app.addHook('onRequest', (_request, reply, done) => {
    if (!closing) return done();
    reply.header('connection', 'close');
    done(
      new ApiError(503, 'shutting_down', 'This server is shutting down; retry the request on another one'),
    );
  });
  app.addHook('preClose', async () => {
    closing = true;
    deps.streams.detachRemote();
    // No queued message starts here any more; clients waiting for one are answered (503).
    await deps.chatQueue.close();
    await deps.turns.close(Math.max(0, config.shutdownGraceMs - CANCEL_MARGIN_MS));
  });
  app.decorateRequest('principal', null);
  app.decorateRequest('keyHash', null);
  app.setValidatorCompiler(validatorCompiler);
  app.setErrorHandler((error, request, reply) => sendError(request, reply, error));
  registerJsonBody(app);
  app.setNotFoundHandler((request, reply) =>
    sendError(
      request,
      reply,
      new ApiError(404, 'not_found', `No route ${request.method} ${request.url.split('?')[0]}`),
    ),
  );
  app.addHook('onSend', async (request, reply) => {
    reply.header('x-request-id', request.id);
  });

  await app.register(swagger, openApiOptions(config));
  await app.register(swaggerUi, referencePageOptions);
  if (config.corsOrigins.length > 0) {
    // Registered before authentication: a preflight (OPTIONS, no key) is answered by this hook.
    await app.register(cors, {
      origin: config.corsOrigins,
      methods: ['GET', 'POST', 'PUT', 'DELETE'],
      allowedHeaders: ['Authorization', 'Content-Type', 'Idempotency-Key', 'Last-Event-ID', 'X-Request-Id'],
      exposedHeaders: [
        'X-Request-Id',
        'Retry-After',
        'RateLimit-Limit',
        'RateLimit-Remaining',
        'RateLimit-Reset',
        'Idempotent-Replayed',
      ],
      maxAge: 600,
    });
  }

  const redis = config.redisUrl
    ? new Redis(config.redisUrl, { maxRetriesPerRequest: 1, lazyConnect: false })
    : null;
  redis?.on('error', (err) =>
    app.log.warn({ err }, 'redis error (rate limits fall back to allowing requests)'),
  );
  app.addHook('onClose', async () => {
    await redis?.quit().catch(() => {});
  });
  await app.register(rateLimit, {
    // Not per route (the plugin's route hooks run after the application's, so after
    // authentication, and a request without a valid key was never counted): one application hook,
    // added below before authentication, counts every /api/ request, a key-guessing one included.
    global: false,
    max: config.rateLimitPerMinute,
    timeWindow: 60_000,
    redis: redis ?? undefined,
    nameSpace: 'scriptorium-rate-limit-',
    skipOnError: true,
    enableDraftSpec: true,
    allowList: (request) => !request.url.startsWith('/api/'),
    // Per API key (the hash authentication looks the key up by, computed once); per address without one.
    keyGenerator: (request) => {
      const keyHash = keyHashOf(request);
      return keyHash ? `key:${keyHash}` : `ip:${request.ip}`;
    },
    errorResponseBuilder: (_request, context) => rateLimited(context.max, context.after),
  });
  // A key nobody holds also counts against the caller's address: keyed by the key alone, a guesser
  // would get a fresh budget with every guess.
  const unknownKeys = app.createRateLimit({ keyGenerator: (request) => `unknown-key:${request.ip}` });
  const limitUnknownKeys = async (request: FastifyRequest, reply: FastifyReply) => {
    const limit = await unknownKeys(request);
    if (limit.isAllowed || !limit.isExceeded) return;
    reply.header('retry-after', limit.ttlInSeconds);
    throw rateLimited(limit.max, `${limit.ttlInSeconds} seconds`);
  };

  const metrics = registerMetrics(app);
  app.addHook('onRequest', app.rateLimit());
  app.addHook('onRequest', authenticate(deps.database, deps.streams.notifier, limitUnknownKeys));
  registerIdempotency(app);

  await app.register(operationRoutes(metrics));
  await app.register(shareRoutes);
  await app.register(consoleRoutes());
  await app.register(
    async (v1) => {
      for (const plugin of v1Modules) await v1.register(plugin);
    },
    { prefix: '/api/v1' },
  );
  await app.register(
    async (v2) => {
      for (const plugin of v2Modules) await v2.register(plugin);
    },
    { prefix: '/api/v2' },
  );

  return app;
}

function rateLimited(max: number, after: string): ApiError {
  return new ApiError(
    429,
    'rate_limited',
    `Rate limit of ${max} requests per minute reached; retry in ${after}`,
  );
}
