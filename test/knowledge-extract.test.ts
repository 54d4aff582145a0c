import { describe, expect, it } from 'vitest';
import { ExtractionError } from '../src/knowledge/blocks.js';
import { chunkBlocks, estimateTokens, splitToFit } from '../src/knowledge/chunk.js';
import { extractDocument, markdownBlocks } from '../src/knowledge/extract.js';
import { detectMediaType, MEDIA_TYPES } from '../src/knowledge/media-type.js';
import { orQuery } from '../src/knowledge/search.js';
import {
  makeCorruptPdf,
  makeDocx,
  makeEncryptedPdf,
  makeHtml,
  makeMarkdown,
  makePdf,
  makePng,
} from './fixtures/documents.js';

const text = (value: string) => Buffer.from(value, 'utf8');

const allText = async (bytes: Uint8Array, mediaType: string) => {
  const { blocks } = await extractDocument(bytes, mediaType);
  return blocks
    .filter((b) => !(b.kind === 'heading' && b.synthetic))
    .map((b) => b.text)
    .join('\n');
};

describe('media type detection (from content, not the client)', () => {
  it('recognises binary formats by signature whatever the file is called', async () => {
    expect(await detectMediaType(await makePdf([{ paragraphs: ['hello'] }]), 'notes.txt')).toBe(
      MEDIA_TYPES.pdf,
    );
    expect(await detectMediaType(await makeDocx([{ paragraphs: ['hello'] }]), 'x.pdf')).toBe(
      MEDIA_TYPES.docx,
    );
    expect(await detectMediaType(makePng(4, 4), 'scan.pdf')).toBe('image/png');
  });

  it('tells text formats apart by their content', async () => {
    expect(await detectMediaType(text('{"a": 1}'), 'a.txt')).toBe(MEDIA_TYPES.json);
    expect(await detectMediaType(text('<!DOCTYPE html><html><body><p>x</p></body></html>'), 'a.txt')).toBe(
      MEDIA_TYPES.html,
    );
    expect(await detectMediaType(text('# Title\n\nSome words.'), 'upload')).toBe(MEDIA_TYPES.markdown);
    expect(await detectMediaType(text('a,b,c\n1,2,3\n4,5,6\n'), 'upload')).toBe(MEDIA_TYPES.csv);
    expect(await detectMediaType(text('Just a sentence, with a comma.\nAnd another line.'), 'x')).toBe(
      MEDIA_TYPES.text,
    );
  });

  it('uses the file name only to choose among text formats', async () => {
    expect(await detectMediaType(text('plain words'), 'readme.md')).toBe(MEDIA_TYPES.markdown);
    expect(await detectMediaType(text('name\nAda\n'), 'people.csv')).toBe(MEDIA_TYPES.csv);
    // A .pdf name does not make text a PDF.
    expect(await detectMediaType(text('not really a pdf'), 'fake.pdf')).toBe(MEDIA_TYPES.text);
  });

  it('calls unknown binary content octet-stream', async () => {
    expect(await detectMediaType(Buffer.from([0, 1, 2, 3, 0, 255, 254, 0, 7]), 'blob.txt')).toBe(
      'application/octet-stream',
    );
  });
});

describe('text extraction', () => {
  it('reads PDF text page by page with paragraphs', async () => {
    const pdf = await makePdf([
      { paragraphs: ['Alpha paragraph about glaciers.', 'Beta paragraph about moraines.'] },
      { paragraphs: ['Gamma paragraph on page two.'] },
    ]);
    const { blocks, pageCount, ocrError } = await extractDocument(pdf, MEDIA_TYPES.pdf);
    expect(pageCount).toBe(2);
    expect(ocrError).toBeNull();
    expect(blocks).toEqual([
      { kind: 'heading', level: 1, text: 'Page 1', synthetic: true },
      { kind: 'text', text: 'Alpha paragraph about glaciers.' },
      { kind: 'text', text: 'Beta paragraph about moraines.' },
      { kind: 'heading', level: 1, text: 'Page 2', synthetic: true },
      { kind: 'text', text: 'Gamma paragraph on page two.' },
    ]);
  });

  it('keeps the text of a PDF with one scanned page and reports that page in ocrError', async () => {
    const pdf = await makePdf([{ paragraphs: ['Readable page text.'] }, { image: true }, {}]);
    const result = await extractDocument(pdf, MEDIA_TYPES.pdf);
    expect(result.blocks.some((b) => b.text === 'Readable page text.')).toBe(true);
    expect(result.ocrError).toMatch(/^Page 2 of 3 has no text layer/);
  });

  it('fails an image-only PDF with no text and says OCR is missing', async () => {
    const error = await extractDocument(
      await makePdf([{ image: true }, { image: true }]),
      MEDIA_TYPES.pdf,
    ).catch((e) => e);
    expect(error).toBeInstanceOf(ExtractionError);
    expect(error.message).toMatch(/no extractable text/);
    expect(error.ocrError).toMatch(/^Pages 1-2 of 2 have no text layer/);
  });

  it('fails encrypted and corrupt PDFs with readable reasons', async () => {
    await expect(extractDocument(await makeEncryptedPdf(), MEDIA_TYPES.pdf)).rejects.toThrow(
      /encrypted with a password/,
    );
    await expect(extractDocument(makeCorruptPdf(), MEDIA_TYPES.pdf)).rejects.toThrow(/could not be read/);
  });

  it('reads DOCX headings and paragraphs', async () => {
    const docx = await makeDocx([
      { heading: 'Hive care', level: 1, paragraphs: ['Bees need water in summer.'] },
      { heading: 'Winter', level: 2, paragraphs: ['Insulate the hive.'] },
    ]);
    const { blocks } = await extractDocument(docx, MEDIA_TYPES.docx);
    expect(blocks).toEqual([
      { kind: 'heading', level: 1, text: 'Hive care' },
      { kind: 'text', text: 'Bees need water in summer.' },
      { kind: 'heading', level: 2, text: 'Winter' },
      { kind: 'text', text: 'Insulate the hive.' },
    ]);
  });

  it('fails a DOCX that is not a word document', async () => {
    const broken = await makeDocx([{ paragraphs: ['x'] }]);
    // Cut the archive: the signature survives, the central directory does not.
    await expect(extractDocument(broken.subarray(0, 200), MEDIA_TYPES.docx)).rejects.toThrow(
      /DOCX file could not be read/,
    );
  });

  it('reads the main text of HTML without scripts, styles or navigation', async () => {
    const html = makeHtml('Volcano guide', [{ heading: 'Magma', paragraphs: ['Magma rises & cools.'] }]);
    const result = await allText(text(html), MEDIA_TYPES.html);
    expect(result).toContain('Volcano guide');
    expect(result).toContain('Magma rises & cools.');
    for (const hidden of [
      'zzscriptonly',
      'zzstyleonly',
      'zznavonly',
      'zzfooteronly',
      'trackingPixelCounter',
    ]) {
      expect(result).not.toContain(hidden);
    }
  });

  it('reads Markdown structure without mistaking code for headings', () => {
    const blocks = markdownBlocks(
      'Title\n=====\n\nIntro with a [link](https://example.com/x).\n\n## Part\n\n```\n# not a heading\n```\n\nEnd.',
    );
    expect(blocks).toEqual([
      { kind: 'heading', level: 1, text: 'Title' },
      { kind: 'text', text: 'Intro with a link.' },
      { kind: 'heading', level: 2, text: 'Part' },
      { kind: 'text', text: '```\n# not a heading\n```' },
      { kind: 'text', text: 'End.' },
    ]);
  });

  it('turns CSV rows into self-describing lines', async () => {
    const csv = 'city,country\nParis,France\n"Nice, the city",France\n';
    expect(await allText(text(csv), MEDIA_TYPES.csv)).toBe(
      'city: Paris; country: France\ncity: Nice, the city; country: France',
    );
  });

  it('flattens JSON into path: value lines under its top-level keys', async () => {
    const { blocks } = await extractDocument(
      text(JSON.stringify({ planet: { name: 'Mars', moons: ['Phobos', 'Deimos'] }, notes: 'red dust' })),
      MEDIA_TYPES.json,
    );
    expect(blocks).toEqual([
      { kind: 'heading', level: 1, text: 'planet', synthetic: true },
      { kind: 'text', text: 'planet.name: Mars\nplanet.moons[0]: Phobos\nplanet.moons[1]: Deimos' },
      { kind: 'heading', level: 1, text: 'notes', synthetic: true },
      { kind: 'text', text: 'notes: red dust' },
    ]);
  });

  it('refuses unsupported types and files without text', async () => {
    await expect(extractDocument(makePng(2, 2), 'image/png')).rejects.toThrow(
      /Unsupported file type image\/png/,
    );
    await expect(extractDocument(text('   \n\n  '), MEDIA_TYPES.text)).rejects.toThrow(/contains no text/);
    await expect(
      extractDocument(text(makeMarkdown('Only a heading', [])), MEDIA_TYPES.markdown),
    ).rejects.toThrow(/contains no text/);
  });
});

describe('chunking', () => {
  const paragraph = (topic: string, words = 120) =>
    `${Array.from({ length: words }, (_, i) => `${topic}${i % 7}`).join(' ')}.`;

  it('keeps small documents in one chunk with their heading path', () => {
    const chunks = chunkBlocks([
      { kind: 'heading', level: 1, text: 'Guide' },
      { kind: 'heading', level: 2, text: 'Setup' },
      { kind: 'text', text: 'Install it.' },
    ]);
    expect(chunks).toEqual([
      {
        position: 0,
        headingPath: ['Guide', 'Setup'],
        text: 'Guide\n\nSetup\n\nInstall it.',
        tokenCount: estimateTokens('Guide\n\nSetup\n\nInstall it.'),
      },
    ]);
  });

  it('cuts long sections into 400-800 token chunks with overlap, each with its heading path', () => {
    const blocks = [
      { kind: 'heading' as const, level: 1, text: 'Manual' },
      ...Array.from({ length: 12 }, (_, i) => ({ kind: 'text' as const, text: paragraph(`alpha${i}x`) })),
      { kind: 'heading' as const, level: 2, text: 'Appendix' },
      ...Array.from({ length: 6 }, (_, i) => ({ kind: 'text' as const, text: paragraph(`beta${i}x`) })),
    ];
    const chunks = chunkBlocks(blocks);
    expect(chunks.length).toBeGreaterThan(3);
    expect(chunks.map((c) => c.position)).toEqual(chunks.map((_, i) => i));
    for (const chunk of chunks.slice(0, -1)) {
      expect(chunk.tokenCount).toBeLessThanOrEqual(800);
      expect(chunk.tokenCount).toBeGreaterThanOrEqual(300);
    }
    expect(chunks[0].headingPath).toEqual(['Manual']);
    expect(chunks.at(-1)!.headingPath).toEqual(['Manual', 'Appendix']);
    // Consecutive chunks of one section share text (the overlap).
    const opening = chunks[1].text.split('\n\n')[0];
    expect(opening.length).toBeGreaterThan(40);
    expect(chunks[0].text.endsWith(opening)).toBe(true);
  });

  it('starts a new chunk at a heading once the current one is big enough', () => {
    const chunks = chunkBlocks([
      { kind: 'heading', level: 1, text: 'One' },
      { kind: 'text', text: paragraph('first', 350) },
      { kind: 'heading', level: 1, text: 'Two' },
      { kind: 'text', text: 'Short second section.' },
    ]);
    expect(chunks.map((c) => c.headingPath)).toEqual([['One'], ['Two']]);
    expect(chunks[1].text).toBe('Two\n\nShort second section.');
  });

  it('cuts a block larger than a chunk at sentences, then words', () => {
    const long = Array.from({ length: 300 }, (_, i) => `Sentence number ${i} is here.`).join(' ');
    const pieces = splitToFit(long, 500);
    expect(pieces.length).toBeGreaterThan(1);
    for (const piece of pieces) expect(estimateTokens(piece)).toBeLessThanOrEqual(500);
    expect(pieces.join(' ')).toBe(long);
    const unbroken = 'x'.repeat(10_000);
    expect(splitToFit(unbroken, 500).join('')).toBe(unbroken);
  });
});

describe('query building', () => {
  it('joins the words of a question with OR for websearch_to_tsquery', () => {
    expect(orQuery('How do "tidal" lagoons -work, or not?')).toBe(
      'how or do or tidal or lagoons or work or not',
    );
    expect(orQuery('   ?! ')).toBe('');
  });
});
