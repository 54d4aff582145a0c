import type { FastifyBaseLogger } from 'fastify';
import type { AppDeps } from '../http/context.js';
import { DocumentExtractor } from './extractor.js';
import { PROCESS_DOCUMENT_JOB, type ProcessDocumentJob, processDocument } from './process.js';

/** Runs document processing jobs in this process (server, worker or test app). */
export async function registerDocumentWorker(deps: AppDeps, log: FastifyBaseLogger): Promise<void> {
  // Its process exits when idle, so nothing has to close it when the queue stops.
  const processDeps = {
    extractor: new DocumentExtractor(),
    database: deps.database,
    secrets: deps.secrets,
    limits: deps.config.documentLimits,
    outbound: deps.config,
    log,
  };
  await deps.jobs.work<ProcessDocumentJob>(PROCESS_DOCUMENT_JOB, async (job) => {
    await processDocument(processDeps, job.data.documentId);
  });
}
