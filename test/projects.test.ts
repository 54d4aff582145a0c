import { eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { projects } from '../src/db/schema/index.js';
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
  { method: 'GET', url: '/api/v1/projects' },
  { method: 'POST', url: '/api/v1/projects', body: { name: 'P', use_default_group: true }, write: true },
  { method: 'GET', url: (o) => `/api/v1/projects/${o.projectId}` },
  { method: 'PUT', url: (o) => `/api/v1/projects/${o.projectId}`, body: { name: 'x' }, write: true },
  { method: 'DELETE', url: (o) => `/api/v1/projects/${o.projectId}`, write: true },
  { method: 'POST', url: (o) => `/api/v1/projects/${o.projectId}/archive`, write: true },
  { method: 'POST', url: (o) => `/api/v1/projects/${o.projectId}/unarchive`, write: true },
]);

describe('projects', () => {
  let t: TestApp;
  let org: TestOrg;
  let other: TestOrg;
  beforeAll(async () => {
    t = await buildTestApp();
    org = await createOrg(t);
    other = await createOrg(t);
  });
  afterAll(() => t.close());

  const post = (o: TestOrg, path: string, body: unknown) => call(t, 'POST', path, { key: o.orgKey, body });
  const createGroup = async (o: TestOrg, name: string) => {
    const res = await post(o, '/api/v1/groups', { name });
    expectStatus(res, 201);
    return res.body.group.id as number;
  };
  const createCategory = async (o: TestOrg, name: string) => {
    const res = await post(o, '/api/v1/categories', { name, use_default_group: true });
    expectStatus(res, 201);
    return res.body.category.id as number;
  };
  const createProject = async (o: TestOrg, body: Record<string, unknown>) => {
    const res = await post(o, '/api/v1/projects', body);
    expectStatus(res, 201);
    return res.body.project;
  };

  it('creates a project in the default group and reads it back', async () => {
    const res = await post(org, '/api/v1/projects', {
      name: 'Launch',
      overview: 'Spring launch',
      use_default_group: true,
    });
    expectStatus(res, 201);
    expect(res.body).toEqual({
      project: {
        id: expect.any(Number),
        name: 'Launch',
        overview: 'Spring launch',
        group_ids: [org.defaultGroupId],
        category_ids: [],
        archived: false,
        archived_at: null,
        created_at: expect.stringMatching(TIMESTAMP),
        updated_at: expect.stringMatching(TIMESTAMP),
      },
    });
    const read = await call(t, 'GET', `/api/v1/projects/${res.body.project.id}`, { key: org.adminKey });
    expectStatus(read, 200);
    expect(read.body).toEqual(res.body);
  });

  it('creates with group_ids and category_ids', async () => {
    const group = await createGroup(org, 'Marketing');
    const category = await createCategory(org, 'Campaigns');
    const project = await createProject(org, {
      name: 'Campaign',
      group_ids: [group, group],
      category_ids: [category],
    });
    expect(project).toMatchObject({ group_ids: [group], category_ids: [category], overview: '' });
  });

  it('requires at least one group on create (422 naming group_ids)', async () => {
    for (const body of [
      { name: 'No groups' },
      { name: 'No groups', use_default_group: false },
      { name: 'Empty', group_ids: [] },
    ]) {
      const res = await post(org, '/api/v1/projects', body);
      expectV1Error(res, 422);
      expect(Object.keys(res.body.error.details)).toEqual(['group_ids']);
    }
  });

  it('refuses unknown group and category ids, including those of another organization', async () => {
    const theirGroup = await createGroup(other, 'Theirs');
    const theirCategory = await createCategory(other, 'Theirs');
    const groups = await post(org, '/api/v1/projects', { name: 'P', group_ids: [theirGroup, 999999] });
    expectV1Error(groups, 422);
    expect(groups.body.error.details.group_ids[0]).toContain(`${theirGroup}, 999999`);
    const categories = await post(org, '/api/v1/projects', {
      name: 'P',
      use_default_group: true,
      category_ids: [theirCategory],
    });
    expectV1Error(categories, 422);
    expect(categories.body.error.details).toEqual({
      category_ids: [expect.stringContaining(`${theirCategory}`)],
    });
  });

  it('validates types (400) and rules (422)', async () => {
    const wrong = await post(org, '/api/v1/projects', { name: 'P', use_default_group: 'true' });
    expectV1Error(wrong, 400);
    expect(wrong.body.error.details).toHaveProperty('use_default_group');
    expectV1Error(await post(org, '/api/v1/projects', { name: 'P', group_ids: ['1'] }), 400);
    const noName = await post(org, '/api/v1/projects', { use_default_group: true });
    expectV1Error(noName, 422);
    expect(noName.body.error.details).toEqual({ name: ['is required'] });
  });

  it('replaces groups and categories on PUT when given, and keeps them otherwise', async () => {
    const a = await createGroup(org, 'A');
    const b = await createGroup(org, 'B');
    const c1 = await createCategory(org, 'C1');
    const c2 = await createCategory(org, 'C2');
    const project = await createProject(org, { name: 'Replace', group_ids: [a], category_ids: [c1] });
    const url = `/api/v1/projects/${project.id}`;

    const renamed = await call(t, 'PUT', url, {
      key: org.orgKey,
      body: { name: 'Renamed', overview: 'New' },
    });
    expectStatus(renamed, 200);
    expect(renamed.body.project).toMatchObject({
      name: 'Renamed',
      overview: 'New',
      group_ids: [a],
      category_ids: [c1],
    });

    const replaced = await call(t, 'PUT', url, {
      key: org.orgKey,
      body: { group_ids: [b], category_ids: [c2] },
    });
    expectStatus(replaced, 200);
    expect(replaced.body.project).toMatchObject({ name: 'Renamed', group_ids: [b], category_ids: [c2] });

    const toDefault = await call(t, 'PUT', url, { key: org.orgKey, body: { use_default_group: true } });
    expect(toDefault.body.project.group_ids).toEqual([org.defaultGroupId]);

    const cleared = await call(t, 'PUT', url, { key: org.orgKey, body: { category_ids: [] } });
    expect(cleared.body.project.category_ids).toEqual([]);

    const empty = await call(t, 'PUT', url, { key: org.orgKey, body: { group_ids: [] } });
    expectV1Error(empty, 422);
    expect(empty.body.error.details).toHaveProperty('group_ids');
    const unknown = await call(t, 'PUT', url, { key: org.orgKey, body: { group_ids: [999999] } });
    expectV1Error(unknown, 422);
    const after = await call(t, 'GET', url, { key: org.orgKey });
    expect(after.body.project.group_ids).toEqual([org.defaultGroupId]);
  });

  it('archives: hidden from lists unless include_archived=true, still readable, and can come back', async () => {
    const own = await createOrg(t);
    const project = await createProject(own, { name: 'To archive', use_default_group: true });
    const archived = await call(t, 'POST', `/api/v1/projects/${project.id}/archive`, { key: own.orgKey });
    expectStatus(archived, 200);
    expect(archived.body.project).toMatchObject({
      id: project.id,
      archived: true,
      archived_at: expect.stringMatching(TIMESTAMP),
    });
    const again = await call(t, 'POST', `/api/v1/projects/${project.id}/archive`, { key: own.orgKey });
    expect(again.body.project.archived_at).toBe(archived.body.project.archived_at);

    const list = await call(t, 'GET', '/api/v1/projects', { key: own.orgKey });
    expect(list.body.projects.map((p: any) => p.id)).toEqual([own.projectId]);
    expect(list.body.pagination.total_count).toBe(1);
    const all = await call(t, 'GET', '/api/v1/projects?include_archived=true', { key: own.orgKey });
    expect(all.body.projects.map((p: any) => [p.id, p.archived])).toEqual([
      [own.projectId, false],
      [project.id, true],
    ]);
    const read = await call(t, 'GET', `/api/v1/projects/${project.id}`, { key: own.orgKey });
    expectStatus(read, 200);
    expect(read.body.project.archived).toBe(true);
    expectV1Error(await call(t, 'GET', '/api/v1/projects?include_archived=maybe', { key: own.orgKey }), 400);

    const back = await call(t, 'POST', `/api/v1/projects/${project.id}/unarchive`, { key: own.orgKey });
    expect(back.body.project).toMatchObject({ archived: false, archived_at: null });
    const listed = await call(t, 'GET', '/api/v1/projects', { key: own.orgKey });
    expect(listed.body.projects).toHaveLength(2);
  });

  it('deletes softly: gone from the API, the row kept for chats and the ledger', async () => {
    const project = await createProject(org, { name: 'Doomed', use_default_group: true });
    const res = await call(t, 'DELETE', `/api/v1/projects/${project.id}`, { key: org.orgKey });
    expectStatus(res, 200);
    expect(res.body).toEqual({ message: expect.any(String) });
    expectV1Error(
      await call(t, 'GET', `/api/v1/projects/${project.id}`, { key: org.orgKey }),
      404,
      'project_not_found',
    );
    expectV1Error(await call(t, 'DELETE', `/api/v1/projects/${project.id}`, { key: org.orgKey }), 404);
    const list = await call(t, 'GET', '/api/v1/projects?include_archived=true&page_size=100', {
      key: org.orgKey,
    });
    expect(list.body.projects.map((p: any) => p.id)).not.toContain(project.id);
    const [row] = await t.deps.database.db.select().from(projects).where(eq(projects.id, project.id));
    expect(row.deletedAt).not.toBeNull();
  });

  it('shows members only the projects sharing a group with them', async () => {
    const own = await createOrg(t);
    const secret = await createGroup(own, 'Secret');
    const hidden = await createProject(own, { name: 'Hidden', group_ids: [secret] });
    const member = await createMember(t, own);

    const list = await call(t, 'GET', '/api/v1/projects', { key: member.key });
    expectStatus(list, 200);
    expect(list.body.projects.map((p: any) => p.id)).toEqual([own.projectId]);
    expectV1Error(
      await call(t, 'GET', `/api/v1/projects/${hidden.id}`, { key: member.key }),
      404,
      'project_not_found',
    );

    await post(own, `/api/v1/groups/${secret}/members`, { user_id: member.userId });
    const now = await call(t, 'GET', '/api/v1/projects', { key: member.key });
    expect(now.body.projects.map((p: any) => p.id)).toEqual([own.projectId, hidden.id]);
    expectStatus(await call(t, 'GET', `/api/v1/projects/${hidden.id}`, { key: member.key }), 200);
    expectV1Error(
      await call(t, 'PUT', `/api/v1/projects/${hidden.id}`, { key: member.key, body: { name: 'x' } }),
      403,
      'forbidden',
    );
    expectV1Error(await call(t, 'POST', `/api/v1/projects/${hidden.id}/archive`, { key: member.key }), 403);
  });

  it('answers 404 for projects of another organization', async () => {
    const theirs = other.projectId;
    for (const [method, url, body] of [
      ['GET', `/api/v1/projects/${theirs}`],
      ['PUT', `/api/v1/projects/${theirs}`, { name: 'Mine' }],
      ['DELETE', `/api/v1/projects/${theirs}`],
      ['POST', `/api/v1/projects/${theirs}/archive`],
    ] as const) {
      expectV1Error(await call(t, method, url, { key: org.orgKey, body }), 404, 'project_not_found');
    }
    const list = await call(t, 'GET', '/api/v1/projects?page_size=100', { key: org.orgKey });
    expect(list.body.projects.map((p: any) => p.id)).not.toContain(theirs);
    const still = await call(t, 'GET', `/api/v1/projects/${theirs}`, { key: other.orgKey });
    expect(still.body.project).toMatchObject({ archived: false, name: 'Test project' });
  });

  it('paginates', async () => {
    const own = await createOrg(t);
    for (const name of ['P2', 'P3']) await createProject(own, { name, use_default_group: true });
    const page = await call(t, 'GET', '/api/v1/projects?page=2&page_size=2', { key: own.orgKey });
    expect(page.body.projects.map((p: any) => p.name)).toEqual(['P3']);
    expect(page.body.pagination).toEqual({ page: 2, page_size: 2, total_count: 3, total_pages: 2 });
  });
});
