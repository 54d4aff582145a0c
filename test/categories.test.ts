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
  { method: 'GET', url: '/api/v1/categories' },
  { method: 'POST', url: '/api/v1/categories', body: { name: 'C', use_default_group: true }, write: true },
  { method: 'GET', url: '/api/v1/categories/999999' },
  { method: 'PUT', url: '/api/v1/categories/999999', body: { name: 'x' }, write: true },
  { method: 'DELETE', url: '/api/v1/categories/999999', write: true },
]);

describe('categories', () => {
  let t: TestApp;
  let org: TestOrg;
  let other: TestOrg;
  beforeAll(async () => {
    t = await buildTestApp();
    org = await createOrg(t);
    other = await createOrg(t);
  });
  afterAll(() => t.close());

  const post = (body: unknown, o = org) => call(t, 'POST', '/api/v1/categories', { key: o.orgKey, body });
  const createGroup = async (o: TestOrg, name: string) =>
    (await call(t, 'POST', '/api/v1/groups', { key: o.orgKey, body: { name } })).body.group.id as number;

  it('creates a category in the default group and reads it back', async () => {
    const res = await post({ name: 'Guides', description: 'How-tos', use_default_group: true });
    expectStatus(res, 201);
    expect(res.body).toEqual({
      category: {
        id: expect.any(Number),
        name: 'Guides',
        description: 'How-tos',
        group_ids: [org.defaultGroupId],
        created_at: expect.stringMatching(TIMESTAMP),
        updated_at: expect.stringMatching(TIMESTAMP),
      },
    });
    const read = await call(t, 'GET', `/api/v1/categories/${res.body.category.id}`, { key: org.adminKey });
    expect(read.body).toEqual(res.body);
    const list = await call(t, 'GET', '/api/v1/categories', { key: org.orgKey });
    expect(list.body.categories).toContainEqual(res.body.category);
    expect(list.body.pagination).toMatchObject({ page: 1, page_size: 50 });
  });

  it('creates with group_ids', async () => {
    const a = await createGroup(org, 'A');
    const b = await createGroup(org, 'B');
    const res = await post({ name: 'Mixed', group_ids: [b, a, b] });
    expectStatus(res, 201);
    expect(res.body.category.group_ids).toEqual([a, b].sort((x, y) => x - y));
  });

  it('requires a group on create', async () => {
    for (const body of [
      { name: 'None' },
      { name: 'None', use_default_group: false },
      { name: 'E', group_ids: [] },
    ]) {
      const res = await post(body);
      expectV1Error(res, 422);
      expect(Object.keys(res.body.error.details)).toEqual(['group_ids']);
    }
    const theirs = await createGroup(other, 'Theirs');
    const foreign = await post({ name: 'Foreign', group_ids: [theirs] });
    expectV1Error(foreign, 422);
    expect(foreign.body.error.details.group_ids[0]).toContain(String(theirs));
    expectV1Error(await post({ name: 'T', group_ids: 'all' }), 400);
    const noName = await post({ use_default_group: true });
    expectV1Error(noName, 422);
    expect(noName.body.error.details).toEqual({ name: ['is required'] });
  });

  it('replaces groups on PUT and never leaves none', async () => {
    const a = await createGroup(org, 'PA');
    const b = await createGroup(org, 'PB');
    const created = await post({ name: 'Replace', group_ids: [a] });
    const url = `/api/v1/categories/${created.body.category.id}`;
    const renamed = await call(t, 'PUT', url, {
      key: org.orgKey,
      body: { name: 'Renamed', description: 'D' },
    });
    expectStatus(renamed, 200);
    expect(renamed.body.category).toMatchObject({ name: 'Renamed', description: 'D', group_ids: [a] });
    const replaced = await call(t, 'PUT', url, { key: org.orgKey, body: { group_ids: [b] } });
    expect(replaced.body.category.group_ids).toEqual([b]);
    const empty = await call(t, 'PUT', url, { key: org.orgKey, body: { group_ids: [] } });
    expectV1Error(empty, 422);
    expect(Object.keys(empty.body.error.details)).toEqual(['group_ids']);
    const unknown = await call(t, 'PUT', url, { key: org.orgKey, body: { group_ids: [999999] } });
    expectV1Error(unknown, 422);
    const read = await call(t, 'GET', url, { key: org.orgKey });
    expect(read.body.category.group_ids).toEqual([b]);
    const toDefault = await call(t, 'PUT', url, { key: org.orgKey, body: { use_default_group: true } });
    expect(toDefault.body.category.group_ids).toEqual([org.defaultGroupId]);
  });

  it('cannot lose its last group through a group deletion', async () => {
    const solo = await createGroup(org, 'Only');
    const created = await post({ name: 'Single', group_ids: [solo] });
    const res = await call(t, 'DELETE', `/api/v1/groups/${solo}`, { key: org.orgKey });
    expectV1Error(res, 422, 'last_group');
    expect(res.body.error.details.categories[0]).toContain(`(id ${created.body.category.id})`);
  });

  it('deletes: projects lose it and artifact types keep a null category_id', async () => {
    const created = await post({ name: 'Temporary', use_default_group: true });
    const id = created.body.category.id;
    const project = await call(t, 'POST', '/api/v1/projects', {
      key: org.orgKey,
      body: { name: 'In category', use_default_group: true, category_ids: [id] },
    });
    const type = await call(t, 'POST', '/api/v1/artifact_types', {
      key: org.orgKey,
      body: { name: 'Typed', category_id: id },
    });
    const res = await call(t, 'DELETE', `/api/v1/categories/${id}`, { key: org.orgKey });
    expectStatus(res, 200);
    expect(res.body).toEqual({ message: expect.any(String) });
    expectV1Error(
      await call(t, 'GET', `/api/v1/categories/${id}`, { key: org.orgKey }),
      404,
      'category_not_found',
    );
    const p = await call(t, 'GET', `/api/v1/projects/${project.body.project.id}`, { key: org.orgKey });
    expect(p.body.project.category_ids).toEqual([]);
    const a = await call(t, 'GET', `/api/v1/artifact_types/${type.body.artifact_type.id}`, {
      key: org.orgKey,
    });
    expect(a.body.artifact_type.category_id).toBeNull();
  });

  it('answers 404 for categories of another organization', async () => {
    const theirs = await post({ name: 'Theirs', use_default_group: true }, other);
    const url = `/api/v1/categories/${theirs.body.category.id}`;
    for (const [method, body] of [['GET'], ['PUT', { name: 'Mine' }], ['DELETE']] as const) {
      expectV1Error(await call(t, method, url, { key: org.orgKey, body }), 404, 'category_not_found');
    }
    expectStatus(await call(t, 'GET', url, { key: other.orgKey }), 200);
  });

  it('shows members the categories sharing a group with them; members cannot write', async () => {
    const own = await createOrg(t);
    const secret = await createGroup(own, 'Secret');
    const open = await post({ name: 'Open', use_default_group: true }, own);
    const hidden = await post({ name: 'Hidden', group_ids: [secret] }, own);
    const member = await createMember(t, own);
    const list = await call(t, 'GET', '/api/v1/categories', { key: member.key });
    expect(list.body.categories.map((c: any) => c.id)).toEqual([open.body.category.id]);
    expectV1Error(
      await call(t, 'GET', `/api/v1/categories/${hidden.body.category.id}`, { key: member.key }),
      404,
    );
    expectV1Error(
      await call(t, 'POST', '/api/v1/categories', {
        key: member.key,
        body: { name: 'x', use_default_group: true },
      }),
      403,
      'forbidden',
    );
  });
});
