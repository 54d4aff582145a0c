import { and, eq, inArray, sql } from 'drizzle-orm';
import type { DocumentLimits } from '../config.js';
import type { SecretBox } from '../crypto/secret-box.js';
import type { Database, Queryable } from '../db/client.js';
import { documentChunks, documentContents, documents } from '../db/schema/index.js';
import { recordEventIfSubscribed } from '../jobs/outbox.js';
import { providerFailure } from '../llm/provider-errors.js';
import type { ModelUrlRule } from '../net/model-base-url.js';
import { withSpan } from '../telemetry/tracing.js';
import { ExtractionError, reason } from './blocks.js';
import { embeddingModelFor, embedTexts } from './embeddings.js';
import { type DocumentExtractor, type ExtractedDocument, ExtractorStopped } from './extractor.js';
import { replaceEmbeddings, type VectorStore } from './vector-store.js';

/** The durable job that turns an upload into searchable chunks. */
export const PROCESS_DOCUMENT_JOB = 'document-processing';

export interface ProcessDeps {
  database: Database;
  secrets: SecretBox;
  vectors: VectorStore;
  limits: DocumentLimits;
  extractor: DocumentExtractor;
  /** Where an embedding model's base URL may point. */
  outbound: ModelUrlRule;
  log: { info(obj: object, msg: string): void; warn(obj: object, msg: string): void };
}

/**
 * Extractions a document may start. One that stops without an answer (the extractor killed, or
 * the whole process stopped and the job expired) is tried once more; a file that brings down
 * two extractors is not given a third.
 */
export const MAX_EXTRACTION_ATTEMPTS = 2;

export interface ProcessDocumentJob {
  documentId: number;
}

const INSERT_BATCH = 200;

/**
 * queued -> processing -> completed | failed. Safe to run again for the same document (a retried
 * job after a crash): it claims the document only while it is queued or processing, and replaces
 * whatever chunks an earlier attempt left. Problems with the file, bounds exceeded included, mark
 * it failed with a reason at once; database errors are thrown so the job queue retries.
 * Extraction and chunking run in a child process (`extractor.ts`), off this event loop.
 */
export async function processDocument(deps: ProcessDeps, documentId: number): Promise<void> {
  let claimed = await claim(deps, documentId);
  if (!claimed) return;

  const [content] = await deps.database.db
    .select({ bytes: documentContents.bytes })
    .from(documentContents)
    .where(eq(documentContents.documentId, documentId));
  if (!content) {
    await fail(deps, documentId, 'The uploaded file is missing', null);
    return;
  }

  const stoppedTooOften = () =>
    fail(
      deps,
      documentId,
      `Text extraction stopped without finishing ${MAX_EXTRACTION_ATTEMPTS} times (the extractor crashed or was stopped); the document is not tried again`,
      null,
    );
  // A job run after the process died mid-extraction finds the attempts of the runs before it.
  if (claimed.attempts > MAX_EXTRACTION_ATTEMPTS) {
    await stoppedTooOften();
    return;
  }
  let extraction: ExtractedDocument;
  for (;;) {
    try {
      const attempt = claimed;
      extraction = await withSpan(
        'document.extract',
        { 'scriptorium.document.id': documentId, 'scriptorium.document.media_type': attempt.mediaType },
        () => deps.extractor.extract(content.bytes, attempt.mediaType, deps.limits),
      );
      break;
    } catch (err) {
      if (!(err instanceof ExtractorStopped)) {
        const error =
          err instanceof ExtractionError
            ? err
            : new ExtractionError(`The file could not be read: ${reason(err)}`);
        await fail(deps, documentId, error.message, error.ocrError);
        return;
      }
      deps.log.warn(
        { documentId, attempt: claimed.attempts, err: err.message },
        'document extractor stopped',
      );
      if (claimed.attempts >= MAX_EXTRACTION_ATTEMPTS) {
        await stoppedTooOften();
        return;
      }
      claimed = await claim(deps, documentId);
      if (!claimed) return;
    }
  }

  const { chunks } = extraction;
  const chunkIds = await withSpan(
    'document.chunk',
    { 'scriptorium.document.id': documentId, 'scriptorium.chunks': chunks.length },
    () =>
      deps.database.db.transaction(async (tx) => {
        await tx.delete(documentChunks).where(eq(documentChunks.documentId, documentId));
        const ids: number[] = [];
        const [document] = await tx
          .select({ name: documents.name })
          .from(documents)
          .where(eq(documents.id, documentId))
          .for('update');
        if (!document) return null;
        for (let i = 0; i < chunks.length; i += INSERT_BATCH) {
          const inserted = await tx
            .insert(documentChunks)
            .values(
              chunks.slice(i, i + INSERT_BATCH).map((chunk) => ({
                documentId,
                organizationId: claimed.organizationId,
                position: chunk.position,
                headingPath: chunk.headingPath,
                context: [document.name, ...chunk.headingPath].join(' / '),
                content: chunk.text,
                tokenCount: chunk.tokenCount,
              })),
            )
            .returning({ id: documentChunks.id });
          ids.push(...inserted.map((row) => row.id));
        }
        await tx
          .update(documents)
          .set({ pageCount: extraction.pageCount, ocrError: extraction.ocrError, updatedAt: sql`now()` })
          .where(eq(documents.id, documentId));
        return ids;
      }),
  );
  if (chunkIds === null) return; // deleted meanwhile

  const embeddingError = await withSpan('document.embed', { 'scriptorium.document.id': documentId }, () =>
    embedChunks(
      deps,
      { documentId, organizationId: claimed.organizationId },
      chunkIds,
      chunks.map((chunk) => chunk.text),
    ),
  );
  await deps.database.db.transaction(async (tx) => {
    const [done] = await tx
      .update(documents)
      .set({ processingStatus: 'completed', embeddingError, processingError: null, updatedAt: sql`now()` })
      .where(and(eq(documents.id, documentId), eq(documents.processingStatus, 'processing')))
      .returning({ organizationId: documents.organizationId, name: documents.name });
    if (done) await recordDocumentEvent(tx, documentId, done, 'completed', null);
  });
  deps.log.info({ documentId, chunks: chunks.length, embeddingError }, 'document processed');
}

/** Stores vectors for the chunks when the organization has an embedding model; returns why not, if it failed. */
async function embedChunks(
  deps: ProcessDeps,
  target: { documentId: number; organizationId: number },
  chunkIds: number[],
  texts: string[],
): Promise<string | null> {
  const choice = await embeddingModelFor(
    deps.database.db,
    deps.secrets,
    target.organizationId,
    deps.outbound,
  );
  if (!choice) return null;
  if (!choice.model) return choice.error;
  if (!(await deps.vectors.available())) {
    return 'Vector search is unavailable: this PostgreSQL server has no pgvector extension; the document is searchable by full text';
  }
  try {
    const vectors = await embedTexts(choice.model, texts);
    await replaceEmbeddings(
      deps.database.db,
      { ...target, modelConfigurationId: choice.configurationId },
      chunkIds.map((chunkId, i) => ({ chunkId, embedding: vectors[i] })),
    );
    return null;
  } catch (err) {
    deps.log.warn({ err, documentId: target.documentId }, 'embedding failed');
    // Shown on the document: the provider's status, never its words (see providerFailure).
    return `Embedding failed: ${providerFailure(err) ?? reason(err)}`;
  }
}

/** Marks the document processing and counts the attempt; null once it is done, failed or deleted. */
async function claim(deps: ProcessDeps, documentId: number) {
  const [claimed] = await deps.database.db
    .update(documents)
    .set({
      processingStatus: 'processing',
      processingAttempts: sql`${documents.processingAttempts} + 1`,
      updatedAt: sql`now()`,
    })
    .where(and(eq(documents.id, documentId), inArray(documents.processingStatus, ['queued', 'processing'])))
    .returning({
      organizationId: documents.organizationId,
      mediaType: documents.mediaType,
      attempts: documents.processingAttempts,
    });
  return claimed ?? null;
}

async function fail(deps: ProcessDeps, documentId: number, message: string, ocrError: string | null) {
  await deps.database.db.transaction(async (tx) => {
    await tx.delete(documentChunks).where(eq(documentChunks.documentId, documentId));
    const [failed] = await tx
      .update(documents)
      .set({ processingStatus: 'failed', processingError: message, ocrError, updatedAt: sql`now()` })
      .where(eq(documents.id, documentId))
      .returning({ organizationId: documents.organizationId, name: documents.name });
    if (failed) await recordDocumentEvent(tx, documentId, failed, 'failed', message);
  });
  deps.log.info({ documentId, reason: message }, 'document processing failed');
}

/**
 * `document_processed` / `document_failed` for the organization's webhooks (documents belong to no
 * project), in the transaction that records the outcome. `error` is the document's own
 * `processing_error`, the reason shown by the documents API.
 */
function recordDocumentEvent(
  tx: Queryable,
  documentId: number,
  document: { organizationId: number; name: string },
  status: 'completed' | 'failed',
  error: string | null,
) {
  return recordEventIfSubscribed(tx, {
    organizationId: document.organizationId,
    projectId: null,
    eventName: status === 'completed' ? 'document_processed' : 'document_failed',
    eventData: { document_id: documentId, name: document.name, processing_status: status, error },
  });
}
