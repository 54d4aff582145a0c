/**
 * Hostile documents (issue 15, items 1 and 2): bombs generated here, uploaded through the API by
 * a member, fail on the first try with the bound they passed, while the server keeps answering.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { DOCUMENT_LIMIT_DEFAULTS, loadConfig } from '../src/config.js';
import { documents } from '../src/db/schema/index.js';
import { ExtractionError } from '../src/knowledge/blocks.js';
import { DocumentExtractor } from '../src/knowledge/extractor.js';
import { MEDIA_TYPES } from '../src/knowledge/media-type.js';
import { processDocument } from '../src/knowledge/process.js';
import { makeDocx, makeDocxBomb } from './fixtures/documents.js';
import { uploadFile, waitForProcessing } from './fixtures/knowledge-helpers.js';
import {
  createMember,
  createOrg,
  expectStatus,
  startTestServer,
  type TestApp,
  type TestOrg,
  testEnv,
} from './helpers/app.js';

const MB = 1024 * 1024;
/** The bar for /health while hostile documents are processed. */
const HEALTH_BUDGET_MS = 200;
/**
 * No single probe may take this long. The suite shares two cores with other test files, so one
 * probe now and then misses the 200 ms bar for reasons of its own (a GC pause, the scheduler);
 * extraction on the event loop, the defect guarded against, blocked it for tens of seconds.
 */
const HEALTH_WORST_MS = 1000;

/** The 95th percentile of `values`. */
const p95 = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length * 0.95)];

/** About 450,000 XML elements: under the element bound, but several seconds of mammoth. */
const slowDocx = () => makeDocxBomb(5 * MB);

/** Pids of this process's extractor children (Linux /proc). */
function extractorPids(): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid !== process.pid) continue;
      if (readFileSync(`/proc/${entry}/cmdline`, 'utf8').includes('extract-child')) pids.push(Number(entry));
    } catch {
      // The process ended while being read.
    }
  }
  return pids;
}

/** CPU ticks a process has used (Linux /proc). */
function cpuTicks(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return Number(fields[11]) + Number(fields[12]);
  } catch {
    return -1;
  }
}

/** An extractor child of this process that is working (its CPU time grows), not one idling warm. */
async function busyExtractor(except: number[] = [], timeoutMs = 30_000): Promise<number> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const pids = extractorPids().filter((pid) => !except.includes(pid));
    const before = pids.map(cpuTicks);
    await new Promise((resolve) => setTimeout(resolve, 150));
    const busy = pids.find((pid, i) => before[i] >= 0 && cpuTicks(pid) - before[i] >= 3);
    if (busy !== undefined) return busy;
  }
  throw new Error('no busy extractor');
}

async function waitFor<T>(probe: () => T | undefined, timeoutMs = 20_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error('timed out waiting');
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** Polls GET /health over real HTTP until stopped; returns every latency seen. */
function watchHealth(t: TestApp) {
  const latencies: number[] = [];
  let stopped = false;
  const loop = (async () => {
    while (!stopped) {
      const started = performance.now();
      const res = await fetch(`${t.baseUrl}/health`);
      await res.arrayBuffer();
      latencies.push(performance.now() - started);
      expect(res.status).toBe(200);
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
  })();
  return {
    async stop() {
      stopped = true;
      await loop;
      return latencies;
    },
  };
}

async function attemptsOf(t: TestApp, id: number) {
  const [row] = await t.deps.database.db
    .select({ attempts: documents.processingAttempts })
    .from(documents)
    .where(eq(documents.id, id));
  return row.attempts;
}

describe('hostile documents', () => {
  let t: TestApp;
  let org: TestOrg;
  let member: { key: string };
  const bombs: Array<{ name: string; filename: string; bytes: Buffer; error: RegExp }> = [];

  beforeAll(async () => {
    t = await startTestServer();
    org = await createOrg(t);
    member = await createMember(t, org);
    // The probe's files: 300 KB -> 100 MB of tiny paragraphs, 20,000 blank pages, 200 MB of content.
    // Built by another process: their garbage here would be GC pauses in the latency measured.
    const dir = mkdtempSync(path.join(inject('testScratchDir'), 'bombs-'));
    const tsx = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href;
    execFileSync(process.execPath, [
      '--import',
      tsx,
      fileURLToPath(new URL('./fixtures/write-bombs.ts', import.meta.url)),
      dir,
    ]);
    const file = (name: string) => readFileSync(path.join(dir, name));
    bombs.push(
      {
        name: 'a DOCX of tiny paragraphs inflating to 100 MB',
        filename: 'bomb.docx',
        bytes: file('bomb.docx'),
        error: /^The document has too many elements: more than 500,000$/,
      },
      {
        name: 'a DOCX whose one paragraph inflates to 80 MB',
        filename: 'long.docx',
        bytes: file('long.docx'),
        error: /^The document is too large when decompressed: more than 64 MB$/,
      },
      {
        name: 'a PDF of 20,000 blank pages',
        filename: 'blank.pdf',
        bytes: file('blank.pdf'),
        error: /^The PDF has too many pages: 20,000, more than 2,000$/,
      },
      {
        name: 'a PDF whose content inflates to 200 MB',
        filename: 'inflating.pdf',
        bytes: file('inflating.pdf'),
        error: /^The document is too large when decompressed: more than 64 MB$/,
      },
    );
  }, 300_000);
  afterAll(() => t.close());

  it('the bombs are small files, as the probe found them', () => {
    for (const bomb of bombs) expect(bomb.bytes.length, bomb.name).toBeLessThan(700 * 1024);
  });

  it('each bomb fails on the first try with its bound while /health and a chat turn answer', async () => {
    const uploaded = [];
    for (const bomb of bombs) {
      uploaded.push({ bomb, document: await uploadFile(t, member.key, bomb.filename, bomb.bytes) });
    }
    // A chat turn while the documents are processed.
    const turnStarted = performance.now();
    const chat = await fetch(`${t.baseUrl}/api/v2/chats`, {
      method: 'POST',
      headers: { authorization: `Bearer ${org.orgKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ project_id: org.projectId, content: 'Hello while documents are processed' }),
    });
    const turnMs = performance.now() - turnStarted;
    expectStatus({ status: chat.status, body: await chat.json() }, 201);
    expect(turnMs).toBeLessThan(3000);

    // /health is watched over real HTTP from here until the last bomb has failed.
    const health = watchHealth(t);
    const [last] = await t.deps.database.db
      .select({ status: documents.processingStatus })
      .from(documents)
      .where(eq(documents.id, uploaded.at(-1)!.document.id));
    expect(['queued', 'processing']).toContain(last.status);
    for (const { bomb, document } of uploaded) {
      const done = await waitForProcessing(t, member.key, document.id, 90_000);
      expect({ name: bomb.name, status: done.processing_status }).toEqual({
        name: bomb.name,
        status: 'failed',
      });
      expect(done.processing_error, bomb.name).toMatch(bomb.error);
      expect(done.chunk_count).toBe(0);
      expect(await attemptsOf(t, document.id), bomb.name).toBe(1);
    }
    const latencies = await health.stop();
    expect(latencies.length).toBeGreaterThan(10);
    expect(p95(latencies)).toBeLessThan(HEALTH_BUDGET_MS);
    expect(Math.max(...latencies)).toBeLessThan(HEALTH_WORST_MS);
  }, 180_000);

  it('an extractor killed twice fails the document after 2 attempts; the server is untouched', async () => {
    const health = watchHealth(t);
    const document = await uploadFile(t, member.key, 'slow.docx', await slowDocx());
    const first = await busyExtractor();
    process.kill(first, 'SIGKILL');
    const second = await busyExtractor([first]);
    process.kill(second, 'SIGKILL');
    const done = await waitForProcessing(t, member.key, document.id, 60_000);
    expect(done.processing_status).toBe('failed');
    expect(done.processing_error).toBe(
      'Text extraction stopped without finishing 2 times (the extractor crashed or was stopped); the document is not tried again',
    );
    expect(await attemptsOf(t, document.id)).toBe(2);
    // Every /health answered 200 throughout (the watch asserts it); no latency bar here, as
    // replacing a killed extractor forks a process.
    expect((await health.stop()).length).toBeGreaterThan(0);
  }, 90_000);

  it('an extractor killed once is replaced, and the document completes on its second attempt', async () => {
    const document = await uploadFile(t, member.key, 'retry.docx', await makeDocxBomb(MB));
    process.kill(await busyExtractor(), 'SIGKILL');
    const done = await waitForProcessing(t, member.key, document.id, 60_000);
    expect(done).toMatchObject({ processing_status: 'completed', processing_error: null });
    expect(done.chunk_count).toBeGreaterThan(0);
    expect(await attemptsOf(t, document.id)).toBe(2);
  }, 90_000);

  it('a job run after two runs that died mid-extraction fails the document without a third', async () => {
    const document = await uploadFile(
      t,
      member.key,
      'fine.docx',
      await makeDocx([{ paragraphs: ['Fine.'] }]),
    );
    await waitForProcessing(t, member.key, document.id);
    // An extractor that would complete the document if it were asked.
    const extractor = new DocumentExtractor();
    // As the rows look after two server processes died while extracting this document.
    await t.deps.database.db
      .update(documents)
      .set({ processingStatus: 'processing', processingAttempts: 2 })
      .where(eq(documents.id, document.id));
    await processDocument(
      {
        database: t.deps.database,
        vectors: t.deps.vectors,
        secrets: t.deps.secrets,
        limits: DOCUMENT_LIMIT_DEFAULTS,
        extractor,
        outbound: t.deps.config,
        log: quietLog,
      },
      document.id,
    );
    extractor.close();
    const done = await waitForProcessing(t, member.key, document.id);
    expect(done.processing_status).toBe('failed');
    expect(done.processing_error).toMatch(/stopped without finishing 2 times/);
    expect(done.chunk_count).toBe(0);
    expect(extractor.pid).toBeNull();
  });
});

const quietLog = { info() {}, warn() {} };

describe('extraction bounds', () => {
  let extractor: DocumentExtractor;
  beforeAll(() => {
    extractor = new DocumentExtractor();
  });
  afterAll(() => extractor.close());
  const extractIsolated = (bytes: Uint8Array, mediaType: string, limits = DOCUMENT_LIMIT_DEFAULTS) =>
    extractor.extract(bytes, mediaType, limits).catch((err: Error) => err);

  it('stops an extraction past its wall time', async () => {
    const limits = { ...DOCUMENT_LIMIT_DEFAULTS, timeoutMs: 1000 };
    const started = Date.now();
    const error = await extractIsolated(await slowDocx(), MEDIA_TYPES.docx, limits);
    expect(error).toBeInstanceOf(ExtractionError);
    expect((error as Error).message).toBe("Extracting the document's text took too long: more than 1 s");
    expect(Date.now() - started).toBeLessThan(3000);
    expect(extractor.pid).toBeNull();
  });

  it('stops an extraction past its memory', async () => {
    const limits = { ...DOCUMENT_LIMIT_DEFAULTS, memoryMb: 64 };
    const error = await extractIsolated(await slowDocx(), MEDIA_TYPES.docx, limits);
    expect(error).toBeInstanceOf(ExtractionError);
    expect((error as Error).message).toBe(
      "Extracting the document's text needs too much memory: more than 64 MB",
    );
    expect(extractor.pid).toBeNull();
  });

  it('stops at the extracted-text bound', async () => {
    const limits = { ...DOCUMENT_LIMIT_DEFAULTS, maxChars: 1000 };
    const text = Buffer.from('A sentence of ordinary text. '.repeat(100));
    const error = await extractIsolated(text, MEDIA_TYPES.text, limits);
    expect((error as Error).message).toBe('The document has too much text: more than 1,000 characters');
  });

  it('counts HTML elements', async () => {
    const limits = { ...DOCUMENT_LIMIT_DEFAULTS, maxElements: 100 };
    const html = Buffer.from(`<html><body>${'<p>x</p>'.repeat(200)}</body></html>`);
    const error = await extractIsolated(html, MEDIA_TYPES.html, limits);
    expect((error as Error).message).toBe('The document has too many elements: more than 100');
  });

  it('answers with chunks for an ordinary document', async () => {
    const docx = await makeDocx([
      { heading: 'Herons', paragraphs: ['The heron colony nests near the weir.'] },
    ]);
    const result = await extractor.extract(docx, MEDIA_TYPES.docx, DOCUMENT_LIMIT_DEFAULTS);
    expect(result.chunks).toEqual([
      expect.objectContaining({ headingPath: ['Herons'], text: expect.stringContaining('heron colony') }),
    ]);
  });

  it('keeps one extractor process warm for the next document, and replaces it when idle or used up', async () => {
    const own = new DocumentExtractor({ idleMs: 300, maxDocuments: 2 });
    const text = Buffer.from('Plain text to extract.');
    await own.extract(text, MEDIA_TYPES.text, DOCUMENT_LIMIT_DEFAULTS);
    const first = own.pid;
    expect(first).not.toBeNull();
    await own.extract(text, MEDIA_TYPES.text, DOCUMENT_LIMIT_DEFAULTS);
    // Its second document used it up.
    expect(own.pid).toBeNull();
    await own.extract(text, MEDIA_TYPES.text, DOCUMENT_LIMIT_DEFAULTS);
    expect(own.pid).not.toBeNull();
    expect(own.pid).not.toBe(first);
    await waitFor(() => (own.pid === null ? true : undefined), 5000);
    // A bound passed inside the child leaves it healthy and warm.
    const error = await own
      .extract(text, MEDIA_TYPES.text, { ...DOCUMENT_LIMIT_DEFAULTS, maxChars: 5 })
      .catch((err: Error) => err);
    expect((error as Error).message).toMatch(/too much text/);
    expect(own.pid).not.toBeNull();
    own.close();
    expect(own.pid).toBeNull();
    // Three child processes start here, each loading the extractor through tsx: about 3 s each on
    // an idle machine, 10 s under a full CI run on 2 cores (it timed out at the default 30 s).
  }, 90_000);

  it('reads its bounds from the environment', () => {
    const config = loadConfig(
      testEnv({
        DOCUMENT_MAX_DECOMPRESSED_MB: '8',
        DOCUMENT_MAX_ELEMENTS: '1000',
        DOCUMENT_MAX_PAGES: '10',
        DOCUMENT_MAX_CHARS: '5000',
        DOCUMENT_EXTRACT_TIMEOUT_MS: '2500',
        DOCUMENT_EXTRACT_MEMORY_MB: '256',
      }),
    );
    expect(config.documentLimits).toEqual({
      maxDecompressedBytes: 8 * MB,
      maxElements: 1000,
      maxPages: 10,
      maxChars: 5000,
      timeoutMs: 2500,
      memoryMb: 256,
    });
    expect(loadConfig(testEnv()).documentLimits).toEqual(DOCUMENT_LIMIT_DEFAULTS);
    expect(() => loadConfig(testEnv({ DOCUMENT_MAX_PAGES: '0' }))).toThrow(/DOCUMENT_MAX_PAGES/);
  });
});
