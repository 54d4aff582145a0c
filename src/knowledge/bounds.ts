import { Readable } from 'node:stream';
import { inflateSync, constants as zlib } from 'node:zlib';
import JSZip from 'jszip';
import type { DocumentLimits } from '../config.js';
import { ExtractionError } from './blocks.js';

/**
 * Checks that run before a parser sees a document, so that a small file cannot make one inflate
 * gigabytes: parsers (mammoth's XML DOM, PDF.js) hold many times the input in memory.
 */

const MB = 1024 * 1024;
const megabytes = (bytes: number) => `${Math.round((bytes / MB) * 10) / 10} MB`;

export const tooLargeDecompressed = (limits: DocumentLimits) =>
  new ExtractionError(
    `The document is too large when decompressed: more than ${megabytes(limits.maxDecompressedBytes)}`,
  );

export const tooManyElements = (limits: DocumentLimits) =>
  new ExtractionError(
    `The document has too many elements: more than ${limits.maxElements.toLocaleString('en-US')}`,
  );

export const tooMuchText = (limits: DocumentLimits) =>
  new ExtractionError(
    `The document has too much text: more than ${limits.maxChars.toLocaleString('en-US')} characters`,
  );

/** Counts start tags (`<name`, not `</`, `<?` or `<!`) across chunks of XML or HTML. */
export class ElementCounter {
  count = 0;
  private afterOpen = false;

  add(chunk: Uint8Array): number {
    let at = 0;
    if (this.afterOpen && chunk.length > 0) {
      this.afterOpen = false;
      if (isNameStart(chunk[0])) this.count++;
    }
    for (;;) {
      at = chunk.indexOf(0x3c, at);
      if (at === -1) break;
      at++;
      if (at === chunk.length) this.afterOpen = true;
      else if (isNameStart(chunk[at])) this.count++;
    }
    return this.count;
  }
}

// ASCII letters, `_`, `:` and any non-ASCII byte can start an element name.
const isNameStart = (byte: number) =>
  (byte >= 0x41 && byte <= 0x5a) ||
  (byte >= 0x61 && byte <= 0x7a) ||
  byte === 0x5f ||
  byte === 0x3a ||
  byte >= 0x80;

export function checkElementCount(text: string, limits: DocumentLimits): void {
  const counter = new ElementCounter();
  if (counter.add(Buffer.from(text)) > limits.maxElements) throw tooManyElements(limits);
}

/**
 * A DOCX is a zip of XML parts. Every part mammoth parses (`.xml`, `.rels`; images and embedded
 * files are never read) is inflated here as a stream, counting bytes and elements, and abandoned
 * as soon as a bound is passed, before the parser builds a DOM of it. The sizes are measured,
 * not taken from the zip's directory, which a hostile file can fake.
 */
export async function checkDocxPackage(bytes: Uint8Array, limits: DocumentLimits): Promise<void> {
  let zip: JSZip;
  try {
    zip = await JSZip.loadAsync(bytes);
  } catch (err) {
    throw new ExtractionError(`The DOCX file could not be read: ${(err as Error).message}`);
  }
  const parsed = Object.values(zip.files).filter((file) => !file.dir && /\.(xml|rels)$/i.test(file.name));
  let inflated = 0;
  const elements = new ElementCounter();
  for (const file of parsed) {
    try {
      // Leaving the loop early destroys the stream, which stops the inflation.
      // jszip's stream is an old-style readable; wrap() gives it async iteration.
      for await (const chunk of new Readable().wrap(file.nodeStream('nodebuffer')) as AsyncIterable<Buffer>) {
        inflated += chunk.length;
        if (inflated > limits.maxDecompressedBytes) throw tooLargeDecompressed(limits);
        if (elements.add(chunk) > limits.maxElements) throw tooManyElements(limits);
      }
    } catch (err) {
      if (err instanceof ExtractionError) throw err;
      throw new ExtractionError(`The DOCX file could not be read: ${(err as Error).message}`);
    }
  }
}

const STREAM = Buffer.from('stream');
const END_STREAM = Buffer.from('endstream');
const OBJ = Buffer.from(' obj');

/**
 * The inflated size of a PDF's Flate streams other than images (content streams, object
 * streams, fonts), found by scanning for `stream` ... `endstream`. PDF.js offers no bound of its
 * own, and a page whose content inflates to 200 MB keeps it busy for most of a minute. Images are
 * left out: text extraction does not decode them, and scans are legitimately large. Streams under
 * other filters are not counted; the time and memory bounds still hold for them.
 */
export function checkPdfStreams(bytes: Uint8Array, limits: DocumentLimits): void {
  const data = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let inflated = 0;
  let at = 0;
  for (;;) {
    at = data.indexOf(STREAM, at);
    if (at === -1) return;
    const keyword = at;
    at += STREAM.length;
    // `endstream` contains `stream`; the keyword that opens data is followed by an end of line.
    if (keyword >= 3 && data.toString('latin1', keyword - 3, keyword) === 'end') continue;
    let start = at;
    if (data[start] === 0x0d) start++;
    if (data[start] === 0x0a) start++;
    if (start === at) continue;
    const end = data.indexOf(END_STREAM, start);
    if (end === -1) return;
    at = end + END_STREAM.length;
    const objStart = data.lastIndexOf(OBJ, keyword);
    const header = data.toString('latin1', Math.max(objStart, keyword - 4096, 0), keyword);
    if (!/\/FlateDecode/.test(header) || /\/Subtype\s*\/Image/.test(header)) continue;
    try {
      const out = inflateSync(data.subarray(start, end), {
        maxOutputLength: limits.maxDecompressedBytes - inflated + 1,
        // Tolerates a stream cut short or followed by padding, as PDF.js does.
        finishFlush: zlib.Z_SYNC_FLUSH,
      });
      inflated += out.length;
    } catch (err) {
      if ((err as { code?: string }).code === 'ERR_BUFFER_TOO_LARGE') throw tooLargeDecompressed(limits);
      // Not valid Flate data: PDF.js will skip or reject it, which is not this check's business.
      continue;
    }
    if (inflated > limits.maxDecompressedBytes) throw tooLargeDecompressed(limits);
  }
}
