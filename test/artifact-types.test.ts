import { afterAll, beforeAll, describe, expect, it } from 'vitest';
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
  { method: 'GET', url: '/api/v1/artifact_types' },
  { method: 'POST', url: '/api/v1/artifact_types', body: { name: 'Memo' }, write: true },
  { method: 'GET', url: '/api/v1/artifact_types/999999' },
  { method: 'PUT', url: '/api/v1/artifact_types/999999', body: { name: 'x' }, write: true },
  { method: 'DELETE', url: '/api/v1/artifact_types/999999', write: true },
]);

describe('artifact types', () => {
  let t: TestApp;
  let org: TestOrg;
  let other: TestOrg;
  beforeAll(async () => {
    t = await buildTestApp();
    org = await createOrg(t);
    other = await createOrg(t);
  });
  afterAll(() => t.close());

  const create = (o: TestOrg, body: Record<string, unknown>) =>
    call(t, 'POST', '/api/v1/artifact_types', { key: o.orgKey, body });
  const slugOf = async (o: TestOrg, name: string) => {
    const res = await create(o, { name });
    expectStatus(res, 201);
    return res.body.artifact_type.slug as string;
  };

  it('creates an artifact type with a slug from its name', async () => {
    const res = await create(org, { name: 'Press Release', description: 'For journalists' });
    expectStatus(res, 201);
    expect(res.body).toEqual({
      artifact_type: {
        id: expect.any(Number),
        slug: 'press-release',
        name: 'Press Release',
        description: 'For journalists',
        category_id: null,
        created_at: expect.stringMatching(TIMESTAMP),
        updated_at: expect.stringMatching(TIMESTAMP),
      },
    });
    const read = await call(t, 'GET', `/api/v1/artifact_types/${res.body.artifact_type.id}`, {
      key: org.orgKey,
    });
    expect(read.body).toEqual(res.body);
  });

  it('lists artifact types in the spec shape', async () => {
    const own = await createOrg(t);
    await create(own, { name: 'Memo' });
    await create(own, { name: 'Blog Post', description: 'Long form' });
    const res = await call(t, 'GET', '/api/v1/artifact_types', { key: own.adminKey });
    expectStatus(res, 200);
    expect(res.body.artifact_types).toEqual([
      expect.objectContaining({ id: expect.any(Number), slug: 'memo', name: 'Memo', description: '' }),
      expect.objectContaining({ slug: 'blog-post', name: 'Blog Post', description: 'Long form' }),
    ]);
    expect(res.body.pagination).toEqual({ page: 1, page_size: 50, total_count: 2, total_pages: 1 });
    const second = await call(t, 'GET', '/api/v1/artifact_types?page=2&page_size=1', { key: own.orgKey });
    expect(second.body.artifact_types.map((a: any) => a.slug)).toEqual(['blog-post']);
  });

  it('makes slugs lower-case ASCII with hyphens, unique per organization', async () => {
    const own = await createOrg(t);
    expect(await slugOf(own, 'Weekly  Report!')).toBe('weekly-report');
    expect(await slugOf(own, 'weekly report')).toBe('weekly-report-2');
    expect(await slugOf(own, 'WEEKLY_REPORT')).toBe('weekly-report-3');
    expect(await slugOf(own, 'Résumé Écrit & Co')).toBe('resume-ecrit-and-co');
    expect(await slugOf(own, '日本語')).toBe('artifact-type');
    expect(await slugOf(own, '???')).toBe('artifact-type-2');
    // Alphanumeric runs stay whole, whatever their case (no split between letters and digits).
    expect(await slugOf(own, 'Report e0526964443b Draft v2')).toBe('report-e0526964443b-draft-v2');
    expect(await slugOf(own, 'Report E0526964443B Draft V2')).toBe('report-e0526964443b-draft-v2-2');
    expect(await slugOf(own, 'FOO360bar QuarterlyReview')).toBe('foo360bar-quarterlyreview');
    // Another organization has its own slugs.
    expect(await slugOf(await createOrg(t), 'Weekly Report')).toBe('weekly-report');
  });

  it('gives concurrent creations of one name distinct slugs', async () => {
    const own = await createOrg(t);
    const results = await Promise.all(Array.from({ length: 4 }, () => create(own, { name: 'Same Name' })));
    for (const r of results) expectStatus(r, 201);
    expect(results.map((r) => r.body.artifact_type.slug).sort()).toEqual([
      'same-name',
      'same-name-2',
      'same-name-3',
      'same-name-4',
    ]);
  });

  it('keeps the slug when renamed', async () => {
    const created = await create(org, { name: 'Case Study' });
    const id = created.body.artifact_type.id;
    const renamed = await call(t, 'PUT', `/api/v1/artifact_types/${id}`, {
      key: org.orgKey,
      body: { name: 'Customer Story', description: 'Renamed' },
    });
    expectStatus(renamed, 200);
    expect(renamed.body.artifact_type).toMatchObject({
      id,
      slug: 'case-study',
      name: 'Customer Story',
      description: 'Renamed',
    });
  });

  it('accepts 100 characters in a name and refuses 101 (422)', async () => {
    const ok = await create(org, { name: 'a'.repeat(100) });
    expectStatus(ok, 201);
    expect(ok.body.artifact_type.name).toHaveLength(100);
    const long = await create(org, { name: 'b'.repeat(101) });
    expectV1Error(long, 422, 'validation_failed');
    expect(Object.keys(long.body.error.details)).toEqual(['name']);
    const put = await call(t, 'PUT', `/api/v1/artifact_types/${ok.body.artifact_type.id}`, {
      key: org.orgKey,
      body: { name: 'c'.repeat(101) },
    });
    expectV1Error(put, 422);
    expect(Object.keys(put.body.error.details)).toEqual(['name']);
    const putOk = await call(t, 'PUT', `/api/v1/artifact_types/${ok.body.artifact_type.id}`, {
      key: org.orgKey,
      body: { name: 'd'.repeat(100) },
    });
    expectStatus(putOk, 200);
  });

  it('validates: missing or empty name is 422, a wrong type 400', async () => {
    const missing = await create(org, {});
    expectV1Error(missing, 422);
    expect(missing.body.error.details).toEqual({ name: ['is required'] });
    expectV1Error(await create(org, { name: '' }), 422);
    expectV1Error(await create(org, { name: 12 }), 400);
    expectV1Error(await create(org, { name: 'X', category_id: 'one' }), 400);
  });

  it('keeps category_id for backwards compatibility and checks it', async () => {
    const category = await call(t, 'POST', '/api/v1/categories', {
      key: org.orgKey,
      body: { name: 'Docs', use_default_group: true },
    });
    const categoryId = category.body.category.id;
    const res = await create(org, { name: 'Spec Sheet', category_id: categoryId });
    expectStatus(res, 201);
    expect(res.body.artifact_type.category_id).toBe(categoryId);

    const foreign = await call(t, 'POST', '/api/v1/categories', {
      key: other.orgKey,
      body: { name: 'Theirs', use_default_group: true },
    });
    const refused = await create(org, { name: 'X', category_id: foreign.body.category.id });
    expectV1Error(refused, 422);
    expect(Object.keys(refused.body.error.details)).toEqual(['category_id']);

    const cleared = await call(t, 'PUT', `/api/v1/artifact_types/${res.body.artifact_type.id}`, {
      key: org.orgKey,
      body: { category_id: null },
    });
    expect(cleared.body.artifact_type.category_id).toBeNull();
  });

  it('deletes: gone from the list and reads, and the slug can be used again', async () => {
    const own = await createOrg(t);
    const created = await create(own, { name: 'Flyer' });
    const id = created.body.artifact_type.id;
    const res = await call(t, 'DELETE', `/api/v1/artifact_types/${id}`, { key: own.orgKey });
    expectStatus(res, 200);
    expect(res.body).toEqual({ message: expect.any(String) });
    expectV1Error(
      await call(t, 'GET', `/api/v1/artifact_types/${id}`, { key: own.orgKey }),
      404,
      'artifact_type_not_found',
    );
    expectV1Error(await call(t, 'DELETE', `/api/v1/artifact_types/${id}`, { key: own.orgKey }), 404);
    const list = await call(t, 'GET', '/api/v1/artifact_types', { key: own.orgKey });
    expect(list.body.artifact_types).toEqual([]);
    expect(await slugOf(own, 'Flyer')).toBe('flyer');
  });

  it('answers 404 for artifact types of another organization', async () => {
    const theirs = await create(other, { name: 'Private' });
    const id = theirs.body.artifact_type.id;
    for (const [method, body] of [['GET'], ['PUT', { name: 'Mine' }], ['DELETE']] as const) {
      expectV1Error(
        await call(t, method, `/api/v1/artifact_types/${id}`, { key: org.orgKey, body }),
        404,
        'artifact_type_not_found',
      );
    }
    const list = await call(t, 'GET', '/api/v1/artifact_types?page_size=100', { key: org.orgKey });
    expect(list.body.artifact_types.map((a: any) => a.id)).not.toContain(id);
  });

  it('lets members list but not write', async () => {
    const member = await createMember(t, org);
    expectStatus(await call(t, 'GET', '/api/v1/artifact_types', { key: member.key }), 200);
    expectV1Error(
      await call(t, 'POST', '/api/v1/artifact_types', { key: member.key, body: { name: 'Nope' } }),
      403,
      'forbidden',
    );
  });
});
