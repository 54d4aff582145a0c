import { eq, sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { documentChunks } from '../src/db/schema/index.js';
import { searchKnowledge } from '../src/knowledge/project-search.js';
import { EMBEDDINGS_TABLE } from '../src/knowledge/vector-store.js';
import { KNOWLEDGE_SEARCH_TOOL } from '../src/llm/builtin-model.js';
import { toolFamilies } from '../src/llm/tools/index.js';
import {
  makeCorruptPdf,
  makeDocx,
  makeEncryptedPdf,
  makeHtml,
  makeMarkdown,
  makePdf,
  makePng,
} from './fixtures/documents.js';
import {
  createGroup,
  createProject,
  serviceContext,
  uploadAndProcess,
  uploadFile,
  waitForProcessing,
} from './fixtures/knowledge-helpers.js';
import {
  buildTestApp,
  call,
  createMember,
  createOrg,
  expectStatus,
  type TestApp,
  type TestOrg,
} from './helpers/app.js';
import { type FakeModelServer, startFakeModelServer } from './helpers/fake-model-server.js';

const filler = (topic: string) =>
  `This section discusses ${topic} in general terms, with background that a reader may skim.`;

/** Runs the registered knowledge tool the way a chat turn does. */
async function runKnowledgeTool(
  t: TestApp,
  org: TestOrg,
  projectId: number,
  query: string,
  as = null as any,
) {
  const family = toolFamilies.knowledge!;
  const set = await family(
    { ctx: serviceContext(t, org, as), projectId, chatId: null, agentId: null },
    toolFamilies,
  );
  const tool = set.tools[KNOWLEDGE_SEARCH_TOOL] as any;
  return (await tool.execute({ query }, { toolCallId: 'test-call', messages: [] })) as {
    passages: {
      document_id: number;
      document_name: string;
      position: number;
      score: number;
      text: string;
      heading_path: string[];
    }[];
  };
}

describe('processing each format', () => {
  let t: TestApp;
  let org: TestOrg;
  let project: number;
  beforeAll(async () => {
    t = await buildTestApp();
    org = await createOrg(t);
    project = await createProject(t, org, [org.defaultGroupId]);
  });
  afterAll(() => t.close());

  const cases: { name: string; phrase: string; file: () => Promise<Buffer | string>; heading?: string[] }[] =
    [
      {
        name: 'report.pdf',
        phrase: 'quartzite escarpment mapping',
        file: () =>
          makePdf([
            {
              paragraphs: [filler('geology'), 'Our team finished the quartzite escarpment mapping in March.'],
            },
          ]),
        heading: ['Page 1'],
      },
      {
        name: 'handbook.docx',
        phrase: 'bergamot marmalade recipe',
        file: () =>
          makeDocx([
            { heading: 'Kitchen', level: 1, paragraphs: [filler('cooking')] },
            {
              heading: 'Preserves',
              level: 2,
              paragraphs: ['The bergamot marmalade recipe needs twelve jars.'],
            },
          ]),
        // Small sections share one chunk, which keeps the path of its first text.
        heading: ['Kitchen'],
      },
      {
        name: 'page.html',
        phrase: 'narwhal tusk sensitivity',
        file: async () =>
          makeHtml('Arctic notes', [
            { heading: 'Whales', paragraphs: ['Researchers measured narwhal tusk sensitivity.'] },
          ]),
      },
      {
        name: 'guide.md',
        phrase: 'harpsichord plectrum voicing',
        file: async () =>
          makeMarkdown('Instrument care', [
            { heading: 'Voicing', paragraphs: ['Harpsichord plectrum voicing takes patience.'] },
          ]),
        heading: ['Instrument care', 'Voicing'],
      },
      {
        name: 'notes.txt',
        phrase: 'tungsten filament annealing',
        file: async () => `${filler('lamps')}\n\nThe tungsten filament annealing step runs overnight.`,
      },
      {
        name: 'inventory.csv',
        phrase: 'cobalt glaze pigment',
        file: async () => 'item,quantity,shelf\nclay,40,A1\ncobalt glaze pigment,3,B7\nkiln shelf,6,C2\n',
      },
      {
        name: 'config.json',
        phrase: 'heliostat tracking interval',
        file: async () =>
          JSON.stringify({
            plant: { name: 'Solar field', notes: 'The heliostat tracking interval is 30 seconds' },
          }),
      },
    ];

  it('every format reaches completed and its text is findable with the knowledge tool', async () => {
    const uploaded = [];
    for (const c of cases) uploaded.push(await uploadFile(t, org.orgKey, c.name, await c.file()));
    for (const [i, c] of cases.entries()) {
      const done = await waitForProcessing(t, org.orgKey, uploaded[i].id);
      expect(done, c.name).toMatchObject({
        processing_status: 'completed',
        processing_error: null,
        ocr_error: null,
      });
      expect(done.chunk_count, c.name).toBeGreaterThan(0);
    }
    for (const [i, c] of cases.entries()) {
      const { passages } = await runKnowledgeTool(t, org, project, c.phrase);
      expect(passages.length, c.name).toBeGreaterThan(0);
      const top = passages[0];
      expect(top, c.name).toMatchObject({
        document_id: uploaded[i].id,
        document_name: c.name,
        position: expect.any(Number),
        score: expect.any(Number),
        heading_path: c.heading ?? expect.any(Array),
      });
      expect(top.text.toLowerCase(), c.name).toContain(c.phrase);
      expect(top.score).toBeGreaterThan(0);
    }
    // HTML scripts and navigation are not indexed.
    expect((await runKnowledgeTool(t, org, project, 'zzscriptonly zznavonly zzfooteronly')).passages).toEqual(
      [],
    );
  });

  it('a corrupt PDF fails with a reason, never a 500', async () => {
    const done = await uploadAndProcess(t, org.orgKey, 'broken.pdf', makeCorruptPdf());
    expect(done).toMatchObject({
      processing_status: 'failed',
      media_type: 'application/pdf',
      ocr_error: null,
      embedding_error: null,
      chunk_count: 0,
    });
    expect(done.processing_error).toMatch(/^The PDF could not be read/);
  });

  it('an image-only PDF fails for lack of text and sets ocr_error', async () => {
    const done = await uploadAndProcess(
      t,
      org.orgKey,
      'scan.pdf',
      await makePdf([{ image: true }, { image: true }]),
    );
    expect(done).toMatchObject({ processing_status: 'failed', page_count: null, chunk_count: 0 });
    expect(done.processing_error).toMatch(/no extractable text/);
    expect(done.ocr_error).toMatch(/^Pages 1-2 of 2 have no text layer .*no OCR engine/);
  });

  it('a PDF with one scanned page completes with its text and an ocr_error', async () => {
    const pdf = await makePdf([{ paragraphs: ['The sextant calibration notes are here.'] }, { image: true }]);
    const done = await uploadAndProcess(t, org.orgKey, 'mixed.pdf', pdf);
    expect(done).toMatchObject({ processing_status: 'completed', page_count: 2, processing_error: null });
    expect(done.ocr_error).toMatch(/^Page 2 of 2 has no text layer/);
    const { passages } = await runKnowledgeTool(t, org, project, 'sextant calibration');
    expect(passages[0]).toMatchObject({ document_id: done.id });
  });

  it('encrypted PDFs, unsupported types and empty text fail with readable reasons', async () => {
    const encrypted = await uploadAndProcess(t, org.orgKey, 'locked.pdf', await makeEncryptedPdf());
    expect(encrypted).toMatchObject({ processing_status: 'failed' });
    expect(encrypted.processing_error).toMatch(/encrypted with a password/);
    const image = await uploadAndProcess(t, org.orgKey, 'photo.pdf', makePng(8, 8));
    expect(image).toMatchObject({ processing_status: 'failed', media_type: 'image/png' });
    expect(image.processing_error).toMatch(/^Unsupported file type image\/png/);
    const binary = await uploadAndProcess(
      t,
      org.orgKey,
      'data.bin',
      Buffer.from([0, 159, 146, 150, 0, 1, 2]),
    );
    expect(binary.processing_error).toMatch(/^Unsupported file type application\/octet-stream/);
  });
});

describe('knowledge scoping', () => {
  let t: TestApp;
  let org: TestOrg;
  let other: TestOrg;
  beforeAll(async () => {
    t = await buildTestApp();
    org = await createOrg(t);
    other = await createOrg(t);
  });
  afterAll(() => t.close());

  it('returns only documents sharing a group with the project, and for personal keys only their groups', async () => {
    const member = await createMember(t, org);
    const shared = await createGroup(t, org, 'Shared', [member.userId]);
    const projectOnly = await createGroup(t, org, 'Project only');
    const elsewhere = await createGroup(t, org, 'Elsewhere', [member.userId]);
    const project = await createProject(t, org, [shared, projectOnly]);

    const inShared = await uploadAndProcess(
      t,
      org.orgKey,
      'shared.txt',
      'The obsidian lantern sits in the hall.',
      [shared],
    );
    const inProjectOnly = await uploadAndProcess(
      t,
      org.orgKey,
      'board.txt',
      'The obsidian lantern budget is secret.',
      [projectOnly],
    );
    const outside = await uploadAndProcess(
      t,
      org.orgKey,
      'elsewhere.txt',
      'An obsidian lantern in another team.',
      [elsewhere],
    );
    const foreign = await uploadAndProcess(
      t,
      other.orgKey,
      'foreign.txt',
      'Obsidian lantern of another company.',
    );
    const foreignProject = await createProject(t, other, [other.defaultGroupId]);

    const ids = (result: { passages: { document_id: number }[] }) =>
      result.passages.map((p) => p.document_id).sort();
    // The organization key: everything the project shares a group with.
    expect(ids(await runKnowledgeTool(t, org, project, 'obsidian lantern'))).toEqual(
      [inShared.id, inProjectOnly.id].sort(),
    );
    // A member's personal key: also limited to the member's groups.
    const asMember = { userId: member.userId, role: 'member' as const };
    expect(ids(await runKnowledgeTool(t, org, project, 'obsidian lantern', asMember))).toEqual([inShared.id]);
    // An admin user's personal key too (issue 6): the admin is in the default group only, so none
    // of these; once they join a group, its documents.
    const asAdmin = { userId: org.adminUserId, role: 'admin' as const };
    expect(ids(await runKnowledgeTool(t, org, project, 'obsidian lantern', asAdmin))).toEqual([]);
    const joined = await call(t, 'POST', `/api/v1/groups/${projectOnly}/members`, {
      key: org.orgKey,
      body: { user_id: org.adminUserId },
    });
    expect([200, 201]).toContain(joined.status);
    expect(ids(await runKnowledgeTool(t, org, project, 'obsidian lantern', asAdmin))).toEqual([
      inProjectOnly.id,
    ]);
    // Never another organization's documents, even with its project id.
    const leaked = await searchKnowledge(serviceContext(t, org), {
      projectId: foreignProject,
      query: 'obsidian lantern',
    });
    expect(leaked).toEqual([]);
    expect(ids(await runKnowledgeTool(t, other, foreignProject, 'obsidian lantern'))).toEqual([foreign.id]);
    expect(outside.processing_status).toBe('completed');
  });

  it('ranks passages that match more of the question first and respects the limit', async () => {
    const project = await createProject(t, org, [org.defaultGroupId]);
    const best = await uploadAndProcess(
      t,
      org.orgKey,
      'ferry.md',
      '# Ferry timetable\n\nThe winter ferry to the island leaves the harbour at seven.',
    );
    await uploadAndProcess(
      t,
      org.orgKey,
      'harbour.md',
      '# Harbour\n\nThe harbour has a café and a small museum.',
    );
    await uploadAndProcess(t, org.orgKey, 'winter.md', '# Winter\n\nWinter storms close the coastal road.');
    const passages = await searchKnowledge(serviceContext(t, org), {
      projectId: project,
      query: 'When does the ferry leave the harbour in winter?',
      limit: 2,
    });
    expect(passages).toHaveLength(2);
    expect(passages[0]).toMatchObject({ document_id: best.id, document_name: 'ferry.md', position: 0 });
    expect(passages[0].score).toBeGreaterThan(passages[1].score);
    expect(
      await searchKnowledge(serviceContext(t, org), { projectId: project, query: 'the of and' }),
    ).toEqual([]);
  });
});

describe('embeddings', () => {
  let t: TestApp;
  let fake: FakeModelServer;
  let vectors: boolean;
  beforeAll(async () => {
    fake = await startFakeModelServer({ embeddingDimensions: 16 });
    t = await buildTestApp();
    vectors = await t.deps.vectors.available();
    if (!vectors && process.env.TEST_REQUIRE_PGVECTOR === '1') {
      throw new Error(
        'TEST_REQUIRE_PGVECTOR=1 but this PostgreSQL has no pgvector (../shared/tools/install-pgvector.sh)',
      );
    }
    if (!vectors)
      console.log('[notice] no pgvector on this PostgreSQL: vector and hybrid search checks are skipped.');
  });
  afterAll(async () => {
    await t.close();
    await fake.close();
  });

  const configureEmbeddings = async (org: TestOrg) => {
    const res = await call(t, 'POST', '/api/v1/model_configurations', {
      key: org.orgKey,
      body: {
        name: 'Embeddings',
        provider: 'openai-compatible',
        model: 'fake-embedding',
        base_url: fake.baseUrl,
        api_key: 'sk-embeddings',
        purpose: 'embedding',
      },
    });
    expectStatus(res, 201);
    return res.body.model_configuration.id as number;
  };

  const embeddingRows = async (documentId: number) =>
    (
      await t.deps.database.query<{ n: number; dims: number | null }>(
        `select count(*)::int as n, max(vector_dims(embedding))::int as dims from ${EMBEDDINGS_TABLE} where document_id = $1`,
        [documentId],
      )
    ).rows[0];

  it('stores a vector per chunk with the configured model and uses it in hybrid search', async () => {
    const org = await createOrg(t);
    const configurationId = await configureEmbeddings(org);
    const project = await createProject(t, org, [org.defaultGroupId]);
    fake.reset();
    const doc = await uploadAndProcess(
      t,
      org.orgKey,
      'observatory.md',
      '# Observatory\n\nThe refractor telescope dome opens at dusk.\n\n## Rules\n\nVisitors whisper near the telescope.',
    );
    expect(doc.processing_status).toBe('completed');
    if (!vectors) {
      // A PostgreSQL server without pgvector: the document is still searchable by full text.
      expect(doc.embedding_error).toMatch(/no pgvector extension/);
      expect((await runKnowledgeTool(t, org, project, 'refractor telescope')).passages[0].document_id).toBe(
        doc.id,
      );
      return;
    }
    expect(doc.embedding_error).toBeNull();
    const embedCalls = fake.requests.filter((r) => r.path === '/v1/embeddings');
    expect(embedCalls).toHaveLength(1);
    expect(embedCalls[0].body).toMatchObject({
      model: 'fake-embedding',
      input: [expect.stringContaining('refractor')],
    });
    expect(embedCalls[0].headers.authorization).toBe('Bearer sk-embeddings');
    expect(await embeddingRows(doc.id)).toEqual({ n: doc.chunk_count, dims: 16 });
    const [stored] = (
      await t.deps.database.query<{ model_configuration_id: number }>(
        `select model_configuration_id from ${EMBEDDINGS_TABLE} where document_id = $1 limit 1`,
        [doc.id],
      )
    ).rows;
    expect(stored.model_configuration_id).toBe(configurationId);

    fake.reset();
    const hybrid = await runKnowledgeTool(t, org, project, 'refractor telescope dome');
    expect(fake.requests.filter((r) => r.path === '/v1/embeddings').map((r) => r.body.input)).toEqual([
      ['refractor telescope dome'],
    ]);
    expect(hybrid.passages[0]).toMatchObject({ document_id: doc.id, document_name: 'observatory.md' });
    // Ranked by reciprocal rank fusion of both lists: first in both gives 2 / 61.
    expect(hybrid.passages[0].score).toBeCloseTo(2 / 61, 5);
    // Words no document contains: full text finds nothing, the vectors still return neighbours.
    const vectorOnly = await runKnowledgeTool(t, org, project, 'qwertyuiop zxcvbnm');
    expect(vectorOnly.passages.length).toBeGreaterThan(0);
    expect(vectorOnly.passages[0].score).toBeCloseTo(1 / 61, 5);
  });

  it('completes the document with embedding_error when the embedding model fails', async () => {
    const org = await createOrg(t);
    await configureEmbeddings(org);
    const project = await createProject(t, org, [org.defaultGroupId]);
    fake.reset();
    const failure = { status: 500, errorBody: { error: { message: 'embedding backend exploded' } } };
    fake.enqueueEmbeddings(failure, failure, failure, failure);
    const doc = await uploadAndProcess(t, org.orgKey, 'glossary.txt', 'A portmanteau blends two words.');
    expect(doc.processing_status).toBe('completed');
    if (vectors) {
      // The provider's status, never its words.
      expect(doc.embedding_error).toMatch(/^Embedding failed: the provider answered HTTP 500/);
      expect(doc.embedding_error).not.toContain('exploded');
      expect(await embeddingRows(doc.id)).toEqual({ n: 0, dims: null });
    } else {
      expect(doc.embedding_error).toMatch(/no pgvector extension/);
    }
    fake.enqueueEmbeddings(failure, failure, failure);
    // Search falls back to full text when the query cannot be embedded either.
    const { passages } = await runKnowledgeTool(t, org, project, 'portmanteau');
    expect(passages[0]).toMatchObject({ document_id: doc.id });
  });

  it('leaves documents without vectors when the organization has no embedding model', async () => {
    const org = await createOrg(t);
    fake.reset();
    const doc = await uploadAndProcess(t, org.orgKey, 'plain.txt', 'Nothing to embed here.');
    expect(doc).toMatchObject({ processing_status: 'completed', embedding_error: null });
    expect(fake.requests).toEqual([]);
    const chunks = await t.deps.database.db
      .select({ n: sql<number>`count(*)::int` })
      .from(documentChunks)
      .where(eq(documentChunks.documentId, doc.id));
    expect(chunks[0].n).toBe(1);
  });
});
