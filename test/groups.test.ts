import SwaggerParser from '@apidevtools/swagger-parser';
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
  { method: 'GET', url: '/api/v1/groups' },
  { method: 'POST', url: '/api/v1/groups', body: { name: 'Editors' }, write: true },
  { method: 'GET', url: (o) => `/api/v1/groups/${o.defaultGroupId}` },
  { method: 'PUT', url: (o) => `/api/v1/groups/${o.defaultGroupId}`, body: { name: 'x' }, write: true },
  { method: 'DELETE', url: '/api/v1/groups/999999', write: true },
  {
    method: 'POST',
    url: (o) => `/api/v1/groups/${o.defaultGroupId}/members`,
    body: { user_id: 1 },
    write: true,
  },
  { method: 'DELETE', url: (o) => `/api/v1/groups/${o.defaultGroupId}/members/999999`, write: true },
]);

describe('groups', () => {
  let t: TestApp;
  let org: TestOrg;
  let other: TestOrg;
  beforeAll(async () => {
    t = await buildTestApp();
    org = await createOrg(t);
    other = await createOrg(t);
  });
  afterAll(() => t.close());

  const createGroup = async (name: string, o = org) => {
    const res = await call(t, 'POST', '/api/v1/groups', { key: o.orgKey, body: { name } });
    expectStatus(res, 201);
    return res.body.group.id as number;
  };

  it('creates, reads, lists, renames and deletes a group', async () => {
    const created = await call(t, 'POST', '/api/v1/groups', {
      key: org.adminKey,
      body: { name: 'Editors', description: 'They edit' },
    });
    expectStatus(created, 201);
    expect(created.body).toEqual({
      group: {
        id: expect.any(Number),
        name: 'Editors',
        description: 'They edit',
        is_default: false,
        user_ids: [],
        created_at: expect.stringMatching(TIMESTAMP),
        updated_at: expect.stringMatching(TIMESTAMP),
      },
    });
    const id = created.body.group.id;

    const read = await call(t, 'GET', `/api/v1/groups/${id}`, { key: org.orgKey });
    expectStatus(read, 200);
    expect(read.body.group).toEqual(created.body.group);

    const list = await call(t, 'GET', '/api/v1/groups', { key: org.orgKey });
    expectStatus(list, 200);
    expect(list.body.groups.map((g: any) => g.id)).toEqual([org.defaultGroupId, id]);
    expect(list.body.groups[0]).toMatchObject({ is_default: true, user_ids: [org.adminUserId] });
    expect(list.body.pagination).toEqual({ page: 1, page_size: 50, total_count: 2, total_pages: 1 });

    const renamed = await call(t, 'PUT', `/api/v1/groups/${id}`, {
      key: org.orgKey,
      body: { name: 'Writers' },
    });
    expectStatus(renamed, 200);
    expect(renamed.body.group).toMatchObject({ id, name: 'Writers', description: 'They edit' });

    const deleted = await call(t, 'DELETE', `/api/v1/groups/${id}`, { key: org.orgKey });
    expectStatus(deleted, 200);
    expect(deleted.body).toEqual({ message: expect.any(String) });
    expectV1Error(await call(t, 'GET', `/api/v1/groups/${id}`, { key: org.orgKey }), 404, 'group_not_found');
  });

  it('paginates the list', async () => {
    const own = await createOrg(t);
    for (const name of ['A', 'B', 'C']) await createGroup(name, own);
    const page = await call(t, 'GET', '/api/v1/groups?page=2&page_size=2', { key: own.orgKey });
    expectStatus(page, 200);
    expect(page.body.groups.map((g: any) => g.name)).toEqual(['B', 'C']);
    expect(page.body.pagination).toEqual({ page: 2, page_size: 2, total_count: 4, total_pages: 2 });
    expectV1Error(await call(t, 'GET', '/api/v1/groups?page_size=101', { key: own.orgKey }), 400);
  });

  it('validates bodies: 422 for rule violations, 400 for wrong types', async () => {
    const missing = await call(t, 'POST', '/api/v1/groups', { key: org.orgKey, body: { description: 'x' } });
    expectV1Error(missing, 422, 'validation_failed');
    expect(missing.body.error.details).toEqual({ name: ['is required'] });
    const empty = await call(t, 'POST', '/api/v1/groups', { key: org.orgKey, body: { name: '' } });
    expectV1Error(empty, 422);
    expect(empty.body.error.details).toHaveProperty('name');
    const wrongType = await call(t, 'POST', '/api/v1/groups', { key: org.orgKey, body: { name: 42 } });
    expectV1Error(wrongType, 400);
    expect(wrongType.body.error.details).toHaveProperty('name');
    expectV1Error(await call(t, 'GET', '/api/v1/groups/abc', { key: org.orgKey }), 400);
  });

  it('refuses to delete the default group', async () => {
    const res = await call(t, 'DELETE', `/api/v1/groups/${org.defaultGroupId}`, { key: org.orgKey });
    expectV1Error(res, 422, 'default_group');
    expectStatus(await call(t, 'GET', `/api/v1/groups/${org.defaultGroupId}`, { key: org.orgKey }), 200);
  });

  it('refuses to delete the last group of a category, project or agent, naming them', async () => {
    const own = await createOrg(t);
    const solo = await createGroup('Solo', own);
    const spare = await createGroup('Spare', own);
    const category = await call(t, 'POST', '/api/v1/categories', {
      key: own.orgKey,
      body: { name: 'Handbooks', group_ids: [solo] },
    });
    expectStatus(category, 201);
    const project = await call(t, 'POST', '/api/v1/projects', {
      key: own.orgKey,
      body: { name: 'Launch', group_ids: [solo] },
    });
    expectStatus(project, 201);

    const refused = await call(t, 'DELETE', `/api/v1/groups/${solo}`, { key: own.orgKey });
    expectV1Error(refused, 422, 'last_group');
    expect(refused.body.error.message).toContain('Handbooks');
    expect(refused.body.error.message).toContain('Launch');
    expect(refused.body.error.details).toEqual({
      categories: [expect.stringContaining(`"Handbooks" (id ${category.body.category.id})`)],
      projects: [expect.stringContaining(`"Launch" (id ${project.body.project.id})`)],
    });

    // Once both have another group too, the group may go and they keep the other one.
    expectStatus(
      await call(t, 'PUT', `/api/v1/categories/${category.body.category.id}`, {
        key: own.orgKey,
        body: { group_ids: [solo, spare] },
      }),
      200,
    );
    expectStatus(
      await call(t, 'PUT', `/api/v1/projects/${project.body.project.id}`, {
        key: own.orgKey,
        body: { group_ids: [solo, spare] },
      }),
      200,
    );
    expectStatus(await call(t, 'DELETE', `/api/v1/groups/${solo}`, { key: own.orgKey }), 200);
    const after = await call(t, 'GET', `/api/v1/categories/${category.body.category.id}`, {
      key: own.orgKey,
    });
    expect(after.body.category.group_ids).toEqual([spare]);
    const proj = await call(t, 'GET', `/api/v1/projects/${project.body.project.id}`, { key: own.orgKey });
    expect(proj.body.project.group_ids).toEqual([spare]);
  });

  it('a deleted project does not hold its last group', async () => {
    const own = await createOrg(t);
    const solo = await createGroup('Solo', own);
    const project = await call(t, 'POST', '/api/v1/projects', {
      key: own.orgKey,
      body: { name: 'Old', group_ids: [solo] },
    });
    expectStatus(
      await call(t, 'DELETE', `/api/v1/projects/${project.body.project.id}`, { key: own.orgKey }),
      200,
    );
    expectStatus(await call(t, 'DELETE', `/api/v1/groups/${solo}`, { key: own.orgKey }), 200);
  });

  it('adds and removes members', async () => {
    const group = await createGroup('Reviewers');
    const member = await createMember(t, org);
    const added = await call(t, 'POST', `/api/v1/groups/${group}/members`, {
      key: org.orgKey,
      body: { user_id: member.userId },
    });
    expectStatus(added, 201);
    expect(added.body.group).toMatchObject({ id: group, user_ids: [member.userId] });
    const again = await call(t, 'POST', `/api/v1/groups/${group}/members`, {
      key: org.orgKey,
      body: { user_id: member.userId },
    });
    expectStatus(again, 200);
    expect(again.body.group.user_ids).toEqual([member.userId]);

    const user = await call(t, 'GET', `/api/v1/users/${member.userId}`, { key: org.orgKey });
    expect(user.body.user.group_ids).toEqual([org.defaultGroupId, group]);

    const removed = await call(t, 'DELETE', `/api/v1/groups/${group}/members/${member.userId}`, {
      key: org.orgKey,
    });
    expectStatus(removed, 200);
    expect(removed.body).toEqual({ message: expect.any(String) });
    const read = await call(t, 'GET', `/api/v1/groups/${group}`, { key: org.orgKey });
    expect(read.body.group.user_ids).toEqual([]);
    expectV1Error(
      await call(t, 'DELETE', `/api/v1/groups/${group}/members/${member.userId}`, { key: org.orgKey }),
      404,
      'group_member_not_found',
    );
  });

  it('requires user_id as an integer when adding a member', async () => {
    const res = await call(t, 'POST', `/api/v1/groups/${org.defaultGroupId}/members`, {
      key: org.orgKey,
      body: {},
    });
    expectV1Error(res, 422);
    expect(res.body.error.details).toEqual({ user_id: ['is required'] });
    expectV1Error(
      await call(t, 'POST', `/api/v1/groups/${org.defaultGroupId}/members`, {
        key: org.orgKey,
        body: { user_id: 'one' },
      }),
      400,
    );
  });

  it('answers 404 for groups and users of another organization', async () => {
    const foreignGroup = await createGroup('Theirs', other);
    for (const [method, url, body] of [
      ['GET', `/api/v1/groups/${foreignGroup}`],
      ['PUT', `/api/v1/groups/${foreignGroup}`, { name: 'Mine now' }],
      ['DELETE', `/api/v1/groups/${foreignGroup}`],
      ['POST', `/api/v1/groups/${foreignGroup}/members`, { user_id: org.adminUserId }],
      ['DELETE', `/api/v1/groups/${foreignGroup}/members/${other.adminUserId}`],
    ] as const) {
      expectV1Error(await call(t, method, url, { key: org.orgKey, body }), 404, 'group_not_found');
    }
    const foreignUser = await call(t, 'POST', `/api/v1/groups/${org.defaultGroupId}/members`, {
      key: org.orgKey,
      body: { user_id: other.adminUserId },
    });
    expectV1Error(foreignUser, 404, 'user_not_found');
    const theirs = await call(t, 'GET', `/api/v1/groups/${foreignGroup}`, { key: other.orgKey });
    expect(theirs.body.group.name).toBe('Theirs');
  });

  it('lets members read groups but not change them', async () => {
    const member = await createMember(t, org);
    expectStatus(await call(t, 'GET', '/api/v1/groups', { key: member.key }), 200);
    expectStatus(await call(t, 'GET', `/api/v1/groups/${org.defaultGroupId}`, { key: member.key }), 200);
    expectV1Error(
      await call(t, 'POST', '/api/v1/groups', { key: member.key, body: { name: 'Mine' } }),
      403,
      'forbidden',
    );
    expectV1Error(
      await call(t, 'POST', `/api/v1/groups/${org.defaultGroupId}/members`, {
        key: member.key,
        body: { user_id: member.userId },
      }),
      403,
    );
  });
});

describe('management endpoints in /openapi.json', () => {
  it('documents every endpoint with its request and response schemas', async () => {
    const t = await buildTestApp();
    try {
      const res = await call(t, 'GET', '/openapi.json');
      expectStatus(res, 200);
      await SwaggerParser.validate(structuredClone(res.body));
      const paths = res.body.paths;
      const expected: [string, string, number, boolean][] = [
        ['/api/v1/groups', 'get', 200, false],
        ['/api/v1/groups', 'post', 201, true],
        ['/api/v1/groups/{id}', 'get', 200, false],
        ['/api/v1/groups/{id}', 'put', 200, true],
        ['/api/v1/groups/{id}', 'delete', 200, false],
        ['/api/v1/groups/{id}/members', 'post', 201, true],
        ['/api/v1/groups/{id}/members/{user_id}', 'delete', 200, false],
        ['/api/v1/categories', 'get', 200, false],
        ['/api/v1/categories', 'post', 201, true],
        ['/api/v1/categories/{id}', 'get', 200, false],
        ['/api/v1/categories/{id}', 'put', 200, true],
        ['/api/v1/categories/{id}', 'delete', 200, false],
        ['/api/v1/projects', 'get', 200, false],
        ['/api/v1/projects', 'post', 201, true],
        ['/api/v1/projects/{id}', 'get', 200, false],
        ['/api/v1/projects/{id}', 'put', 200, true],
        ['/api/v1/projects/{id}', 'delete', 200, false],
        ['/api/v1/projects/{id}/archive', 'post', 200, false],
        ['/api/v1/projects/{id}/webhooks', 'get', 200, false],
        ['/api/v1/projects/{id}/webhooks', 'post', 201, true],
        ['/api/v1/projects/{id}/webhooks/{webhook_id}', 'delete', 200, false],
        ['/api/v1/artifact_types', 'get', 200, false],
        ['/api/v1/artifact_types', 'post', 201, true],
        ['/api/v1/artifact_types/{id}', 'put', 200, true],
        ['/api/v1/artifact_types/{id}', 'delete', 200, false],
        ['/api/v1/artifact_types/{artifact_type_slug}/skills', 'get', 200, false],
        ['/api/v1/artifact_types/{artifact_type_slug}/prompt_templates', 'get', 200, false],
        ['/api/v1/skills', 'get', 200, false],
        ['/api/v1/skills', 'post', 201, true],
        ['/api/v1/skills/{id}', 'put', 200, true],
        ['/api/v1/model_configurations', 'post', 201, true],
        ['/api/v1/model_configurations/{id}', 'put', 200, true],
        ['/api/v1/agents', 'post', 201, true],
        ['/api/v1/agents/{id}', 'put', 200, true],
      ];
      for (const [path, method, status, hasBody] of expected) {
        const operation = paths[path]?.[method];
        expect({ path, method, documented: Boolean(operation) }).toEqual({ path, method, documented: true });
        expect(operation.responses[status].content['application/json'].schema).toBeTruthy();
        expect(operation.responses[422]).toBeTruthy();
        if (hasBody) expect(operation.requestBody.content['application/json'].schema).toBeTruthy();
      }
      expect(paths['/api/v1/artifact_types/{artifact_type_slug}/prompt_templates'].get.deprecated).toBe(true);
      const model = JSON.stringify(res.body.components.schemas.ModelConfiguration);
      expect(model).toContain('has_api_key');
      expect(model).not.toContain('"api_key"');
    } finally {
      await t.close();
    }
  });
});
