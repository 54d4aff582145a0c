import type { DocumentRow } from '../../db/schema/index.js';
import { formatTimestamp } from '../../http/timestamps.js';
import type { Document, DocumentDetail } from './schemas.js';

export const presentDocument = (row: DocumentRow, groupIds: number[]): Document => ({
  id: row.id,
  name: row.name,
  processing_status: row.processingStatus,
  embedding_error: row.embeddingError,
  ocr_error: row.ocrError,
  group_ids: groupIds,
});

export const presentDocumentDetail = (
  row: DocumentRow,
  groupIds: number[],
  chunkCount: number,
): DocumentDetail => ({
  ...presentDocument(row, groupIds),
  processing_error: row.processingError,
  media_type: row.mediaType,
  size_bytes: row.sizeBytes,
  sha256: row.sha256,
  page_count: row.pageCount,
  chunk_count: chunkCount,
  created_at: formatTimestamp(row.createdAt),
  updated_at: formatTimestamp(row.updatedAt),
});
