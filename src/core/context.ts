import type { FastifyBaseLogger } from 'fastify';
import type { Config } from '../config.js';
import type { SecretBox } from '../crypto/secret-box.js';
import type { Database, Db } from '../db/client.js';
import type { VectorStore } from '../knowledge/vector-store.js';
import type { ModelCache } from '../llm/model-cache.js';
import type { McpPool } from '../mcp/client-pool.js';
import type { ServiceMetrics } from '../telemetry/metrics.js';
import type { OrgPrincipal } from './principal.js';

/** The process's resources a service may use, built once by the composition root (src/root.ts). */
export interface ServiceResources {
  config: Config;
  database: Database;
  secrets: SecretBox;
  /** Language models by configuration, with their keys decrypted once. */
  models: ModelCache;
  /** Connections to the organizations' MCP tool servers. */
  mcp: McpPool;
  /** pgvector storage for document embeddings (when the database has the extension). */
  vectors: VectorStore;
  /** The process's Prometheus instruments (served at /metrics). */
  metrics: ServiceMetrics;
}

/** What a service receives: never a request or reply, never a global. */
export interface ServiceContext extends ServiceResources {
  db: Db;
  principal: OrgPrincipal;
  log: FastifyBaseLogger;
  /** The request being served (`x-request-id`), named in audit records; null in background jobs. */
  requestId: string | null;
}

/** A service context acting for `principal` (from a request, or restored by a background job). */
export function serviceContext(
  resources: ServiceResources,
  principal: OrgPrincipal,
  log: FastifyBaseLogger,
  requestId: string | null = null,
): ServiceContext {
  const { config, database, secrets, models, mcp, vectors, metrics } = resources;
  return {
    db: database.db,
    database,
    config,
    secrets,
    models,
    mcp,
    vectors,
    metrics,
    principal,
    log,
    requestId,
  };
}
