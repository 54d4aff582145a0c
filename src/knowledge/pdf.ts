import { getDocumentProxy, getResolvedPDFJS } from 'unpdf';
import type { DocumentLimits } from '../config.js';
import { type Block, type Extraction, ExtractionError, reason } from './blocks.js';
import { checkPdfStreams, tooMuchText } from './bounds.js';

type PdfDocument = Awaited<ReturnType<typeof getDocumentProxy>>;

interface TextItem {
  str: string;
  y: number;
  fontSize: number;
  height: number;
  hasEOL: boolean;
}

interface Line {
  text: string;
  y: number;
  size: number;
}

/**
 * Text of each page through PDF.js (`unpdf`), split into paragraphs by vertical gaps. Pages with
 * images and no text are scanned pages: there is no OCR engine, so they are reported in `ocrError`.
 * Bounded: the streams' inflated size before parsing, the page count before reading any page,
 * and the text as it grows; pages are read one at a time and released.
 */
export async function extractPdf(bytes: Uint8Array, limits: DocumentLimits): Promise<Extraction> {
  checkPdfStreams(bytes, limits);
  let pdf: PdfDocument;
  try {
    // PDF.js may take ownership of the buffer it is given, so it gets a copy.
    pdf = await getDocumentProxy(new Uint8Array(bytes), { verbosity: 0 });
  } catch (err) {
    if ((err as { name?: string })?.name === 'PasswordException') {
      throw new ExtractionError('The PDF is encrypted with a password; upload an unprotected copy');
    }
    throw new ExtractionError(`The PDF could not be read: ${reason(err)}`);
  }
  try {
    if (pdf.numPages > limits.maxPages) {
      throw new ExtractionError(
        `The PDF has too many pages: ${pdf.numPages.toLocaleString('en-US')}, more than ${limits.maxPages.toLocaleString('en-US')}`,
      );
    }
    const { OPS } = await getResolvedPDFJS();
    const imageOps = new Set<number>([
      OPS.paintImageXObject,
      OPS.paintInlineImageXObject,
      OPS.paintImageMaskXObject,
      OPS.paintImageXObjectRepeat,
      OPS.paintInlineImageXObjectGroup,
    ]);
    const blocks: Block[] = [];
    const scanned: number[] = [];
    let chars = 0;
    for (let number = 1; number <= pdf.numPages; number++) {
      const page = await pdf.getPage(number);
      const content = await page.getTextContent();
      const items: TextItem[] = [];
      for (const item of content.items) {
        if (!('str' in item)) continue;
        const [, , c, d, , f] = item.transform as number[];
        items.push({
          str: item.str,
          y: f,
          fontSize: Math.hypot(c, d),
          height: item.height,
          hasEOL: item.hasEOL,
        });
      }
      const paragraphs = pageParagraphs(items);
      if (paragraphs.length === 0) {
        const ops = await page.getOperatorList();
        if (ops.fnArray.some((op) => imageOps.has(op))) scanned.push(number);
      } else {
        blocks.push({ kind: 'heading', level: 1, text: `Page ${number}`, synthetic: true });
        for (const text of paragraphs) {
          chars += text.length;
          blocks.push({ kind: 'text', text });
        }
        if (chars > limits.maxChars) throw tooMuchText(limits);
      }
      page.cleanup();
    }
    return {
      blocks,
      pageCount: pdf.numPages,
      ocrError:
        scanned.length === 0
          ? null
          : `${scanned.length === 1 ? 'Page' : 'Pages'} ${describePages(scanned)} of ${pdf.numPages} ${
              scanned.length === 1 ? 'has' : 'have'
            } no text layer (scanned images); no OCR engine is bundled, so their text is not searchable`,
    };
  } catch (err) {
    if (err instanceof ExtractionError) throw err;
    throw new ExtractionError(`The PDF could not be read: ${reason(err)}`);
  } finally {
    await pdf.destroy().catch(() => {});
  }
}

function pageParagraphs(items: TextItem[]): string[] {
  const lines: Line[] = [];
  let current: Line | null = null;
  for (const item of items) {
    const size = item.fontSize || item.height || 10;
    if (current && Math.abs(current.y - item.y) > size * 0.5) {
      lines.push(current);
      current = null;
    }
    if (!current) current = { text: '', y: item.y, size };
    current.text += item.str;
    current.size = Math.max(current.size, size);
    if (item.hasEOL) {
      lines.push(current);
      current = null;
    }
  }
  if (current) lines.push(current);

  const paragraphs: string[] = [];
  let paragraph: string[] = [];
  let previous: Line | null = null;
  const flush = () => {
    const text = paragraph.join(' ').replace(/\s+/g, ' ').trim();
    if (text) paragraphs.push(text);
    paragraph = [];
  };
  for (const line of lines) {
    if (line.text.trim() === '') {
      flush();
      previous = null;
      continue;
    }
    // A gap of more than one and a half lines separates paragraphs.
    if (previous && Math.abs(previous.y - line.y) > Math.max(previous.size, line.size) * 1.6) flush();
    // A word broken across lines with a hyphen is joined again.
    if (paragraph.length > 0 && /\w-$/.test(paragraph[paragraph.length - 1]) && /^\p{Ll}/u.test(line.text)) {
      paragraph[paragraph.length - 1] = paragraph[paragraph.length - 1].slice(0, -1) + line.text.trim();
    } else {
      paragraph.push(line.text.trim());
    }
    previous = line;
  }
  flush();
  return paragraphs;
}

/** 1,2,3,5 -> "1-3, 5" */
function describePages(pages: number[]): string {
  const ranges: string[] = [];
  for (let i = 0; i < pages.length; i++) {
    let j = i;
    while (j + 1 < pages.length && pages[j + 1] === pages[j] + 1) j++;
    ranges.push(i === j ? `${pages[i]}` : `${pages[i]}-${pages[j]}`);
    i = j;
  }
  return ranges.join(', ');
}
