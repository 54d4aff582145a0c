import type { DocumentLimits } from '../config.js';
import type { Chunk } from './chunk.js';

/**
 * A document's text as a flat list of structure: headings (with their level) and text blocks
 * (paragraphs, list items, table rows). `synthetic` headings (a PDF page, a JSON key) set the
 * heading path of what follows without being part of the document's text.
 */
export type Block =
  | { kind: 'heading'; level: number; text: string; synthetic?: boolean }
  | { kind: 'text'; text: string };

export interface Extraction {
  blocks: Block[];
  pageCount: number | null;
  /** Set when some pages have no text layer (scanned images): their text is missing. */
  ocrError: string | null;
}

/** A document that cannot be processed, with a reason meant for people. */
export class ExtractionError extends Error {
  override readonly name = 'ExtractionError';
  constructor(
    message: string,
    readonly ocrError: string | null = null,
  ) {
    super(message);
  }
}

export function reason(err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  return message.replace(/\s+/g, ' ').trim().slice(0, 300) || 'unknown error';
}

/** What the server sends the extractor process (see extractor.ts). */
export interface ExtractionRequest {
  bytes: Uint8Array;
  mediaType: string;
  limits: DocumentLimits;
}

export type ExtractionReply =
  | { ok: true; chunks: Chunk[]; pageCount: number | null; ocrError: string | null }
  | { ok: false; message: string; ocrError: string | null };
