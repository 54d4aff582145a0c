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
