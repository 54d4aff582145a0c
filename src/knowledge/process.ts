import { and, eq, inArray, sql } from 'drizzle-orm';
import type { SecretBox } from '../crypto/secret-box.js';
import type { Database } from '../db/client.js';
import { documentChunks, documentContents, documents } from '../db/schema/index.js';
import { withSpan } from '../telemetry/tracing.js';
import { type Extraction, ExtractionError, reason } from './blocks.js';
import { chunkBlocks } from './chunk.js';
import { embeddingModelFor, embedTexts } from './embeddings.js';
import { extractDocument } from './extract.js';
import { replaceEmbeddings, type VectorStore } from './vector-store.js';

/** The durable job that turns an upload into searchable chunks. */
export const PROCESS_DOCUMENT_JOB = 'document-processing';

export interface ProcessDeps {
  database: Database;
  secrets: SecretBox;
  vectors: VectorStore;
  log: { info(obj: object, msg: string): void; warn(obj: object, msg: string): void };
}

export interface ProcessDocumentJob {
  documentId: number;
}

const INSERT_BATCH = 200;

/**
 * queued -> processing -> completed | failed. Safe to run again for the same document (a retried
 * job after a crash): it claims the document only while it is queued or processing, and replaces
 * whatever chunks an earlier attempt left. Problems with the file mark it failed with a reason;
 * database errors are thrown so the job queue retries.
 */
export async function processDocument(deps: ProcessDeps, documentId: number): Promise<void> {
  const { db } = deps.database;
  const [claimed] = await db
    .update(documents)
    .set({ processingStatus: 'processing', updatedAt: sql`now()` })
    .where(and(eq(documents.id, documentId), inArray(documents.processingStatus, ['queued', 'processing'])))
    .returning({ organizationId: documents.organizationId, mediaType: documents.mediaType });
  if (!claimed) return;

  const [content] = await db
    .select({ bytes: documentContents.bytes })
    .from(documentContents)
    .where(eq(documentContents.documentId, documentId));
  if (!content) {
    await fail(deps, documentId, 'The uploaded file is missing', null);
    return;
  }

  let extraction: Extraction;
  try {
    extraction = await withSpan(
      'document.extract',
      { 'scriptorium.document.id': documentId, 'scriptorium.document.media_type': claimed.mediaType },
      () => extractDocument(content.bytes, claimed.mediaType),
    );
  } catch (err) {
    // Anything the file makes a parser throw is the file's problem, not a reason to retry.
    const error =
      err instanceof ExtractionError
        ? err
        : new ExtractionError(`The file could not be read: ${reason(err)}`);
    await fail(deps, documentId, error.message, error.ocrError);
    return;
  }

  const chunks = chunkBlocks(extraction.blocks);
  const store = (fn: () => Promise<number[] | null>) =>
    withSpan(
      'document.chunk',
      { 'scriptorium.document.id': documentId, 'scriptorium.chunks': chunks.length },
      fn,
    );
  const chunkIds = await store(() =>
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
  await db
    .update(documents)
    .set({ processingStatus: 'completed', embeddingError, processingError: null, updatedAt: sql`now()` })
    .where(and(eq(documents.id, documentId), eq(documents.processingStatus, 'processing')));
  deps.log.info({ documentId, chunks: chunks.length, embeddingError }, 'document processed');
}

/** Stores vectors for the chunks when the organization has an embedding model; returns why not, if it failed. */
async function embedChunks(
  deps: ProcessDeps,
  target: { documentId: number; organizationId: number },
  chunkIds: number[],
  texts: string[],
): Promise<string | null> {
  const choice = await embeddingModelFor(deps.database.db, deps.secrets, target.organizationId);
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
    deps.log.warn({ err: reason(err), documentId: target.documentId }, 'embedding failed');
    return `Embedding failed: ${reason(err)}`;
  }
}

async function fail(deps: ProcessDeps, documentId: number, message: string, ocrError: string | null) {
  await deps.database.db.transaction(async (tx) => {
    await tx.delete(documentChunks).where(eq(documentChunks.documentId, documentId));
    await tx
      .update(documents)
      .set({ processingStatus: 'failed', processingError: message, ocrError, updatedAt: sql`now()` })
      .where(eq(documents.id, documentId));
  });
  deps.log.info({ documentId, reason: message }, 'document processing failed');
}
