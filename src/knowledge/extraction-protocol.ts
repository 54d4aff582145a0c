import type { DocumentLimits } from '../config.js';
import type { Chunk } from './chunk.js';

/** What the server sends the extractor process (see extractor.ts). */
export interface ExtractionRequest {
  bytes: Uint8Array;
  mediaType: string;
  limits: DocumentLimits;
}

export type ExtractionReply =
  | { ok: true; chunks: Chunk[]; pageCount: number | null; ocrError: string | null }
  | { ok: false; message: string; ocrError: string | null };
