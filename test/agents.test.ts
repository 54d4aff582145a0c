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
  { method: 'GET', url: '/api/v1/agents' },
  { method: 'POST', url: '/api/v1/agents', body: { name: 'A', instructions: 'Be brief' }, write: true },
  { method: 'GET', url: '/api/v1/agents/999999' },
  { method: 'PUT', url: '/api/v1/agents/999999', body: { name: 'x' }, write: true },
  { method: 'DELETE', url: '/api/v1/agents/999999', write: true },
]);

describe('agents', () => {
  let t: TestApp;
  let org: TestOrg;
  let other: TestOrg;
  let skillId: number;
  beforeAll(async () => {
    t = await buildTestApp();
    org = await createOrg(t);
    other = await createOrg(t);
    const type = await call(t, 'POST', '/api/v1/artifact_types', { key: org.orgKey, body: { name: 'Memo' } });
    const skill = await call(t, 'POST', '/api/v1/skills', {
      key: org.orgKey,
      body: { name: 'Summarise', content: 'Summarise', artifact_type_ids: [type.body.artifact_type.id] },
    });
    expectStatus(skill, 201);
    skillId = skill.body.skill.id;
  });
  afterAll(() => t.close());

  const post = (body: Record<string, unknown>, o = org) =>
    call(t, 'POST', '/api/v1/agents', { key: o.orgKey, body });
  const createGroup = async (o: TestOrg, name: string) =>
    (await call(t, 'POST', '/api/v1/groups', { key: o.orgKey, body: { name } })).body.group.id as number;

  it('creates an agent with every tool by default and reads it back', async () => {
    const res = await post({ name: 'Helper', instructions: 'Answer in French' });
    expectStatus(res, 201);
    expect(res.body).toEqual({
      agent: {
        id: expect.any(Number),
        name: 'Helper',
        instructions: 'Answer in French',
        model_configuration_id: null,
        skill_ids: [],
        group_ids: [],
        tools: ['knowledge', 'artifacts', 'skills', 'integrations'],
        tools_requiring_approval: [],
        created_at: expect.stringMatching(TIMESTAMP),
        updated_at: expect.stringMatching(TIMESTAMP),
      },
    });
    const read = await call(t, 'GET', `/api/v1/agents/${res.body.agent.id}`, { key: org.adminKey });
    expect(read.body).toEqual(res.body);
  });

  it('pins a model, links skills and groups, and limits tools', async () => {
    const group = await createGroup(org, 'Support');
    const res = await post({
      name: 'Support bot',
      instructions: 'Be kind',
      model_configuration_id: org.modelConfigurationId,
      skill_ids: [skillId, skillId],
      group_ids: [group],
      tools: ['skills', 'knowledge', 'skills'],
    });
    expectStatus(res, 201);
    expect(res.body.agent).toMatchObject({
      model_configuration_id: org.modelConfigurationId,
      skill_ids: [skillId],
      group_ids: [group],
      tools: ['knowledge', 'skills'],
    });
    const none = await post({ name: 'No tools', instructions: 'x', tools: [] });
    expect(none.body.agent.tools).toEqual([]);
  });

  it('refuses references outside the organization and unknown tools (422 naming each field)', async () => {
    const theirGroup = await createGroup(other, 'Theirs');
    const theirType = await call(t, 'POST', '/api/v1/artifact_types', {
      key: other.orgKey,
      body: { name: 'T' },
    });
    const theirSkill = await call(t, 'POST', '/api/v1/skills', {
      key: other.orgKey,
      body: { name: 'S', content: 'x', artifact_type_ids: [theirType.body.artifact_type.id] },
    });
    const cases: [Record<string, unknown>, string][] = [
      [{ model_configuration_id: other.modelConfigurationId }, 'model_configuration_id'],
      [{ model_configuration_id: 999999 }, 'model_configuration_id'],
      [{ skill_ids: [theirSkill.body.skill.id] }, 'skill_ids'],
      [{ group_ids: [theirGroup] }, 'group_ids'],
      [{ tools: ['knowledge', 'shell'] }, 'tools'],
    ];
    for (const [extra, field] of cases) {
      const res = await post({ name: 'Bad', instructions: 'x', ...extra });
      expectV1Error(res, 422);
      expect({ extra, fields: Object.keys(res.body.error.details) }).toEqual({ extra, fields: [field] });
    }
    const embedding = await call(t, 'POST', '/api/v1/model_configurations', {
      key: org.orgKey,
      body: { name: 'E', provider: 'openai', model: 'embed', purpose: 'embedding' },
    });
    const res = await post({
      name: 'Bad',
      instructions: 'x',
      model_configuration_id: embedding.body.model_configuration.id,
    });
    expectV1Error(res, 422);
    expect(Object.keys(res.body.error.details)).toEqual(['model_configuration_id']);
    const list = await call(t, 'GET', '/api/v1/agents?page_size=100', { key: org.orgKey });
    expect(list.body.agents.map((a: any) => a.name)).not.toContain('Bad');
  });

  it('validates body shapes', async () => {
    const missing = await post({ name: 'No instructions' });
    expectV1Error(missing, 422);
    expect(missing.body.error.details).toEqual({ instructions: ['is required'] });
    expectV1Error(await post({ name: 'X', instructions: 'x', tools: 'knowledge' }), 400);
    expectV1Error(await post({ name: 'X', instructions: 'x', skill_ids: ['1'] }), 400);
  });

  it('replaces links on PUT and unpins the model with null', async () => {
    const group = await createGroup(org, 'Ops');
    const created = await post({
      name: 'Editable',
      instructions: 'v1',
      model_configuration_id: org.modelConfigurationId,
      skill_ids: [skillId],
      group_ids: [group],
    });
    const url = `/api/v1/agents/${created.body.agent.id}`;
    const renamed = await call(t, 'PUT', url, { key: org.orgKey, body: { instructions: 'v2' } });
    expect(renamed.body.agent).toMatchObject({
      instructions: 'v2',
      skill_ids: [skillId],
      group_ids: [group],
    });
    const replaced = await call(t, 'PUT', url, {
      key: org.orgKey,
      body: { skill_ids: [], group_ids: [], tools: ['artifacts'], model_configuration_id: null },
    });
    expectStatus(replaced, 200);
    expect(replaced.body.agent).toMatchObject({
      name: 'Editable',
      skill_ids: [],
      group_ids: [],
      tools: ['artifacts'],
      model_configuration_id: null,
    });
  });

  it('shows members agents without groups and those sharing a group with them', async () => {
    const own = await createOrg(t);
    const secret = await createGroup(own, 'Secret');
    const open = await post({ name: 'Open', instructions: 'x' }, own);
    const everyone = await post(
      { name: 'Everyone', instructions: 'x', group_ids: [own.defaultGroupId] },
      own,
    );
    const closed = await post({ name: 'Closed', instructions: 'x', group_ids: [secret] }, own);
    const member = await createMember(t, own);

    const list = await call(t, 'GET', '/api/v1/agents', { key: member.key });
    expect(list.body.agents.map((a: any) => a.name)).toEqual(['Open', 'Everyone']);
    expectStatus(await call(t, 'GET', `/api/v1/agents/${open.body.agent.id}`, { key: member.key }), 200);
    expectStatus(await call(t, 'GET', `/api/v1/agents/${everyone.body.agent.id}`, { key: member.key }), 200);
    expectV1Error(
      await call(t, 'GET', `/api/v1/agents/${closed.body.agent.id}`, { key: member.key }),
      404,
      'agent_not_found',
    );
    await call(t, 'POST', `/api/v1/groups/${secret}/members`, {
      key: own.orgKey,
      body: { user_id: member.userId },
    });
    const now = await call(t, 'GET', '/api/v1/agents', { key: member.key });
    expect(now.body.agents.map((a: any) => a.name)).toEqual(['Open', 'Everyone', 'Closed']);
    expectV1Error(
      await call(t, 'PUT', `/api/v1/agents/${closed.body.agent.id}`, {
        key: member.key,
        body: { name: 'x' },
      }),
      403,
    );
    const admin = await call(t, 'GET', '/api/v1/agents', { key: own.adminKey });
    expect(admin.body.pagination.total_count).toBe(3);
  });

  it('keeps the last group of an agent: deleting it is refused', async () => {
    const own = await createOrg(t);
    const solo = await createGroup(own, 'Solo');
    const agent = await post({ name: 'Restricted', instructions: 'x', group_ids: [solo] }, own);
    const refused = await call(t, 'DELETE', `/api/v1/groups/${solo}`, { key: own.orgKey });
    expectV1Error(refused, 422, 'last_group');
    expect(refused.body.error.details).toEqual({
      agents: [expect.stringContaining(`"Restricted" (id ${agent.body.agent.id})`)],
    });
  });

  it('deletes softly and drops deleted skills and model pins', async () => {
    const own = await createOrg(t);
    const type = await call(t, 'POST', '/api/v1/artifact_types', { key: own.orgKey, body: { name: 'T' } });
    const skill = await call(t, 'POST', '/api/v1/skills', {
      key: own.orgKey,
      body: { name: 'S', content: 'x', artifact_type_ids: [type.body.artifact_type.id] },
    });
    const model = await call(t, 'POST', '/api/v1/model_configurations', {
      key: own.orgKey,
      body: { name: 'Other', provider: 'builtin' },
    });
    const agent = await post(
      {
        name: 'A',
        instructions: 'x',
        skill_ids: [skill.body.skill.id],
        model_configuration_id: model.body.model_configuration.id,
      },
      own,
    );
    const url = `/api/v1/agents/${agent.body.agent.id}`;
    await call(t, 'DELETE', `/api/v1/skills/${skill.body.skill.id}`, { key: own.orgKey });
    await call(t, 'DELETE', `/api/v1/model_configurations/${model.body.model_configuration.id}`, {
      key: own.orgKey,
    });
    const read = await call(t, 'GET', url, { key: own.orgKey });
    expect(read.body.agent).toMatchObject({ skill_ids: [], model_configuration_id: null });

    const deleted = await call(t, 'DELETE', url, { key: own.orgKey });
    expectStatus(deleted, 200);
    expect(deleted.body).toEqual({ message: expect.any(String) });
    expectV1Error(await call(t, 'GET', url, { key: own.orgKey }), 404, 'agent_not_found');
    expectV1Error(await call(t, 'DELETE', url, { key: own.orgKey }), 404);
  });

  it('answers 404 for agents of another organization', async () => {
    const theirs = await post({ name: 'Theirs', instructions: 'x' }, other);
    for (const [method, body] of [['GET'], ['PUT', { name: 'Mine' }], ['DELETE']] as const) {
      expectV1Error(
        await call(t, method, `/api/v1/agents/${theirs.body.agent.id}`, { key: org.orgKey, body }),
        404,
        'agent_not_found',
      );
    }
  });
});
