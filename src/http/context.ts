import type { FastifyBaseLogger, FastifyRequest } from 'fastify';
import type { Config } from '../config.js';
import type { SecretBox } from '../crypto/secret-box.js';
import type { Database, Db } from '../db/client.js';
import type { JobQueue } from '../jobs/queue.js';
import type { ToolFamilies } from '../llm/tools/registry.js';
import type { TurnEventHub } from '../modules/chats/turn-events.js';
import type { TurnSettings } from '../modules/chats/turn-runner.js';
import type { StreamHubOptions } from '../modules/streams/stream-hub.js';
import type { OrgPrincipal } from './auth.js';
import { forbidden } from './errors.js';

/** What the app shares with every module; built once in main.ts (or by the test helpers). */
export interface AppDeps {
  config: Config;
  database: Database;
  secrets: SecretBox;
  /** Durable background jobs (pg-boss); started by main.ts and the worker. */
  jobs: JobQueue;
  /** Tool families offered to chat turns; defaults to every family of src/llm/tools (tests pass their own). */
  toolFamilies?: ToolFamilies;
  /** Where chat turns publish their numbered events; defaults to the app's database-backed stream hub. */
  turnEvents?: TurnEventHub;
  /** Stream hub timings (flush, poll, liveness); tests shorten them. */
  streamHub?: Partial<StreamHubOptions>;
  /** Chat turn timings (lease length, model idle limit, steps); tests shorten them. */
  turnSettings?: Partial<TurnSettings>;
}

declare module 'fastify' {
  interface FastifyInstance {
    deps: AppDeps;
  }
}

/** What a service receives: never a request or reply, never a global. */
export interface ServiceContext {
  db: Db;
  database: Database;
  config: Config;
  secrets: SecretBox;
  principal: OrgPrincipal;
  log: FastifyBaseLogger;
}

export function contextOf(request: FastifyRequest): ServiceContext {
  const principal = request.principal;
  if (!principal || principal.organizationId === null)
    throw forbidden('This endpoint needs an organization key');
  const { config, database, secrets } = request.server.deps;
  return {
    db: database.db,
    database,
    config,
    secrets,
    principal: principal as OrgPrincipal,
    log: request.log,
  };
}
