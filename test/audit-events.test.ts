import { randomBytes } from 'node:crypto';
import { eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { artifacts, auditEvents } from '../src/db/schema/index.js';
import { createArtifactType } from './artifacts-fixtures.js';
import { upload } from './fixtures/knowledge-helpers.js';
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

describeAuthMatrix('v1', [{ method: 'GET', url: '/api/v1/audit_events', superAdminReads: true }]);

interface Audit {
  id: number;
  organization_id: number;
  occurred_at: string;
  actor: { api_key_id: number; kind: string; user_id: number | null };
  action: string;
  resource: { type: string; id: number };
  changed_fields: string[];
  request_id: string | null;
}

describe('audit events', () => {
  let t: TestApp;
  let org: TestOrg;
  let other: TestOrg;
  let orgKeyId: number;
  const superKey = () => t.boot.super_admin_key;

  beforeAll(async () => {
    t = await buildTestApp({ OUTBOUND_ALLOW_PRIVATE: 'true' });
    org = await createOrg(t);
    other = await createOrg(t);
    const keys = await call(t, 'GET', '/api/v1/api_keys', { key: org.orgKey });
    orgKeyId = keys.body.api_keys.find((k: { kind: string }) => k.kind === 'organization').id;
  });
  afterAll(() => t?.close());

  const list = async (key: string, query = '', prefix = '/api/v1') => {
    const res = await call(t, 'GET', `${prefix}/audit_events${query}`, { key });
    expectStatus(res, 200);
    return res.body as { audit_events: Audit[]; pagination: Record<string, number> };
  };
  /** The newest record of `action` in the organization, read as its admin. */
  const latest = async (action: string, key = org.orgKey) => {
    const { audit_events } = await list(key, `?action=${action}&page_size=1`);
    expect(audit_events, `no ${action} record`).toHaveLength(1);
    return audit_events[0];
  };
  const write = async (method: string, url: string, body?: unknown, status = 200, key = org.orgKey) => {
    const res = await call(t, method, url, { key, body });
    expectStatus(res, status);
    return res.body;
  };

  it('records a management write with actor, fields and the request id, in the v1 list shape', async () => {
    const res = await call(t, 'POST', '/api/v1/projects', {
      key: org.orgKey,
      body: { name: 'Audited', overview: 'o', use_default_group: true },
      headers: { 'x-request-id': 'req-audit-1' },
    });
    expectStatus(res, 201);
    const page = await list(org.orgKey, '?action=project.created&page_size=1');
    // createOrg made the organization's first project through the API too.
    expect(page.pagination).toEqual({ page: 1, page_size: 1, total_count: 2, total_pages: 2 });
    expect(page.audit_events[0]).toEqual({
      id: expect.any(Number),
      organization_id: org.organizationId,
      occurred_at: expect.stringMatching(TIMESTAMP),
      actor: { api_key_id: orgKeyId, kind: 'organization', user_id: null },
      action: 'project.created',
      resource: { type: 'project', id: res.body.project.id },
      changed_fields: ['name', 'overview', 'use_default_group'],
      request_id: 'req-audit-1',
    });
  });

  it('records every write family', async () => {
    const projectId = (
      await write('POST', '/api/v1/projects', { name: 'P', group_ids: [org.defaultGroupId] }, 201)
    ).project.id;
    await write('PUT', `/api/v1/projects/${projectId}`, { overview: 'new' });
    await write('POST', `/api/v1/projects/${projectId}/archive`);
    await write('POST', `/api/v1/projects/${projectId}/unarchive`);

    const groupId = (await write('POST', '/api/v1/groups', { name: 'G' }, 201)).group.id;
    await write('PUT', `/api/v1/groups/${groupId}`, { description: 'd' });
    await write('POST', `/api/v1/groups/${groupId}/members`, { user_id: org.adminUserId }, 201);
    await write('DELETE', `/api/v1/groups/${groupId}/members/${org.adminUserId}`);
    await write('DELETE', `/api/v1/groups/${groupId}`);

    const categoryId = (
      await write('POST', '/api/v1/categories', { name: 'C', use_default_group: true }, 201)
    ).category.id;
    await write('PUT', `/api/v1/categories/${categoryId}`, { name: 'C2' });
    await write('DELETE', `/api/v1/categories/${categoryId}`);

    const typeId = (await write('POST', '/api/v1/artifact_types', { name: 'Memo' }, 201)).artifact_type.id;
    await write('PUT', `/api/v1/artifact_types/${typeId}`, { description: 'A memo' });
    const skillId = (
      await write('POST', '/api/v1/skills', { name: 'S', content: 'Write', artifact_type_ids: [typeId] }, 201)
    ).skill.id;
    await write('PUT', `/api/v1/skills/${skillId}`, { content: 'Write more' });
    const agentId = (await write('POST', '/api/v1/agents', { name: 'A', instructions: 'Be brief' }, 201))
      .agent.id;
    await write('PUT', `/api/v1/agents/${agentId}`, { skill_ids: [skillId] });
    await write('DELETE', `/api/v1/agents/${agentId}`);
    await write('DELETE', `/api/v1/skills/${skillId}`);
    await write('DELETE', `/api/v1/artifact_types/${typeId}`);

    const userId = (await write('POST', '/api/v1/users', { email: 'audit@example.com' }, 201)).user.id;
    await write('PUT', `/api/v1/users/${userId}`, { role: 'admin' });
    const keyId = (await write('POST', '/api/v1/api_keys', { kind: 'personal', user_id: userId }, 201))
      .api_key.id;
    await write('DELETE', `/api/v1/api_keys/${keyId}`);
    await write('DELETE', `/api/v1/users/${userId}`);

    const modelId = (
      await write(
        'POST',
        '/api/v1/model_configurations',
        {
          name: 'M',
          provider: 'openai-compatible',
          model: 'm',
          base_url: 'http://127.0.0.1:9/v1',
          api_key: 'sk-super-secret-value',
        },
        201,
      )
    ).model_configuration.id;
    await write('PUT', `/api/v1/model_configurations/${modelId}`, { api_key: 'sk-another-secret' });
    await write('DELETE', `/api/v1/model_configurations/${modelId}`);

    const integrationId = (
      await write(
        'POST',
        '/api/v1/integrations',
        { name: 'I', url: 'https://tools.example.com/mcp', headers: { authorization: 'Bearer tool-secret' } },
        201,
      )
    ).integration.id;
    await write('PUT', `/api/v1/integrations/${integrationId}`, { enabled: false });
    await write('DELETE', `/api/v1/integrations/${integrationId}`);

    const webhookId = (
      await write(
        'POST',
        `/api/v1/projects/${projectId}/webhooks`,
        { url: 'https://hooks.example.com/in', events: ['artifact_generated'] },
        201,
      )
    ).webhook.id;
    await write('DELETE', `/api/v1/projects/${projectId}/webhooks/${webhookId}`);
    await write('DELETE', `/api/v1/projects/${projectId}`);

    const doc = await upload(t, org.orgKey, [
      ['use_default_group', 'true'],
      ['document', { filename: 'a.txt', content: 'hello' }],
    ]);
    expectStatus(doc, 201);
    await write('DELETE', `/api/v1/data_center/documents/${doc.body.document.id}`);

    const type = await createArtifactType(t, org, `audit-${randomBytes(3).toString('hex')}`);
    const [artifact] = await t.deps.database.db
      .insert(artifacts)
      .values({
        organizationId: org.organizationId,
        projectId: org.projectId,
        artifactTypeId: type.id,
        name: 'Draft',
        content: 'text',
        shareToken: randomBytes(12).toString('hex'),
      })
      .returning();
    const artifactUrl = `/api/v1/artifact_types/${type.slug}/artifacts/${artifact.id}`;
    await write('PUT', artifactUrl, { content: 'edited' });
    await write('DELETE', artifactUrl);

    const chat = await write('POST', '/api/v2/chats', { project_id: org.projectId }, 201);
    const chatId = chat.response.chat.id;
    const archived = await call(t, 'DELETE', `/api/v2/chats/${chatId}`, { key: org.orgKey });
    expect(archived.status, JSON.stringify(archived.body)).toBe(204);

    const expected: [string, string, number, string[]][] = [
      ['project.created', 'project', projectId, ['group_ids', 'name']],
      ['project.updated', 'project', projectId, ['overview']],
      ['project.archived', 'project', projectId, ['archived_at']],
      ['project.unarchived', 'project', projectId, ['archived_at']],
      ['project.deleted', 'project', projectId, []],
      ['group.created', 'group', groupId, ['name']],
      ['group.updated', 'group', groupId, ['description']],
      ['group.member_added', 'group', groupId, ['user_ids']],
      ['group.member_removed', 'group', groupId, ['user_ids']],
      ['group.deleted', 'group', groupId, []],
      ['category.created', 'category', categoryId, ['name', 'use_default_group']],
      ['category.updated', 'category', categoryId, ['name']],
      ['category.deleted', 'category', categoryId, []],
      ['artifact_type.created', 'artifact_type', typeId, ['name']],
      ['artifact_type.updated', 'artifact_type', typeId, ['description']],
      ['artifact_type.deleted', 'artifact_type', typeId, []],
      ['skill.created', 'skill', skillId, ['artifact_type_ids', 'content', 'name']],
      ['skill.updated', 'skill', skillId, ['content']],
      ['skill.deleted', 'skill', skillId, []],
      ['agent.created', 'agent', agentId, ['instructions', 'name']],
      ['agent.updated', 'agent', agentId, ['skill_ids']],
      ['agent.deleted', 'agent', agentId, []],
      ['user.created', 'user', userId, ['email']],
      ['user.updated', 'user', userId, ['role']],
      ['user.deleted', 'user', userId, []],
      ['api_key.created', 'api_key', keyId, ['kind', 'user_id']],
      ['api_key.revoked', 'api_key', keyId, ['revoked_at']],
      [
        'model_configuration.created',
        'model_configuration',
        modelId,
        ['api_key', 'base_url', 'model', 'name', 'provider'],
      ],
      ['model_configuration.updated', 'model_configuration', modelId, ['api_key']],
      ['model_configuration.deleted', 'model_configuration', modelId, []],
      ['integration.created', 'integration', integrationId, ['headers', 'name', 'url']],
      ['integration.updated', 'integration', integrationId, ['enabled']],
      ['integration.deleted', 'integration', integrationId, []],
      ['webhook.created', 'webhook', webhookId, ['events', 'secret', 'url']],
      ['webhook.deleted', 'webhook', webhookId, []],
      ['document.created', 'document', doc.body.document.id, ['file']],
      ['document.deleted', 'document', doc.body.document.id, []],
      ['artifact.updated', 'artifact', artifact.id, ['content']],
      ['artifact.deleted', 'artifact', artifact.id, []],
      ['chat.archived', 'chat', chatId, ['archived_at']],
    ];
    for (const [action, type, id, fields] of expected) {
      const record = await latest(action);
      expect(record, action).toMatchObject({
        organization_id: org.organizationId,
        resource: { type, id },
        changed_fields: fields,
        actor: { api_key_id: orgKeyId, kind: 'organization', user_id: null },
      });
    }

    // Field names only: no secret value is stored anywhere in the organization's records.
    const rows = await t.deps.database.db
      .select()
      .from(auditEvents)
      .where(eq(auditEvents.organizationId, org.organizationId));
    const stored = JSON.stringify(rows);
    for (const secret of ['sk-super-secret-value', 'sk-another-secret', 'tool-secret', 'whsec_'])
      expect(stored).not.toContain(secret);
  });

  it('records super admin writes (create, rename, credits, deactivation) in the organization they change', async () => {
    const created = await write(
      'POST',
      '/api/v1/admin/organizations',
      { organization: { name: 'Audit Co' }, user: { email: 'boss@example.com' } },
      201,
      superKey(),
    );
    const orgId = created.organization.id;
    await write('PUT', `/api/v1/admin/organizations/${orgId}`, { name: 'Audit Co 2' }, 200, superKey());
    await write('POST', `/api/v1/admin/organizations/${orgId}/credits`, { amount: 5 }, 200, superKey());
    // The organization's own admins see what a super admin did to it.
    expect(await latest('organization.credits_added', created.key)).toMatchObject({
      organization_id: orgId,
      actor: { kind: 'super_admin' },
    });
    await write('DELETE', `/api/v1/admin/organizations/${orgId}`, undefined, 200, superKey());

    const page = await list(superKey(), `?organization_id=${orgId}`, '/api/v1/admin');
    expect(page.audit_events.map((e) => [e.action, e.changed_fields])).toEqual([
      ['organization.deactivated', ['active']],
      ['organization.credits_added', ['credit_balance']],
      ['organization.updated', ['name']],
      ['organization.created', ['name', 'user']],
    ]);
    for (const e of page.audit_events) {
      expect(e.resource).toEqual({ type: 'organization', id: orgId });
      expect(e.actor).toEqual({ api_key_id: expect.any(Number), kind: 'super_admin', user_id: null });
    }
  });

  it('a write that fails leaves no record (same transaction)', async () => {
    const before = (await list(org.orgKey, '?action=group.deleted')).pagination.total_count;
    expectV1Error(
      await call(t, 'DELETE', `/api/v1/groups/${org.defaultGroupId}`, { key: org.orgKey }),
      422,
      'default_group',
    );
    expect((await list(org.orgKey, '?action=group.deleted')).pagination.total_count).toBe(before);
  });

  it('keeps organizations apart; super admins see all and filter by organization', async () => {
    await write('POST', '/api/v1/categories', { name: 'Theirs', use_default_group: true }, 201, other.orgKey);
    const mine = await list(org.orgKey, '?page_size=100');
    expect(mine.audit_events.length).toBeGreaterThan(0);
    expect(mine.audit_events.every((e) => e.organization_id === org.organizationId)).toBe(true);
    const theirs = await list(other.orgKey, '?page_size=100');
    expect(theirs.audit_events.every((e) => e.organization_id === other.organizationId)).toBe(true);
    expect(theirs.audit_events.filter((e) => e.resource.type === 'category').map((e) => e.action)).toEqual([
      'category.created',
    ]);

    const all = await list(superKey(), '?resource_type=category&page_size=100', '/api/v1/admin');
    const orgs = new Set(all.audit_events.map((e) => e.organization_id));
    expect(orgs.has(org.organizationId) && orgs.has(other.organizationId)).toBe(true);
    const one = await list(superKey(), `?organization_id=${other.organizationId}`, '/api/v1/admin');
    expect(new Set(one.audit_events.map((e) => e.organization_id))).toEqual(new Set([other.organizationId]));

    // Issue 19: GET /api/v1/audit_events itself is open to super admins, for all organizations.
    const allHere = await list(superKey(), '?resource_type=category&page_size=100');
    expect(allHere).toEqual(all);
    const oneHere = await list(superKey(), `?organization_id=${other.organizationId}`);
    expect(oneHere).toEqual(one);
    // An organization's key may name its own organization, not another.
    expect(await list(org.orgKey, `?organization_id=${org.organizationId}&page_size=100`)).toEqual(mine);
    expectV1Error(
      await call(t, 'GET', `/api/v1/audit_events?organization_id=${other.organizationId}`, {
        key: org.orgKey,
      }),
      403,
      'forbidden',
    );
  });

  it('filters by action, resource type, actor key and time, and paginates newest first', async () => {
    const admin = await write('POST', '/api/v1/groups', { name: 'By admin' }, 201, org.adminKey);
    const byAdmin = await list(org.orgKey, `?action=group.created`);
    expect(byAdmin.audit_events[0].resource.id).toBe(admin.group.id);
    expect(byAdmin.audit_events[0].actor).toMatchObject({ kind: 'personal', user_id: org.adminUserId });
    const adminKeyId = byAdmin.audit_events[0].actor.api_key_id;

    const ofKey = await list(org.orgKey, `?actor_api_key_id=${adminKeyId}`);
    expect(ofKey.audit_events.length).toBeGreaterThan(0);
    expect(ofKey.audit_events.every((e) => e.actor.api_key_id === adminKeyId)).toBe(true);
    const groupsOnly = await list(org.orgKey, '?resource_type=group&page_size=100');
    expect(groupsOnly.audit_events.every((e) => e.resource.type === 'group')).toBe(true);

    const newest = byAdmin.audit_events[0].occurred_at;
    const after = await list(org.orgKey, `?from=${encodeURIComponent(newest)}&action=group.created`);
    expect(after.audit_events.map((e) => e.id)).toEqual([byAdmin.audit_events[0].id]);
    const before = await list(org.orgKey, `?to=${encodeURIComponent(newest)}&action=group.created`);
    expect(before.audit_events.map((e) => e.id)).not.toContain(byAdmin.audit_events[0].id);

    const p1 = await list(org.orgKey, '?page=1&page_size=2');
    const p2 = await list(org.orgKey, '?page=2&page_size=2');
    expect(p1.pagination.total_count).toBeGreaterThan(4);
    expect(p1.audit_events[0].id).toBeGreaterThan(p1.audit_events[1].id);
    expect(p1.audit_events[1].id).toBeGreaterThan(p2.audit_events[0].id);
  });

  it('is for admins: members 403, organization keys 403 on the super admin list; bad filters 400', async () => {
    const member = await createMember(t, org);
    const refused = await call(t, 'GET', '/api/v1/audit_events', { key: member.key });
    expectV1Error(refused, 403, 'forbidden');
    expect(refused.body.error.message).toContain('may not read the audit log');
    expectV1Error(await call(t, 'GET', '/api/v1/admin/audit_events', { key: org.orgKey }), 403, 'forbidden');
    expectV1Error(await call(t, 'GET', '/api/v1/admin/audit_events'), 401);
    for (const query of [
      '?page_size=101',
      '?from=yesterday',
      '?resource_type=spaceship',
      '?actor_api_key_id=0',
      '?from=2030-01-01T00:00:00Z&to=2020-01-01T00:00:00Z',
    ]) {
      expectV1Error(await call(t, 'GET', `/api/v1/audit_events${query}`, { key: org.orgKey }), 400);
    }
  });
});
