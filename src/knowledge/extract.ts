import { parse as parseCsv } from 'csv-parse/sync';
import { convert as htmlToText, type SelectorDefinition } from 'html-to-text';
import { DOCUMENT_LIMIT_DEFAULTS, type DocumentLimits } from '../config.js';
import { type Block, type Extraction, ExtractionError, reason } from './blocks.js';
import { checkDocxPackage, checkElementCount, tooMuchText } from './bounds.js';
import { decodeText, isSupported, MEDIA_TYPES } from './media-type.js';

const SUPPORTED_NAMES = 'PDF, DOCX, HTML, Markdown, plain text, CSV and JSON';

/**
 * The document's text as blocks, within `limits` (a document past one fails with the reason).
 * The server runs this in a child process (`extractor.ts`), never on its own event loop.
 */
export async function extractDocument(
  bytes: Uint8Array,
  mediaType: string,
  limits: DocumentLimits = DOCUMENT_LIMIT_DEFAULTS,
): Promise<Extraction> {
  if (!isSupported(mediaType)) {
    throw new ExtractionError(`Unsupported file type ${mediaType}: supported are ${SUPPORTED_NAMES}`);
  }
  const extraction = await extractSupported(bytes, mediaType, limits);
  let chars = 0;
  for (const block of extraction.blocks) chars += block.text.length;
  if (chars > limits.maxChars) throw tooMuchText(limits);
  if (!extraction.blocks.some((block) => block.kind === 'text' && block.text.trim() !== '')) {
    throw new ExtractionError(
      extraction.ocrError
        ? 'The document has no extractable text: its pages are images and no OCR engine is available'
        : 'The document contains no text',
      extraction.ocrError,
    );
  }
  return extraction;
}

async function extractSupported(
  bytes: Uint8Array,
  mediaType: string,
  limits: DocumentLimits,
): Promise<Extraction> {
  const plain = (blocks: Block[]): Extraction => ({ blocks, pageCount: null, ocrError: null });
  switch (mediaType) {
    // PDF.js and mammoth load only for their own formats: the extractor process starts per document.
    case MEDIA_TYPES.pdf:
      return (await import('./pdf.js')).extractPdf(bytes, limits);
    case MEDIA_TYPES.docx:
      await checkDocxPackage(bytes, limits);
      return plain(htmlBlocks(await docxToHtml(bytes), false));
    case MEDIA_TYPES.html: {
      const html = textOf(bytes);
      checkElementCount(html, limits);
      return plain(htmlBlocks(html, true));
    }
    case MEDIA_TYPES.markdown:
      return plain(markdownBlocks(textOf(bytes)));
    case MEDIA_TYPES.csv:
      return plain(csvBlocks(textOf(bytes)));
    case MEDIA_TYPES.json:
      return plain(jsonBlocks(textOf(bytes)));
    default:
      return plain(paragraphBlocks(textOf(bytes)));
  }
}

function textOf(bytes: Uint8Array): string {
  const text = decodeText(bytes);
  if (text === null) throw new ExtractionError('The file is not readable text');
  return text.replace(/^\uFEFF/, '').replace(/\r\n?/g, '\n');
}

async function docxToHtml(bytes: Uint8Array): Promise<string> {
  const { default: mammoth } = await import('mammoth');
  try {
    const result = await mammoth.convertToHtml(
      { buffer: Buffer.from(bytes) },
      // Images would be read and inlined as data URIs only to be dropped: they are never read.
      { convertImage: mammoth.images.imgElement(async () => ({ src: '' })) },
    );
    return result.value;
  } catch (err) {
    throw new ExtractionError(`The DOCX file could not be read: ${reason(err)}`);
  }
}

// ------------------------------------------------------------------------------------- HTML

// Page furniture rather than content; skipped wherever it appears.
const SKIPPED = ['script', 'style', 'noscript', 'template', 'svg', 'canvas', 'iframe', 'object', 'button'];
const FURNITURE = ['nav', 'header', 'footer', 'aside', 'form'];

// Headings become Markdown headings so one parser gives HTML, DOCX and Markdown the same structure.
const headingSelectors: SelectorDefinition[] = [1, 2, 3, 4, 5, 6].map((level) => ({
  selector: `h${level}`,
  format: 'markdownHeading',
  options: { level },
}));

const htmlOptions = (mainOnly: boolean) => ({
  wordwrap: false as const,
  // The main text: <main> (or <article>) when the page has one, the whole body otherwise.
  ...(mainOnly ? { baseElements: { selectors: ['main', 'article'], returnDomByDefault: true } } : {}),
  formatters: {
    markdownHeading: (elem: any, walk: any, builder: any, formatOptions: any) => {
      builder.openBlock({ leadingLineBreaks: 2 });
      builder.addLiteral(`${'#'.repeat(formatOptions.level ?? 1)} `);
      walk(elem.children, builder);
      builder.closeBlock({ trailingLineBreaks: 2 });
    },
  },
  selectors: [
    ...headingSelectors,
    ...SKIPPED.map((selector) => ({ selector, format: 'skip' })),
    ...(mainOnly ? FURNITURE.map((selector) => ({ selector, format: 'skip' })) : []),
    { selector: 'a', options: { ignoreHref: true } },
    { selector: 'img', format: 'skip' },
    { selector: 'table', format: 'dataTable', options: { uppercaseHeaderCells: false } },
  ],
});

export function htmlBlocks(html: string, mainOnly: boolean): Block[] {
  let text = htmlToText(html, htmlOptions(mainOnly));
  // A page whose <main> is all furniture: fall back to everything but scripts and styles.
  if (mainOnly && text.trim() === '') text = htmlToText(html, htmlOptions(false));
  return markdownBlocks(text);
}

// --------------------------------------------------------------------------------- Markdown

/** Headings (ATX and setext) and paragraphs; fenced code stays one block, never read as headings. */
export function markdownBlocks(text: string): Block[] {
  const blocks: Block[] = [];
  let paragraph: string[] = [];
  let fence: string | null = null;
  const flush = () => {
    const joined = paragraph.join('\n').trim();
    if (joined) blocks.push({ kind: 'text', text: cleanMarkdown(joined) });
    paragraph = [];
  };
  for (const line of text.split('\n')) {
    if (fence !== null) {
      paragraph.push(line);
      if (line.trimStart().startsWith(fence)) {
        fence = null;
        flush();
      }
      continue;
    }
    const fenceOpen = /^\s{0,3}(```+|~~~+)/.exec(line);
    if (fenceOpen) {
      flush();
      fence = fenceOpen[1];
      paragraph.push(line);
      continue;
    }
    const atx = /^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$/.exec(line);
    if (atx) {
      flush();
      if (atx[2]) blocks.push({ kind: 'heading', level: atx[1].length, text: cleanMarkdown(atx[2]) });
      continue;
    }
    const setext = /^\s{0,3}(=+|-+)\s*$/.exec(line);
    if (setext && paragraph.length === 1) {
      const heading = paragraph[0].trim();
      paragraph = [];
      blocks.push({
        kind: 'heading',
        level: setext[1].startsWith('=') ? 1 : 2,
        text: cleanMarkdown(heading),
      });
      continue;
    }
    if (line.trim() === '') flush();
    else paragraph.push(line);
  }
  flush();
  return blocks;
}

/** Link targets and image URLs are noise to search; their text stays. */
function cleanMarkdown(text: string): string {
  return text
    .replace(/!\[([^\]]*)\]\([^)]*\)/g, '$1')
    .replace(/\[([^\]]+)\]\([^)]*\)/g, '$1')
    .replace(/<(https?:[^>]+)>/g, '$1');
}

export function paragraphBlocks(text: string): Block[] {
  return text
    .split(/\n\s*\n/)
    .map((part) => part.trim())
    .filter(Boolean)
    .map((part) => ({ kind: 'text' as const, text: part }));
}

// -------------------------------------------------------------------------------- CSV, JSON

/** Each row becomes `column: value; ...` so a passage makes sense on its own. */
export function csvBlocks(text: string): Block[] {
  const firstLine = text.split('\n', 1)[0];
  const delimiter = [',', ';', '\t'].reduce((best, candidate) =>
    firstLine.split(candidate).length > firstLine.split(best).length ? candidate : best,
  );
  let rows: string[][];
  try {
    rows = parseCsv(text, {
      delimiter,
      relax_column_count: true,
      relax_quotes: true,
      skip_empty_lines: true,
      trim: true,
    }) as string[][];
  } catch {
    return paragraphBlocks(text);
  }
  if (rows.length === 0) return [];
  const [header, ...body] = rows;
  if (body.length === 0) return [{ kind: 'text', text: header.join(', ') }];
  return body
    .map((row) =>
      row
        .map((value, i) => (value === '' ? '' : header[i] ? `${header[i]}: ${value}` : value))
        .filter(Boolean)
        .join('; '),
    )
    .filter(Boolean)
    .map((line) => ({ kind: 'text' as const, text: line }));
}

/** `path: value` lines; the top-level keys (or array items) head their sections. */
export function jsonBlocks(text: string): Block[] {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new ExtractionError(`The JSON file could not be parsed: ${reason(err)}`);
  }
  const blocks: Block[] = [];
  const sections: [string | null, unknown][] = Array.isArray(value)
    ? value.map((item) => [null, item])
    : isRecord(value)
      ? Object.entries(value)
      : [[null, value]];
  for (const [key, item] of sections) {
    if (key !== null) blocks.push({ kind: 'heading', level: 1, text: key, synthetic: true });
    const lines = flatten(item, key ?? '');
    if (lines.length > 0) blocks.push({ kind: 'text', text: lines.join('\n') });
  }
  return blocks;
}

function flatten(value: unknown, path: string, lines: string[] = []): string[] {
  if (Array.isArray(value)) {
    for (const [i, item] of value.entries()) flatten(item, `${path}[${i}]`, lines);
  } else if (isRecord(value)) {
    for (const [key, item] of Object.entries(value)) flatten(item, path ? `${path}.${key}` : key, lines);
  } else if (value !== null && value !== '') {
    lines.push(path ? `${path}: ${String(value)}` : String(value));
  }
  return lines;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
