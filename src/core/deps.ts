import type { FastifyBaseLogger } from 'fastify';
import type { JobQueue } from '../jobs/queue.js';
import type { DocumentExtractor } from '../knowledge/extractor.js';
import type { ToolFamilies } from '../llm/tools/registry.js';
import type { StreamHub } from '../streams/stream-hub.js';
import type { ChatQueue } from '../turns/queue.js';
import type { TurnRunner } from '../turns/runner.js';
import type { ServiceResources } from './context.js';

/**
 * Everything a process shares, built once by the composition root (src/root.ts) and passed down:
 * to the HTTP app (`app.deps`), to the job handlers (src/jobs/workers.ts) and to services through
 * their ServiceContext.
 */
export interface AppDeps extends ServiceResources {
  log: FastifyBaseLogger;
  /** The bounded child process that extracts document text (started on demand, exits when idle). */
  extractor: DocumentExtractor;
  /** Durable background jobs (pg-boss); started by main.ts and the worker. */
  jobs: JobQueue;
  /** Numbered event streams (chat turns, artifact streams), shared between processes through the database. */
  streams: StreamHub;
  /** Tool families offered to chat turns and generations (tests pass their own to the root). */
  toolFamilies: ToolFamilies;
  /** Runs chat turns detached from requests. */
  turns: TurnRunner;
  /** Messages waiting for their busy chat (`if_busy: "enqueue"`), started by whichever process finds it free. */
  chatQueue: ChatQueue;
}
