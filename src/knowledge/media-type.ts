import { fileTypeFromBuffer } from 'file-type';

export const MEDIA_TYPES = {
  pdf: 'application/pdf',
  docx: 'application/vnd.openxmlformats-officedocument.wordprocessingml.document',
  html: 'text/html',
  markdown: 'text/markdown',
  csv: 'text/csv',
  json: 'application/json',
  text: 'text/plain',
} as const;

export type SupportedMediaType = (typeof MEDIA_TYPES)[keyof typeof MEDIA_TYPES];

const SUPPORTED = new Set<string>(Object.values(MEDIA_TYPES));

export const isSupported = (mediaType: string): mediaType is SupportedMediaType => SUPPORTED.has(mediaType);

/** How many leading bytes decide whether a file is text. */
const SNIFF_BYTES = 64 * 1024;

/**
 * The media type of an upload, from its bytes: binary formats by signature (`file-type`), text
 * formats by their content. The file name is only a tie-breaker among text formats (a `.md` file
 * without headings is still Markdown); it never turns bytes into a format they are not.
 */
export async function detectMediaType(bytes: Uint8Array, fileName = ''): Promise<string> {
  const signature = await fileTypeFromBuffer(bytes);
  if (signature) return signature.mime;
  const text = decodeText(bytes.subarray(0, SNIFF_BYTES), bytes.length > SNIFF_BYTES);
  if (text === null) return 'application/octet-stream';
  return classifyText(text, extensionOf(fileName));
}

function extensionOf(fileName: string): string {
  const match = /\.([a-z0-9]+)$/i.exec(fileName.trim());
  return match ? match[1].toLowerCase() : '';
}

/**
 * Text decoding for uploads: UTF-8 (with or without BOM), UTF-16 with a BOM, or Windows-1252 for
 * legacy files. Null for binary content (NUL bytes or many control characters).
 * `truncated`: the bytes may end inside a multi-byte character.
 */
export function decodeText(bytes: Uint8Array, truncated = false): string | null {
  if (bytes.length >= 2 && bytes[0] === 0xff && bytes[1] === 0xfe)
    return new TextDecoder('utf-16le').decode(bytes.subarray(2));
  if (bytes.length >= 2 && bytes[0] === 0xfe && bytes[1] === 0xff)
    return new TextDecoder('utf-16be').decode(bytes.subarray(2));
  if (bytes.includes(0)) return null;
  let text: string;
  try {
    const body = truncated ? bytes.subarray(0, Math.max(0, bytes.length - 4)) : bytes;
    text = new TextDecoder('utf-8', { fatal: true, ignoreBOM: false }).decode(body);
  } catch {
    text = new TextDecoder('windows-1252').decode(bytes);
  }
  let control = 0;
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    if (code < 32 && code !== 9 && code !== 10 && code !== 13 && code !== 12) control++;
  }
  return control > text.length * 0.01 + 2 ? null : text;
}

function classifyText(text: string, extension: string): string {
  const trimmed = text.trim();
  if (/^[[{]/.test(trimmed) && parsesAsJson(trimmed)) return MEDIA_TYPES.json;
  if (looksLikeHtml(trimmed) || (['html', 'htm', 'xhtml'].includes(extension) && trimmed.startsWith('<')))
    return MEDIA_TYPES.html;
  if (['md', 'markdown', 'mdown', 'mkd'].includes(extension)) return MEDIA_TYPES.markdown;
  if (['csv', 'tsv'].includes(extension) || looksLikeCsv(trimmed)) return MEDIA_TYPES.csv;
  if (looksLikeMarkdown(trimmed)) return MEDIA_TYPES.markdown;
  return MEDIA_TYPES.text;
}

function parsesAsJson(text: string): boolean {
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
}

function looksLikeHtml(text: string): boolean {
  if (/^(<\?xml[^>]*>\s*)?(<!--[\s\S]*?-->\s*)*<!doctype\s+html/i.test(text)) return true;
  if (/^(<!--[\s\S]*?-->\s*)*<(html|head|body)[\s>]/i.test(text)) return true;
  // A fragment: starts with a tag and has several closing tags of common elements.
  return (
    text.startsWith('<') &&
    (text.match(/<\/(p|div|h[1-6]|li|ul|ol|table|tr|td|section|article|span|a)>/gi)?.length ?? 0) >= 2
  );
}

/** The same delimiter count (at least one) on every one of the first lines: a table, not prose. */
function looksLikeCsv(text: string): boolean {
  const lines = text
    .split(/\r?\n/)
    .filter((line) => line.trim() !== '')
    .slice(0, 20);
  if (lines.length < 3) return false;
  for (const delimiter of [',', ';', '\t']) {
    const counts = lines.map((line) => line.split(delimiter).length - 1);
    if (counts[0] >= 1 && counts.every((n) => n === counts[0])) return true;
  }
  return false;
}

function looksLikeMarkdown(text: string): boolean {
  const lines = text.split(/\r?\n/);
  const headings = lines.filter((line) => /^#{1,6}\s+\S/.test(line)).length;
  const setext = lines.filter((line, i) => i > 0 && /^(=+|-+)\s*$/.test(line) && lines[i - 1].trim()).length;
  const fences = lines.filter((line) => /^(```|~~~)/.test(line)).length;
  return headings >= 1 || setext >= 1 || fences >= 2;
}
