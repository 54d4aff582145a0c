import { createHash } from 'node:crypto';
import { eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { documentChunks, documentContents, documentGroups, documents } from '../src/db/schema/index.js';
import { MEDIA_TYPES } from '../src/knowledge/media-type.js';
import { searchKnowledge } from '../src/knowledge/project-search.js';
import { makePdf } from './fixtures/documents.js';
import {
  createGroup,
  createProject,
  multipartBody,
  serviceContext,
  upload,
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
  expectV1Error,
  type TestApp,
  type TestOrg,
  TIMESTAMP,
} from './helpers/app.js';
import { describeAuthMatrix } from './helpers/auth-matrix.js';

describeAuthMatrix('v1', [
  { method: 'POST', url: '/api/v1/data_center/documents' },
  { method: 'GET', url: '/api/v1/data_center/documents' },
  { method: 'GET', url: '/api/v1/data_center/documents/1' },
  { method: 'DELETE', url: '/api/v1/data_center/documents/1' },
]);

describe('document upload', () => {
  let t: TestApp;
  let org: TestOrg;
  let other: TestOrg;
  beforeAll(async () => {
    t = await buildTestApp();
    org = await createOrg(t);
    other = await createOrg(t);
  });
  afterAll(() => t.close());

  it('stores the file with group_ids[] and answers 201 queued at once', async () => {
    const groupA = await createGroup(t, org, 'Research');
    const groupB = await createGroup(t, org, 'Legal');
    const content = '# Field notes\n\nThe heron colony nests near the weir every spring.';
    const res = await upload(t, org.orgKey, [
      ['group_ids[]', String(groupB)],
      ['group_ids[]', String(groupA)],
      ['document', { filename: 'notes.md', content, contentType: 'application/pdf' }],
    ]);
    expectStatus(res, 201);
    expect(res.body).toEqual({
      document: {
        id: expect.any(Number),
        name: 'notes.md',
        processing_status: 'queued',
        embedding_error: null,
        ocr_error: null,
        group_ids: [groupA, groupB].sort((a, b) => a - b),
      },
    });
    const id = res.body.document.id;
    const [row] = await t.deps.database.db.select().from(documents).where(eq(documents.id, id));
    // The client said application/pdf; the content says Markdown.
    expect(row).toMatchObject({
      organizationId: org.organizationId,
      mediaType: MEDIA_TYPES.markdown,
      sizeBytes: Buffer.byteLength(content),
      sha256: createHash('sha256').update(content).digest('hex'),
    });
    const [stored] = await t.deps.database.db
      .select()
      .from(documentContents)
      .where(eq(documentContents.documentId, id));
    expect(stored.bytes.toString('utf8')).toBe(content);

    const done = await waitForProcessing(t, org.orgKey, id);
    expect(done).toEqual({
      id,
      name: 'notes.md',
      processing_status: 'completed',
      embedding_error: null,
      ocr_error: null,
      group_ids: [groupA, groupB].sort((a, b) => a - b),
      processing_error: null,
      media_type: MEDIA_TYPES.markdown,
      size_bytes: Buffer.byteLength(content),
      sha256: createHash('sha256').update(content).digest('hex'),
      page_count: null,
      chunk_count: 1,
      created_at: expect.stringMatching(TIMESTAMP),
      updated_at: expect.stringMatching(TIMESTAMP),
    });
  });

  it('puts the document in the default group with use_default_group=true', async () => {
    const res = await upload(t, org.adminKey, [
      ['use_default_group', 'true'],
      ['document', { filename: 'C:\\fakepath\\memo.txt', content: 'A short memo.' }],
    ]);
    expectStatus(res, 201);
    expect(res.body.document).toMatchObject({ name: 'memo.txt', group_ids: [org.defaultGroupId] });
  });

  it('takes an explicit name and accepts both group_ids[] and use_default_group together', async () => {
    const group = await createGroup(t, org, 'Ops');
    const res = await upload(t, org.orgKey, [
      ['document', { filename: 'x.txt', content: 'Runbook text.' }],
      ['name', 'Operations runbook'],
      ['group_ids[]', String(group)],
      ['use_default_group', 'true'],
    ]);
    expectStatus(res, 201);
    expect(res.body.document).toMatchObject({
      name: 'Operations runbook',
      group_ids: [org.defaultGroupId, group].sort((a, b) => a - b),
    });
  });

  it('400 without group_ids[] or use_default_group=true, and for malformed group fields', async () => {
    const file: [string, any] = ['document', { filename: 'a.txt', content: 'text' }];
    for (const fields of [[file], [file, ['use_default_group', 'false']], [file, ['group_ids[]', '']]] as [
      string,
      any,
    ][][]) {
      const res = await upload(t, org.orgKey, fields);
      expectV1Error(res, 400, 'invalid_request');
      expect(res.body.error.details).toHaveProperty('group_ids[]');
    }
    expectV1Error(await upload(t, org.orgKey, [file, ['group_ids[]', 'abc']]), 400);
    expectV1Error(await upload(t, org.orgKey, [file, ['group_ids[]', '-3']]), 400);
    expectV1Error(await upload(t, org.orgKey, [file, ['group_ids[]', '99999999999']]), 400);
    expectV1Error(await upload(t, org.orgKey, [file, ['use_default_group', 'yes']]), 400);
  });

  it('400 for bodies that are not a readable multipart form, never a 500', async () => {
    const json = await call(t, 'POST', '/api/v1/data_center/documents', {
      key: org.orgKey,
      body: { use_default_group: true, document: 'text' },
    });
    expectV1Error(json, 400);
    const octets = await call(t, 'POST', '/api/v1/data_center/documents', {
      key: org.orgKey,
      payload: Buffer.from('raw bytes'),
      headers: { 'content-type': 'application/octet-stream' },
    });
    expectV1Error(octets, 400);
    const noBoundary = await call(t, 'POST', '/api/v1/data_center/documents', {
      key: org.orgKey,
      payload: 'garbage',
      headers: { 'content-type': 'multipart/form-data' },
    });
    expectV1Error(noBoundary, 400);
    const { payload, contentType } = multipartBody([
      ['use_default_group', 'true'],
      ['document', { filename: 'a.txt', content: 'x'.repeat(5000) }],
    ]);
    const truncated = await call(t, 'POST', '/api/v1/data_center/documents', {
      key: org.orgKey,
      payload: payload.subarray(0, payload.length - 2500),
      headers: { 'content-type': contentType },
    });
    expect([400, 422]).toContain(truncated.status);
    expectV1Error(truncated, truncated.status);
    const textDocument = await upload(t, org.orgKey, [
      ['use_default_group', 'true'],
      ['document', 'not a file'],
    ]);
    expectV1Error(textDocument, 400);
    const twoFiles = await upload(t, org.orgKey, [
      ['use_default_group', 'true'],
      ['document', { filename: 'a.txt', content: 'a' }],
      ['document', { filename: 'b.txt', content: 'b' }],
    ]);
    expectV1Error(twoFiles, 400);
    const otherField = await upload(t, org.orgKey, [
      ['use_default_group', 'true'],
      ['attachment', { filename: 'a.txt', content: 'a' }],
    ]);
    expectV1Error(otherField, 400);
  });

  it('422 for groups the organization does not have, a missing file or an empty file', async () => {
    const unknown = await upload(t, org.orgKey, [
      ['group_ids[]', String(other.defaultGroupId)],
      ['document', { filename: 'a.txt', content: 'text' }],
    ]);
    expectV1Error(unknown, 422);
    expect(unknown.body.error.details['group_ids[]'][0]).toContain(String(other.defaultGroupId));
    const missing = await upload(t, org.orgKey, [['use_default_group', 'true']]);
    expectV1Error(missing, 422);
    expect(missing.body.error.details).toEqual({ document: ['is required'] });
    const empty = await upload(t, org.orgKey, [
      ['use_default_group', 'true'],
      ['document', { filename: 'empty.txt', content: '' }],
    ]);
    expectV1Error(empty, 422);
    expect(empty.body.error.details).toEqual({ document: ['must not be empty'] });
    const [{ n }] = (
      await t.deps.database.query<{ n: number }>(
        'select count(*)::int as n from documents where organization_id = $1 and size_bytes = 0',
        [org.organizationId],
      )
    ).rows;
    expect(n).toBe(0);
  });

  it('lets members upload only to their own groups', async () => {
    const member = await createMember(t, org);
    const mine = await createGroup(t, org, 'Mine', [member.userId]);
    const notMine = await createGroup(t, org, 'Not mine');
    const ok = await upload(t, member.key, [
      ['group_ids[]', String(mine)],
      ['document', { filename: 'a.txt', content: 'member text' }],
    ]);
    expectStatus(ok, 201);
    const refused = await upload(t, member.key, [
      ['group_ids[]', String(notMine)],
      ['document', { filename: 'a.txt', content: 'member text' }],
    ]);
    expectV1Error(refused, 403, 'forbidden');
  });
});

describe('upload size limit', () => {
  let t: TestApp;
  let org: TestOrg;
  beforeAll(async () => {
    t = await buildTestApp({ UPLOAD_MAX_BYTES: '2000' });
    org = await createOrg(t);
  });
  afterAll(() => t.close());

  it('413 above UPLOAD_MAX_BYTES; exactly the limit is accepted', async () => {
    const over = await upload(t, org.orgKey, [
      ['use_default_group', 'true'],
      ['document', { filename: 'big.txt', content: 'x'.repeat(2001) }],
    ]);
    expectV1Error(over, 413, 'payload_too_large');
    expect(over.body.error.message).toContain('2000 bytes');
    const exact = await upload(t, org.orgKey, [
      ['use_default_group', 'true'],
      ['document', { filename: 'ok.txt', content: 'y'.repeat(2000) }],
    ]);
    expectStatus(exact, 201);
  });

  it('accepts files larger than the JSON body limit when UPLOAD_MAX_BYTES allows them', async () => {
    const t2 = await buildTestApp({ UPLOAD_MAX_BYTES: String(3 * 1024 * 1024) });
    try {
      const org2 = await createOrg(t2);
      const big = `${'Lorem ipsum dolor sit amet. '.repeat(80_000)}`;
      const res = await upload(t2, org2.orgKey, [
        ['use_default_group', 'true'],
        ['document', { filename: 'big.txt', content: big }],
      ]);
      expectStatus(res, 201);
    } finally {
      await t2.close();
    }
  });
});

describe('document reads, access and deletion', () => {
  let t: TestApp;
  let org: TestOrg;
  let other: TestOrg;
  beforeAll(async () => {
    t = await buildTestApp();
    org = await createOrg(t);
    other = await createOrg(t);
  });
  afterAll(() => t.close());

  it('lists newest first, paginated and filtered by processing_status', async () => {
    const done = await uploadAndProcess(t, org.orgKey, 'one.txt', 'First document text.');
    const failed = await uploadAndProcess(t, org.orgKey, 'blank.txt', '   \n  \n');
    expect(failed).toMatchObject({
      processing_status: 'failed',
      processing_error: 'The document contains no text',
    });
    const third = await uploadAndProcess(t, org.orgKey, 'three.txt', 'Third document text.');

    const page1 = await call(t, 'GET', '/api/v1/data_center/documents?page_size=2', { key: org.orgKey });
    expectStatus(page1, 200);
    expect(page1.body.documents.map((d: any) => d.id)).toEqual([third.id, failed.id]);
    expect(page1.body.pagination).toEqual({ page: 1, page_size: 2, total_count: 3, total_pages: 2 });
    const page2 = await call(t, 'GET', '/api/v1/data_center/documents?page=2&page_size=2', {
      key: org.orgKey,
    });
    expect(page2.body.documents.map((d: any) => d.id)).toEqual([done.id]);

    const onlyFailed = await call(t, 'GET', '/api/v1/data_center/documents?processing_status=failed', {
      key: org.orgKey,
    });
    expect(onlyFailed.body.documents.map((d: any) => d.id)).toEqual([failed.id]);
    expectV1Error(
      await call(t, 'GET', '/api/v1/data_center/documents?processing_status=done', { key: org.orgKey }),
      400,
    );
    expectV1Error(await call(t, 'GET', '/api/v1/data_center/documents?page=0', { key: org.orgKey }), 400);
    expectV1Error(
      await call(t, 'GET', '/api/v1/data_center/documents?page_size=101', { key: org.orgKey }),
      400,
    );

    // Another organization sees none of them.
    const foreign = await call(t, 'GET', '/api/v1/data_center/documents', { key: other.orgKey });
    expect(foreign.body.documents).toEqual([]);
    expectV1Error(
      await call(t, 'GET', `/api/v1/data_center/documents/${done.id}`, { key: other.orgKey }),
      404,
      'document_not_found',
    );
    expectV1Error(
      await call(t, 'DELETE', `/api/v1/data_center/documents/${done.id}`, { key: other.orgKey }),
      404,
    );
  });

  it('shows members only documents in their groups', async () => {
    const member = await createMember(t, org);
    const mine = await createGroup(t, org, 'Member group', [member.userId]);
    const hidden = await createGroup(t, org, 'Board');
    const visible = await uploadFile(t, org.orgKey, 'visible.txt', 'Visible text', [mine]);
    const secret = await uploadFile(t, org.orgKey, 'secret.txt', 'Board minutes', [hidden]);

    const list = await call(t, 'GET', '/api/v1/data_center/documents?page_size=100', { key: member.key });
    const ids = list.body.documents.map((d: any) => d.id);
    expect(ids).toContain(visible.id);
    expect(ids).not.toContain(secret.id);
    expectStatus(
      await call(t, 'GET', `/api/v1/data_center/documents/${visible.id}`, { key: member.key }),
      200,
    );
    expectV1Error(
      await call(t, 'GET', `/api/v1/data_center/documents/${secret.id}`, { key: member.key }),
      404,
    );
    // The organization key sees both.
    const all = await call(t, 'GET', '/api/v1/data_center/documents?page_size=100', { key: org.orgKey });
    expect(all.body.documents.map((d: any) => d.id)).toEqual(expect.arrayContaining([visible.id, secret.id]));
  });

  it('deletes a document with its bytes and chunks; members only their own uploads', async () => {
    const project = await createProject(t, org, [org.defaultGroupId]);
    const doc = await uploadAndProcess(
      t,
      org.orgKey,
      'kiln.md',
      '# Kiln\n\nThe anagama kiln fires for five days.',
    );
    expect(doc.processing_status).toBe('completed');
    const ctx = serviceContext(t, org);
    expect((await searchKnowledge(ctx, { projectId: project, query: 'anagama kiln' }))[0]).toMatchObject({
      document_id: doc.id,
    });

    const member = await createMember(t, org);
    expectV1Error(
      await call(t, 'DELETE', `/api/v1/data_center/documents/${doc.id}`, { key: member.key }),
      403,
      'forbidden',
    );
    const own = await uploadFile(t, member.key, 'mine.txt', 'Member upload');
    expectStatus(
      await call(t, 'DELETE', `/api/v1/data_center/documents/${own.id}`, { key: member.key }),
      200,
    );

    const deleted = await call(t, 'DELETE', `/api/v1/data_center/documents/${doc.id}`, { key: org.adminKey });
    expectStatus(deleted, 200);
    expect(deleted.body).toEqual({ message: 'Document deleted' });
    const db = t.deps.database.db;
    expect(await db.select().from(documents).where(eq(documents.id, doc.id))).toEqual([]);
    expect(await db.select().from(documentContents).where(eq(documentContents.documentId, doc.id))).toEqual(
      [],
    );
    expect(await db.select().from(documentChunks).where(eq(documentChunks.documentId, doc.id))).toEqual([]);
    expect(await db.select().from(documentGroups).where(eq(documentGroups.documentId, doc.id))).toEqual([]);
    expect(await searchKnowledge(ctx, { projectId: project, query: 'anagama kiln' })).toEqual([]);
    expectV1Error(await call(t, 'GET', `/api/v1/data_center/documents/${doc.id}`, { key: org.orgKey }), 404);
    expectV1Error(
      await call(t, 'DELETE', `/api/v1/data_center/documents/${doc.id}`, { key: org.orgKey }),
      404,
    );
  });

  it('deleting a document while it waits for processing leaves nothing behind', async () => {
    const pdf = await makePdf([{ paragraphs: ['Short lived.'] }]);
    const doc = await uploadFile(t, org.orgKey, 'short.pdf', pdf);
    expectStatus(
      await call(t, 'DELETE', `/api/v1/data_center/documents/${doc.id}`, { key: org.orgKey }),
      200,
    );
    await new Promise((resolve) => setTimeout(resolve, 1500));
    const db = t.deps.database.db;
    expect(await db.select().from(documentChunks).where(eq(documentChunks.documentId, doc.id))).toEqual([]);
  });
});
