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
  { method: 'GET', url: '/api/v1/skills' },
  {
    method: 'POST',
    url: '/api/v1/skills',
    body: { name: 'S', content: 'Write', artifact_type_ids: [1] },
    write: true,
  },
  { method: 'GET', url: '/api/v1/skills/999999' },
  { method: 'PUT', url: '/api/v1/skills/999999', body: { name: 'x' }, write: true },
  { method: 'DELETE', url: '/api/v1/skills/999999', write: true },
  { method: 'GET', url: '/api/v1/artifact_types/memo/skills' },
  { method: 'GET', url: '/api/v1/artifact_types/memo/prompt_templates' },
]);

describe('skills', () => {
  let t: TestApp;
  let org: TestOrg;
  let other: TestOrg;
  let memo: { id: number; slug: string };
  let report: { id: number; slug: string };
  beforeAll(async () => {
    t = await buildTestApp();
    org = await createOrg(t);
    other = await createOrg(t);
    memo = await createType(org, 'Memo');
    report = await createType(org, 'Report');
  });
  afterAll(() => t.close());

  async function createType(o: TestOrg, name: string) {
    const res = await call(t, 'POST', '/api/v1/artifact_types', { key: o.orgKey, body: { name } });
    expectStatus(res, 201);
    return res.body.artifact_type as { id: number; slug: string };
  }
  const post = (body: Record<string, unknown>, o = org) =>
    call(t, 'POST', '/api/v1/skills', { key: o.orgKey, body });
  const create = async (body: Record<string, unknown>, o = org) => {
    const res = await post(body, o);
    expectStatus(res, 201);
    return res.body.skill;
  };

  it('creates a skill with variables, a slash command and artifact types', async () => {
    const res = await post({
      name: 'Weekly Summary',
      description: 'Summarise the week',
      content: 'Summarise {custom.topic} for {custom.audience}. Again: {custom.topic}.',
      custom_variables: [
        { name: 'topic', description: 'What about', type: 'text' },
        { name: 'audience', description: 'Who reads it' },
      ],
      artifact_type_ids: [report.id, memo.id],
    });
    expectStatus(res, 201);
    expect(res.body).toEqual({
      skill: {
        id: expect.any(Number),
        name: 'Weekly Summary',
        description: 'Summarise the week',
        content: 'Summarise {custom.topic} for {custom.audience}. Again: {custom.topic}.',
        custom_variables: [
          { name: 'topic', description: 'What about', type: 'text' },
          { name: 'audience', description: 'Who reads it', type: 'text' },
        ],
        slash_command: '/weekly-summary',
        artifact_type_ids: [memo.id, report.id].sort((a, b) => a - b),
        created_at: expect.stringMatching(TIMESTAMP),
        updated_at: expect.stringMatching(TIMESTAMP),
      },
    });
    const read = await call(t, 'GET', `/api/v1/skills/${res.body.skill.id}`, { key: org.adminKey });
    expect(read.body).toEqual(res.body);
  });

  it('refuses a placeholder without a variable (422 naming content)', async () => {
    const res = await post({
      name: 'Broken',
      content: 'Write about {custom.topic} in {custom.tone}',
      custom_variables: [{ name: 'topic' }],
      artifact_type_ids: [memo.id],
    });
    expectV1Error(res, 422, 'validation_failed');
    expect(res.body.error.details).toEqual({ content: [expect.stringContaining('{custom.tone}')] });
    const none = await post({ name: 'Broken', content: 'Hi {custom.name}', artifact_type_ids: [memo.id] });
    expectV1Error(none, 422);
    expect(Object.keys(none.body.error.details)).toEqual(['content']);
  });

  it('refuses duplicate and malformed variable names', async () => {
    const dup = await post({
      name: 'Dup',
      content: '{custom.a}',
      custom_variables: [{ name: 'a' }, { name: 'a' }],
      artifact_type_ids: [memo.id],
    });
    expectV1Error(dup, 422);
    expect(Object.keys(dup.body.error.details)).toEqual(['custom_variables']);
    const spaced = await post({
      name: 'Spaced',
      content: 'x',
      custom_variables: [{ name: 'two words' }],
      artifact_type_ids: [memo.id],
    });
    expectV1Error(spaced, 422);
    expect(Object.keys(spaced.body.error.details)).toEqual(['custom_variables.0.name']);
    expectV1Error(
      await post({ name: 'T', content: 'x', custom_variables: 'a', artifact_type_ids: [memo.id] }),
      400,
    );
  });

  it('allows a variable that the content does not use', async () => {
    const skill = await create({
      name: 'Spare variable',
      content: 'Plain prompt',
      custom_variables: [{ name: 'unused', type: 'textarea' }],
      artifact_type_ids: [memo.id],
    });
    expect(skill.custom_variables).toEqual([{ name: 'unused', description: '', type: 'textarea' }]);
  });

  it('requires at least one artifact type of the organization', async () => {
    const missing = await post({ name: 'No type', content: 'x' });
    expectV1Error(missing, 422);
    expect(missing.body.error.details).toEqual({ artifact_type_ids: ['is required'] });
    const empty = await post({ name: 'No type', content: 'x', artifact_type_ids: [] });
    expectV1Error(empty, 422);
    expect(Object.keys(empty.body.error.details)).toEqual(['artifact_type_ids']);
    const theirs = await createType(other, 'Theirs');
    const foreign = await post({ name: 'Foreign', content: 'x', artifact_type_ids: [theirs.id] });
    expectV1Error(foreign, 422);
    expect(foreign.body.error.details.artifact_type_ids[0]).toContain(String(theirs.id));
  });

  it('keeps slash commands unique per organization and stable across renames', async () => {
    const own = await createOrg(t);
    const type = await createType(own, 'Note');
    const body = { content: 'x', artifact_type_ids: [type.id] };
    const first = await create({ name: 'Draft Email', ...body }, own);
    const second = await create({ name: 'draft email', ...body }, own);
    expect([first.slash_command, second.slash_command]).toEqual(['/draft-email', '/draft-email-2']);

    const renamed = await call(t, 'PUT', `/api/v1/skills/${first.id}`, {
      key: own.orgKey,
      body: { name: 'Polite Email' },
    });
    expectStatus(renamed, 200);
    expect(renamed.body.skill).toMatchObject({ name: 'Polite Email', slash_command: '/draft-email' });

    const elsewhere = await create({ name: 'Draft Email', content: 'x', artifact_type_ids: [memo.id] });
    expect(elsewhere.slash_command).toBe('/draft-email');
  });

  it('checks content and variables together on PUT, and replaces artifact types', async () => {
    const skill = await create({
      name: 'Editable',
      content: 'About {custom.topic}',
      custom_variables: [{ name: 'topic' }],
      artifact_type_ids: [memo.id],
    });
    const url = `/api/v1/skills/${skill.id}`;
    const newPlaceholder = await call(t, 'PUT', url, {
      key: org.orgKey,
      body: { content: 'About {custom.topic} by {custom.author}' },
    });
    expectV1Error(newPlaceholder, 422);
    expect(newPlaceholder.body.error.details.content[0]).toContain('author');
    const dropVariable = await call(t, 'PUT', url, { key: org.orgKey, body: { custom_variables: [] } });
    expectV1Error(dropVariable, 422);

    const ok = await call(t, 'PUT', url, {
      key: org.orgKey,
      body: {
        content: 'About {custom.topic} by {custom.author}',
        custom_variables: [{ name: 'topic' }, { name: 'author', description: 'Who' }],
        artifact_type_ids: [report.id],
        description: 'Now with authors',
      },
    });
    expectStatus(ok, 200);
    expect(ok.body.skill).toMatchObject({
      content: 'About {custom.topic} by {custom.author}',
      description: 'Now with authors',
      artifact_type_ids: [report.id],
      custom_variables: [
        { name: 'topic', description: '', type: 'text' },
        { name: 'author', description: 'Who', type: 'text' },
      ],
    });
    const emptyTypes = await call(t, 'PUT', url, { key: org.orgKey, body: { artifact_type_ids: [] } });
    expectV1Error(emptyTypes, 422);
  });

  it('lists the skills of an artifact type by slug, also under the deprecated prompt_templates path', async () => {
    const own = await createOrg(t);
    const letter = await createType(own, 'Cover Letter');
    const cv = await createType(own, 'CV');
    const a = await create(
      {
        name: 'Formal',
        content: 'Write for {custom.company}',
        description: 'Formal tone',
        custom_variables: [{ name: 'company', description: 'Employer', type: 'text' }],
        artifact_type_ids: [letter.id],
      },
      own,
    );
    await create({ name: 'CV only', content: 'x', artifact_type_ids: [cv.id] }, own);
    const both = await create({ name: 'Both', content: 'y', artifact_type_ids: [letter.id, cv.id] }, own);

    const res = await call(t, 'GET', '/api/v1/artifact_types/cover-letter/skills', { key: own.adminKey });
    expectStatus(res, 200);
    expect(res.body.skills.map((s: any) => s.id)).toEqual([a.id, both.id]);
    expect(res.body.skills[0]).toMatchObject({
      id: a.id,
      name: 'Formal',
      content: 'Write for {custom.company}',
      description: 'Formal tone',
      custom_variables: [{ name: 'company', description: 'Employer', type: 'text' }],
    });
    expect(res.body.pagination).toMatchObject({ total_count: 2 });

    const deprecated = await call(t, 'GET', '/api/v1/artifact_types/cover-letter/prompt_templates', {
      key: own.adminKey,
    });
    expectStatus(deprecated, 200);
    expect(deprecated.body).toEqual(res.body);

    expectV1Error(
      await call(t, 'GET', '/api/v1/artifact_types/no-such-type/skills', { key: own.orgKey }),
      404,
      'artifact_type_not_found',
    );
    expectV1Error(
      await call(t, 'GET', '/api/v1/artifact_types/cover-letter/prompt_templates', { key: other.orgKey }),
      404,
    );
  });

  it('deletes softly: gone everywhere, and the slash command becomes free', async () => {
    const own = await createOrg(t);
    const type = await createType(own, 'Post');
    const skill = await create({ name: 'Tweet', content: 'x', artifact_type_ids: [type.id] }, own);
    const res = await call(t, 'DELETE', `/api/v1/skills/${skill.id}`, { key: own.orgKey });
    expectStatus(res, 200);
    expect(res.body).toEqual({ message: expect.any(String) });
    expectV1Error(
      await call(t, 'GET', `/api/v1/skills/${skill.id}`, { key: own.orgKey }),
      404,
      'skill_not_found',
    );
    const list = await call(t, 'GET', '/api/v1/skills', { key: own.orgKey });
    expect(list.body.skills).toEqual([]);
    const ofType = await call(t, 'GET', '/api/v1/artifact_types/post/skills', { key: own.orgKey });
    expect(ofType.body.skills).toEqual([]);
    const again = await create({ name: 'Tweet', content: 'x', artifact_type_ids: [type.id] }, own);
    expect(again.slash_command).toBe('/tweet');
  });

  it('drops a deleted artifact type from its skills', async () => {
    const own = await createOrg(t);
    const keep = await createType(own, 'Keep');
    const drop = await createType(own, 'Drop');
    const skill = await create({ name: 'S', content: 'x', artifact_type_ids: [keep.id, drop.id] }, own);
    await call(t, 'DELETE', `/api/v1/artifact_types/${drop.id}`, { key: own.orgKey });
    const read = await call(t, 'GET', `/api/v1/skills/${skill.id}`, { key: own.orgKey });
    expect(read.body.skill.artifact_type_ids).toEqual([keep.id]);
  });

  it('answers 404 for skills of another organization and lets members only read', async () => {
    const theirType = await createType(other, 'Their type');
    const theirs = await create({ name: 'Theirs', content: 'x', artifact_type_ids: [theirType.id] }, other);
    for (const [method, body] of [['GET'], ['PUT', { name: 'Mine' }], ['DELETE']] as const) {
      expectV1Error(
        await call(t, method, `/api/v1/skills/${theirs.id}`, { key: org.orgKey, body }),
        404,
        'skill_not_found',
      );
    }
    const member = await createMember(t, org);
    expectStatus(await call(t, 'GET', '/api/v1/skills', { key: member.key }), 200);
    expectStatus(
      await call(t, 'GET', `/api/v1/artifact_types/${memo.slug}/skills`, { key: member.key }),
      200,
    );
    expectV1Error(
      await call(t, 'POST', '/api/v1/skills', {
        key: member.key,
        body: { name: 'N', content: 'x', artifact_type_ids: [memo.id] },
      }),
      403,
    );
  });
});
