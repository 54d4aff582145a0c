import type { FastifyBaseLogger } from 'fastify';
import type { AppDeps } from '../core/deps.js';
import { PROCESS_DOCUMENT_JOB, type ProcessDocumentJob, processDocument } from './process.js';

/** Runs document processing jobs in this process (server, worker or test app). */
export async function registerDocumentWorker(deps: AppDeps, log: FastifyBaseLogger): Promise<void> {
  const processDeps = {
    extractor: deps.extractor,
    database: deps.database,
    secrets: deps.secrets,
    vectors: deps.vectors,
    limits: deps.config.documentLimits,
    outbound: deps.config,
    log,
  };
  await deps.jobs.work<ProcessDocumentJob>(PROCESS_DOCUMENT_JOB, async (job) => {
    await processDocument(processDeps, job.data.documentId);
  });
}
