import { type Static, Type } from '@sinclair/typebox';
import { PageQuery, Pagination } from '../../http/pagination.js';
import { Nullable, Timestamp } from '../../http/schemas.js';

export const ProcessingStatus = Type.Union(
  [Type.Literal('queued'), Type.Literal('processing'), Type.Literal('completed'), Type.Literal('failed')],
  { title: 'ProcessingStatus', description: 'queued -> processing -> completed or failed' },
);

/** The spec's Document (section 2), exactly: what an upload returns. */
export const Document = Type.Object(
  {
    id: Type.Integer(),
    name: Type.String(),
    processing_status: ProcessingStatus,
    embedding_error: Nullable(
      Type.String({ description: 'Why vectors could not be made; full text search still works' }),
    ),
    ocr_error: Nullable(
      Type.String({ description: 'Pages without a text layer (no OCR engine is bundled)' }),
    ),
    group_ids: Type.Array(Type.Integer()),
  },
  { title: 'Document' },
);
export type Document = Static<typeof Document>;

/** The extension reads add what the file is and why processing failed. */
export const DocumentDetail = Type.Object(
  {
    ...Document.properties,
    processing_error: Nullable(Type.String({ description: 'Why processing failed (status failed)' })),
    media_type: Type.String({ description: 'Detected from the content' }),
    size_bytes: Type.Integer(),
    sha256: Type.String(),
    page_count: Nullable(Type.Integer()),
    chunk_count: Type.Integer({ description: 'Searchable passages' }),
    created_at: Timestamp,
    updated_at: Timestamp,
  },
  { title: 'DocumentDetail' },
);
export type DocumentDetail = Static<typeof DocumentDetail>;

export const UploadResponse = Type.Object({ document: Document }, { title: 'UploadResponse' });
export const DocumentResponse = Type.Object({ document: DocumentDetail }, { title: 'DocumentResponse' });
export const DocumentListResponse = Type.Object(
  {
    documents: Type.Array(DocumentDetail),
    pagination: Pagination,
  },
  { title: 'DocumentListResponse' },
);

export const DocumentListQuery = Type.Object({
  ...PageQuery.properties,
  processing_status: Type.Optional(ProcessingStatus),
});
export type DocumentListQuery = Static<typeof DocumentListQuery>;

/** For /openapi.json only: the multipart body is read by the route itself. */
export const UploadBody = Type.Object(
  {
    document: Type.String({
      format: 'binary',
      description: 'The file (PDF, DOCX, HTML, Markdown, text, CSV, JSON)',
    }),
    'group_ids[]': Type.Optional(
      Type.Array(Type.Integer(), { description: 'Groups of the organization; repeat the field for several' }),
    ),
    use_default_group: Type.Optional(Type.Boolean({ description: 'Put the document in the default group' })),
    name: Type.Optional(Type.String({ description: 'Display name; defaults to the file name' })),
  },
  {
    title: 'UploadBody',
    description: 'multipart/form-data: `document` plus `group_ids[]` or `use_default_group=true`',
  },
);
