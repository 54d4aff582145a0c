import { type SQL, sql } from 'drizzle-orm';
import { customType, index, integer, jsonb, pgTable, primaryKey, text } from 'drizzle-orm/pg-core';
import { id, timestamps } from './columns.js';
import { apiKeys, groups, organizations, users } from './core.js';

export const bytea = customType<{ data: Buffer; driverData: Buffer | Uint8Array }>({
  dataType: () => 'bytea',
  fromDriver: (value) => (Buffer.isBuffer(value) ? value : Buffer.from(value)),
});

const tsvector = customType<{ data: string }>({ dataType: () => 'tsvector' });

export type DocumentStatus = 'queued' | 'processing' | 'completed' | 'failed';

export const documents = pgTable(
  'documents',
  {
    id: id(),
    organizationId: integer('organization_id')
      .notNull()
      .references(() => organizations.id),
    name: text('name').notNull(),
    /** Detected from the bytes (and, among text formats, the file name), never taken from the client. */
    mediaType: text('media_type').notNull(),
    sizeBytes: integer('size_bytes').notNull(),
    sha256: text('sha256').notNull(),
    processingStatus: text('processing_status', {
      enum: ['queued', 'processing', 'completed', 'failed'],
    })
      .notNull()
      .default('queued'),
    /** Why processing failed (unsupported type, encrypted PDF, no text...). */
    processingError: text('processing_error'),
    embeddingError: text('embedding_error'),
    ocrError: text('ocr_error'),
    pageCount: integer('page_count'),
    /** Extractions started; one that stops without an answer (a crash, a kill) is tried once more, never again. */
    processingAttempts: integer('processing_attempts').notNull().default(0),
    uploadedByUserId: integer('uploaded_by_user_id').references(() => users.id),
    apiKeyId: integer('api_key_id').references(() => apiKeys.id),
    ...timestamps,
  },
  (t) => [
    index('documents_org_status_idx').on(t.organizationId, t.processingStatus),
    index('documents_org_sha_idx').on(t.organizationId, t.sha256),
  ],
);
export type DocumentRow = typeof documents.$inferSelect;

/** The uploaded bytes, apart from the row so listing documents never reads them. */
export const documentContents = pgTable('document_contents', {
  documentId: integer('document_id')
    .primaryKey()
    .references(() => documents.id, { onDelete: 'cascade' }),
  bytes: bytea('bytes').notNull(),
});

export const documentGroups = pgTable(
  'document_groups',
  {
    documentId: integer('document_id')
      .notNull()
      .references(() => documents.id, { onDelete: 'cascade' }),
    groupId: integer('group_id')
      .notNull()
      .references(() => groups.id, { onDelete: 'cascade' }),
  },
  (t) => [
    primaryKey({ columns: [t.documentId, t.groupId] }),
    index('document_groups_group_idx').on(t.groupId),
  ],
);

/**
 * Passages of a document's text. `context` (document name and heading path) is weighted above the
 * body in `search`. Vector embeddings live in a table created at run time (src/knowledge/vector-store.ts)
 * because the PostgreSQL server may lack pgvector.
 */
export const documentChunks = pgTable(
  'document_chunks',
  {
    id: id(),
    documentId: integer('document_id')
      .notNull()
      .references(() => documents.id, { onDelete: 'cascade' }),
    organizationId: integer('organization_id')
      .notNull()
      .references(() => organizations.id),
    position: integer('position').notNull(),
    headingPath: jsonb('heading_path').$type<string[]>().notNull().default([]),
    context: text('context').notNull().default(''),
    content: text('content').notNull(),
    tokenCount: integer('token_count').notNull(),
    search: tsvector('search')
      .notNull()
      .generatedAlwaysAs(
        (): SQL =>
          sql`setweight(to_tsvector('english'::regconfig, ${documentChunks.context}), 'A') || setweight(to_tsvector('english'::regconfig, ${documentChunks.content}), 'B')`,
      ),
  },
  (t) => [
    index('document_chunks_document_idx').on(t.documentId, t.position),
    index('document_chunks_org_idx').on(t.organizationId),
    index('document_chunks_search_idx').using('gin', t.search),
  ],
);
