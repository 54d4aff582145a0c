import { and, eq } from 'drizzle-orm';
import { afterAll, beforeAll, beforeEach, describe, expect, it, onTestFinished } from 'vitest';
import {
  artifacts,
  artifactTypes,
  creditLedger,
  modelConfigurations,
  projects,
  webhookEvents,
} from '../src/db/schema/index.js';
import { toolFamilies } from '../src/llm/tools/index.js';
import {
  balanceOf,
  createArtifactType,
  createSkill,
  postStream,
  setBalance,
  useFakeModel,
} from './artifacts-fixtures.js';
import {
  call,
  createMember,
  createOrg,
  expectStatus,
  expectV1Error,
  startTestServer,
  type TestApp,
  type TestOrg,
  TIMESTAMP,
} from './helpers/app.js';
import { describeAuthMatrix } from './helpers/auth-matrix.js';
import { type FakeModelServer, startFakeModelServer } from './helpers/fake-model-server.js';

const PUBLIC_BASE_URL = 'https://scriptorium.example.com';
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

describeAuthMatrix('v1', [
  {
    method: 'POST',
    url: (o) => `/api/v1/artifact_types/memo/artifacts?project_id=${o.projectId}`,
    body: { skill_id: 1, inputs: [] },
  },
  {
    method: 'POST',
    url: (o) => `/api/v1/artifact_types/memo/artifacts/stream?project_id=${o.projectId}`,
    body: { skill_id: 1, inputs: [] },
  },
  {
    method: 'POST',
    url: '/api/v1/artifact_types/memo/artifacts/1/refine',
    body: { refine_prompt: 'shorter' },
  },
  {
    method: 'POST',
    url: '/api/v1/artifact_types/memo/artifacts/1/refine_stream',
    body: { refine_prompt: 'shorter' },
  },
  { method: 'GET', url: '/api/v1/artifact_types/memo/artifacts/1' },
  { method: 'PUT', url: '/api/v1/artifact_types/memo/artifacts/1', body: { notes: 'x' } },
  { method: 'DELETE', url: '/api/v1/artifact_types/memo/artifacts/1' },
]);

describe('artifacts', () => {
  let t: TestApp;
  let fake: FakeModelServer;
  let org: TestOrg;
  let memoSlug: string;
  let reportSlug: string;
  /** A memo skill with two variables. */
  let skillId: number;
  /** A memo skill without variables. */
  let plainSkillId: number;
  /** A skill of the report type only. */
  let reportSkillId: number;

  const generateUrl = (slug = memoSlug, projectId: number | string = org.projectId) =>
    `/api/v1/artifact_types/${slug}/artifacts?project_id=${projectId}`;
  const artifactUrl = (id: number, slug = memoSlug) => `/api/v1/artifact_types/${slug}/artifacts/${id}`;
  const memoInputs = [
    { name: 'topic', value: 'the quarterly offsite' },
    { name: 'audience', value: 'the sales team' },
  ];

  async function generate(body: Record<string, unknown> = {}, key = org.orgKey) {
    return call(t, 'POST', generateUrl(), { key, body: { skill_id: skillId, inputs: memoInputs, ...body } });
  }

  async function artifactCount(organizationId = org.organizationId) {
    const rows = await t.deps.database.db
      .select({ id: artifacts.id })
      .from(artifacts)
      .where(eq(artifacts.organizationId, organizationId));
    return rows.length;
  }

  beforeAll(async () => {
    fake = await startFakeModelServer();
    t = await startTestServer({ PUBLIC_BASE_URL });
    org = await createOrg(t);
    await t.deps.database.db
      .update(projects)
      .set({ name: 'Apollo', overview: 'A mission to the moon, run by a small team.' })
      .where(eq(projects.id, org.projectId));
    await useFakeModel(t, org, fake);
    const memo = await createArtifactType(t, org, 'memo', 'Memo');
    const report = await createArtifactType(t, org, 'report', 'Report');
    memoSlug = memo.slug;
    reportSlug = report.slug;
    skillId = (
      await createSkill(t, org, {
        name: 'Announcement',
        content: 'Write a memo about {custom.topic} for {custom.audience}. Mention {custom.topic} twice.',
        variables: ['topic', 'audience'],
        typeIds: [memo.id, report.id],
      })
    ).id;
    plainSkillId = (
      await createSkill(t, org, { name: 'Plain', content: 'Write a short memo.', typeIds: [memo.id] })
    ).id;
    reportSkillId = (
      await createSkill(t, org, { name: 'Findings', content: 'Write the findings.', typeIds: [report.id] })
    ).id;
  });
  afterAll(async () => {
    await t.close();
    await fake.close();
  });
  beforeEach(() => fake.reset());

  describe('blocking generation', () => {
    it('sends the skill with every placeholder filled and the project context to the model', async () => {
      fake.enqueue({ text: '# Offsite memo\n\nHello sales team.' });
      const res = await generate();
      expectStatus(res, 201);
      const [request] = fake.chatRequests();
      const messages = request.body.messages as { role: string; content: string }[];
      const user = messages.find((m) => m.role === 'user')!;
      expect(user.content).toBe(
        'Write a memo about the quarterly offsite for the sales team. Mention the quarterly offsite twice.',
      );
      expect(JSON.stringify(messages)).not.toContain('{custom.');
      const system = messages.find((m) => m.role === 'system')!.content;
      expect(system).toContain('Apollo');
      expect(system).toContain('A mission to the moon');
      expect(system).toContain('Memo');
    });

    it('answers 201 {artifact, url} with every field, named from the title the model wrote', async () => {
      fake.enqueue({
        text: '# Offsite plan\n\nWe meet on **Friday**.',
        usage: { prompt_tokens: 40, completion_tokens: 9 },
      });
      const res = await generate();
      expectStatus(res, 201);
      const { artifact, url } = res.body;
      expect(url).toBe(`${PUBLIC_BASE_URL}/share/artifacts/${artifact.share_token}`);
      expect(artifact).toEqual({
        id: expect.any(Number),
        name: 'Offsite plan',
        content: '# Offsite plan\n\nWe meet on **Friday**.',
        manually_edited: false,
        notes: null,
        share_token: expect.stringMatching(/^[A-Za-z0-9_-]{32}$/),
        chat_history: [
          { role: 'user', content: expect.stringContaining('the quarterly offsite') },
          { role: 'assistant', content: '# Offsite plan\n\nWe meet on **Friday**.' },
        ],
        url,
        project_id: org.projectId,
        artifact_type_slug: memoSlug,
        skill_id: skillId,
        chat_id: null,
        model_configuration_id: expect.any(Number),
        usage: { input_tokens: 40, output_tokens: 9, credits: 0 },
        created_at: expect.stringMatching(TIMESTAMP),
        updated_at: expect.stringMatching(TIMESTAMP),
      });
      expect(res.body.usage).toEqual({ input_tokens: 40, output_tokens: 9, credits: 0 });
    });

    it('uses the name given in the request', async () => {
      fake.enqueue({ text: '# Something else\n\nBody' });
      const res = await generate({ name: 'Board memo' });
      expectStatus(res, 201);
      expect(res.body.artifact.name).toBe('Board memo');
    });

    it('names an artifact without a heading from its first line', async () => {
      fake.enqueue({ text: 'A **short** note about lunch.\n\nMore text.' });
      const res = await generate();
      expect(res.body.artifact.name).toBe('A short note about lunch.');
    });

    it('accepts the deprecated prompt_template_id in place of skill_id', async () => {
      fake.enqueue({ text: '# Plain memo' });
      const res = await call(t, 'POST', generateUrl(), {
        key: org.orgKey,
        body: { prompt_template_id: plainSkillId, inputs: [] },
      });
      expectStatus(res, 201);
      expect(res.body.artifact.skill_id).toBe(plainSkillId);
      expect(fake.chatRequests()[0].body.messages.at(-1).content).toBe('Write a short memo.');
    });

    it('runs a skill made through the management API, found through the deprecated prompt_templates path', async () => {
      const type = await call(t, 'POST', '/api/v1/artifact_types', {
        key: org.orgKey,
        body: { name: 'Press Release' },
      });
      expectStatus(type, 201);
      const typeSlug = type.body.artifact_type.slug as string;
      const skill = await call(t, 'POST', '/api/v1/skills', {
        key: org.orgKey,
        body: {
          name: 'Release writer',
          content: 'Announce {custom.product}.',
          custom_variables: [{ name: 'product', description: 'What ships', type: 'string' }],
          artifact_type_ids: [type.body.artifact_type.id],
        },
      });
      expectStatus(skill, 201);
      const listed = await call(t, 'GET', `/api/v1/artifact_types/${typeSlug}/prompt_templates`, {
        key: org.orgKey,
      });
      expectStatus(listed, 200);
      const templateId = listed.body.skills[0].id as number;
      fake.enqueue({ text: '# Rocket ships' });
      const res = await call(t, 'POST', generateUrl(typeSlug), {
        key: org.orgKey,
        body: { prompt_template_id: templateId, inputs: [{ name: 'product', value: 'Rocket' }] },
      });
      expectStatus(res, 201);
      expect(res.body.artifact).toMatchObject({
        skill_id: templateId,
        artifact_type_slug: typeSlug,
        name: 'Rocket ships',
      });
      expect(fake.chatRequests()[0].body.messages.at(-1).content).toBe('Announce Rocket.');
    });

    it('uses the model configuration named in the request', async () => {
      const other = await startFakeModelServer();
      try {
        const [config] = await t.deps.database.db
          .insert(modelConfigurations)
          .values({
            organizationId: org.organizationId,
            name: 'Other',
            provider: 'openai-compatible',
            model: 'other-model',
            baseUrl: other.baseUrl,
          })
          .returning();
        other.enqueue({ text: '# From the other model' });
        const res = await generate({ model_configuration_id: config.id });
        expectStatus(res, 201);
        expect(res.body.artifact.content).toBe('# From the other model');
        expect(res.body.artifact.model_configuration_id).toBe(config.id);
        expect(other.chatRequests()[0].body.model).toBe('other-model');
        expect(fake.chatRequests()).toHaveLength(0);
      } finally {
        await other.close();
      }
    });

    it('records artifact_generated in the outbox with the spec 6.3 fields', async () => {
      fake.enqueue({ text: '# Event memo' });
      const res = await generate();
      expectStatus(res, 201);
      const id = res.body.artifact.id;
      const events = await t.deps.database.db
        .select()
        .from(webhookEvents)
        .where(
          and(eq(webhookEvents.projectId, org.projectId), eq(webhookEvents.eventName, 'artifact_generated')),
        );
      const event = events.find((e) => e.eventData.artifact_id === id)!;
      expect(event.eventData).toEqual({
        name: 'Event memo',
        artifact_id: id,
        artifact_type_slug: memoSlug,
        project_id: org.projectId,
        api_async_create_event_id: expect.stringMatching(UUID),
      });
    });

    it('charges the usage at the model configuration prices', async () => {
      const priced = await createOrg(t);
      await useFakeModel(t, priced, fake, { input: 10, output: 20 });
      const type = await createArtifactType(t, priced, 'priced');
      const skill = await createSkill(t, priced, { name: 'P', content: 'Go.', typeIds: [type.id] });
      const before = await balanceOf(t, priced);
      fake.enqueue({ text: '# Priced', usage: { prompt_tokens: 100, completion_tokens: 50 } });
      const res = await call(
        t,
        'POST',
        `/api/v1/artifact_types/priced/artifacts?project_id=${priced.projectId}`,
        {
          key: priced.orgKey,
          body: { skill_id: skill.id, inputs: [] },
        },
      );
      expectStatus(res, 201);
      // 100 * 10 / 1000 + 50 * 20 / 1000 = 2 credits
      expect(res.body.usage).toEqual({ input_tokens: 100, output_tokens: 50, credits: 2 });
      expect(await balanceOf(t, priced)).toBeCloseTo(before - 2, 6);
      const ledger = await t.deps.database.db
        .select()
        .from(creditLedger)
        .where(eq(creditLedger.reference, `artifact:${res.body.artifact.id}`));
      expect(ledger).toMatchObject([
        { kind: 'usage', amount: -2, projectId: priced.projectId, inputTokens: 100 },
      ]);
    });

    it('works with the built-in offline model and names the artifact sensibly', async () => {
      // Without documents to search: the offline model then answers with its plain notice.
      t.deps.toolFamilies = {};
      onTestFinished(() => {
        t.deps.toolFamilies = toolFamilies;
      });
      const offline = await createOrg(t);
      const type = await createArtifactType(t, offline, 'brief');
      const skill = await createSkill(t, offline, {
        name: 'Brief',
        content: 'Write a brief.',
        typeIds: [type.id],
      });
      const res = await call(
        t,
        'POST',
        `/api/v1/artifact_types/brief/artifacts?project_id=${offline.projectId}`,
        {
          key: offline.orgKey,
          body: { skill_id: skill.id, inputs: [] },
        },
      );
      expectStatus(res, 201);
      expect(res.body.artifact.content).toContain('built-in offline model');
      expect(res.body.artifact.name).toBe('No model provider configured');
    });

    it('answers 500 in the v1 body and saves nothing when the model fails', async () => {
      const before = await artifactCount();
      fake.setResponder(() => ({ status: 500 }));
      const res = await generate();
      expectV1Error(res, 500, 'generation_failed');
      expect(await artifactCount()).toBe(before);
    });
  });

  describe('request errors', () => {
    it('400 when project_id is missing or not an integer', async () => {
      const body = { skill_id: skillId, inputs: memoInputs };
      for (const url of [
        `/api/v1/artifact_types/${memoSlug}/artifacts`,
        generateUrl(memoSlug, 'abc'),
        generateUrl(memoSlug, '1.5'),
        generateUrl(memoSlug, '0'),
        `/api/v1/artifact_types/${memoSlug}/artifacts/stream`,
      ]) {
        const res = await call(t, 'POST', url, { key: org.orgKey, body });
        expectV1Error(res, 400);
        expect(res.body.error.details).toHaveProperty('project_id');
      }
    });

    it('400 when a field has the wrong type', async () => {
      expectV1Error(await generate({ inputs: 'topic=x' }), 400);
      expectV1Error(await generate({ skill_id: '1' }), 400);
      expectV1Error(await generate({ inputs: [{ name: 'topic', value: 3 }] }), 400);
    });

    it('422 naming each missing and unknown variable', async () => {
      const res = await generate({
        inputs: [
          { name: 'topic', value: 'x' },
          { name: 'mood', value: 'happy' },
        ],
      });
      expectV1Error(res, 422);
      expect(res.body.error.details).toEqual({
        'inputs.mood': ['is not a variable of this skill'],
        'inputs.audience': ['is required'],
      });
      const empty = await generate({ inputs: [] });
      expectV1Error(empty, 422);
      expect(Object.keys(empty.body.error.details).sort()).toEqual(['inputs.audience', 'inputs.topic']);
    });

    it('422 for a variable given to a skill that has none, and [] accepted when it has none', async () => {
      const res = await call(t, 'POST', generateUrl(), {
        key: org.orgKey,
        body: { skill_id: plainSkillId, inputs: [{ name: 'topic', value: 'x' }] },
      });
      expectV1Error(res, 422);
      expect(res.body.error.details).toEqual({ 'inputs.topic': ['is not a variable of this skill'] });
    });

    it('422 when inputs or the skill are missing', async () => {
      const noInputs = await call(t, 'POST', generateUrl(), { key: org.orgKey, body: { skill_id: skillId } });
      expectV1Error(noInputs, 422);
      expect(noInputs.body.error.details).toHaveProperty('inputs');
      const noSkill = await call(t, 'POST', generateUrl(), { key: org.orgKey, body: { inputs: [] } });
      expectV1Error(noSkill, 422);
      expect(noSkill.body.error.details).toHaveProperty('skill_id');
      const both = await generate({ prompt_template_id: plainSkillId });
      expectV1Error(both, 422);
    });

    it('404 for an unknown artifact type, a skill of another type, and an unknown model', async () => {
      expectV1Error(
        await call(t, 'POST', generateUrl('no-such-type'), {
          key: org.orgKey,
          body: { skill_id: skillId, inputs: memoInputs },
        }),
        404,
        'artifact_type_not_found',
      );
      expectV1Error(
        await call(t, 'POST', generateUrl(), {
          key: org.orgKey,
          body: { skill_id: reportSkillId, inputs: [] },
        }),
        404,
        'skill_not_found',
      );
      expectV1Error(await generate({ skill_id: 2147483000 }), 404, 'skill_not_found');
      expectV1Error(
        await generate({ model_configuration_id: 2147483000 }),
        404,
        'model_configuration_not_found',
      );
      // The same skill works for the other type it belongs to.
      fake.enqueue({ text: '# As a report' });
      expectStatus(
        await call(t, 'POST', generateUrl(reportSlug), {
          key: org.orgKey,
          body: { skill_id: skillId, inputs: memoInputs },
        }),
        201,
      );
    });

    it('422 for an embedding model configuration, on every generate and refine endpoint, before any model runs', async () => {
      const [embedding] = await t.deps.database.db
        .insert(modelConfigurations)
        .values({
          organizationId: org.organizationId,
          name: 'Embeddings',
          provider: 'openai-compatible',
          model: 'embed-model',
          baseUrl: fake.baseUrl,
          purpose: 'embedding',
        })
        .returning();
      const body = { skill_id: skillId, inputs: memoInputs, model_configuration_id: embedding.id };
      const before = await artifactCount();
      for (const url of [generateUrl(), generateUrl().replace('/artifacts?', '/artifacts/stream?')]) {
        const res = await call(t, 'POST', url, { key: org.orgKey, body });
        expectV1Error(res, 422, 'validation_failed');
        expect(res.body.error.details).toEqual({
          model_configuration_id: ['must be a model configuration with purpose chat'],
        });
      }
      expectV1Error(
        await call(t, 'POST', generateUrl(), { key: org.orgKey, body: { ...body, fire_and_forget: true } }),
        422,
        'validation_failed',
      );
      fake.enqueue({ text: '# Draft' });
      const made = await generate();
      expectStatus(made, 201);
      fake.reset();
      for (const suffix of ['refine', 'refine_stream']) {
        expectV1Error(
          await call(t, 'POST', `${artifactUrl(made.body.artifact.id)}/${suffix}`, {
            key: org.orgKey,
            body: { refine_prompt: 'Shorter', model_configuration_id: embedding.id },
          }),
          422,
          'validation_failed',
        );
      }
      expect(fake.chatRequests()).toHaveLength(0);
      expect(await artifactCount()).toBe(before + 1);
    });

    it('404 for a project of another organization or one the key cannot use', async () => {
      const other = await createOrg(t);
      expectV1Error(
        await call(t, 'POST', generateUrl(memoSlug, other.projectId), {
          key: org.orgKey,
          body: { skill_id: skillId, inputs: memoInputs },
        }),
        404,
        'project_not_found',
      );
      expectV1Error(
        await call(t, 'POST', generateUrl(memoSlug, 2147483000), {
          key: org.orgKey,
          body: { skill_id: skillId, inputs: memoInputs },
        }),
        404,
        'project_not_found',
      );
      // A member outside the project's groups.
      const member = await createMember(t, org);
      const [hidden] = await t.deps.database.db
        .insert(projects)
        .values({ organizationId: org.organizationId, name: 'Hidden' })
        .returning();
      expectV1Error(
        await call(t, 'POST', generateUrl(memoSlug, hidden.id), {
          key: member.key,
          body: { skill_id: skillId, inputs: memoInputs },
        }),
        404,
        'project_not_found',
      );
    });

    it('404 for an artifact type and skill of another organization', async () => {
      const other = await createOrg(t);
      const type = await createArtifactType(t, other, 'secret-type');
      const skill = await createSkill(t, other, { name: 'S', content: 'x', typeIds: [type.id] });
      expectV1Error(
        await call(t, 'POST', generateUrl('secret-type'), {
          key: org.orgKey,
          body: { skill_id: skill.id, inputs: [] },
        }),
        404,
        'artifact_type_not_found',
      );
      expectV1Error(await generate({ skill_id: skill.id, inputs: [] }), 404, 'skill_not_found');
    });

    it('422 for an archived project', async () => {
      const [archived] = await t.deps.database.db
        .insert(projects)
        .values({ organizationId: org.organizationId, name: 'Old', archivedAt: '2024-01-01T00:00:00Z' })
        .returning();
      const res = await call(t, 'POST', generateUrl(memoSlug, archived.id), {
        key: org.orgKey,
        body: { skill_id: skillId, inputs: memoInputs },
      });
      expectV1Error(res, 422, 'project_archived');
    });

    it('402 when the organization has no credits left, on both generate endpoints', async () => {
      const broke = await createOrg(t);
      await useFakeModel(t, broke, fake);
      const type = await createArtifactType(t, broke, 'memo');
      const skill = await createSkill(t, broke, { name: 'B', content: 'x', typeIds: [type.id] });
      await setBalance(t, broke, 0);
      const body = { skill_id: skill.id, inputs: [] };
      const url = `/api/v1/artifact_types/memo/artifacts?project_id=${broke.projectId}`;
      expectV1Error(await call(t, 'POST', url, { key: broke.orgKey, body }), 402, 'insufficient_credits');
      const streamed = await postStream(
        t,
        `/api/v1/artifact_types/memo/artifacts/stream?project_id=${broke.projectId}`,
        broke.orgKey,
        body,
      );
      expect(streamed.status).toBe(402);
      expect(streamed.body.error.code).toBe('insufficient_credits');
      expect(fake.chatRequests()).toHaveLength(0);
    });
  });

  describe('streaming generation', () => {
    it('streams chunks that concatenate to the saved content, then done with an id that reads back', async () => {
      const chunks = ['# Stream', 'ed memo\n\n', 'Line one. ', 'Line two.'];
      fake.enqueue({ chunks });
      const res = await postStream(
        t,
        `/api/v1/artifact_types/${memoSlug}/artifacts/stream?project_id=${org.projectId}`,
        org.orgKey,
        {
          skill_id: skillId,
          inputs: memoInputs,
        },
      );
      expect(res.status).toBe(200);
      expect(res.contentType).toContain('text/event-stream');
      const names = res.events.map((e) => e.event);
      expect(res.events.map((e) => e.id)).toEqual(res.events.map((_, i) => String(i + 1)));
      expect(names.at(-1)).toBe('done');
      expect(names.slice(0, -1).every((n) => n === 'chunk')).toBe(true);
      for (const data of res.data.slice(0, -1))
        expect(data).toEqual({ content: expect.any(String), done: false });
      const done = res.data.at(-1);
      expect(done).toEqual({ artifact_id: expect.any(Number), done: true });
      const streamed = res.data
        .slice(0, -1)
        .map((d) => d.content)
        .join('');
      expect(streamed).toBe(chunks.join(''));
      const read = await call(t, 'GET', artifactUrl(done.artifact_id), { key: org.orgKey });
      expectStatus(read, 200);
      expect(read.body.artifact.content).toBe(streamed);
      expect(read.body.artifact.name).toBe('Streamed memo');
      expect(fake.chatRequests()[0].body.stream).toBe(true);
    });

    it('refuses bad requests with an HTTP status before the stream opens', async () => {
      const url = `/api/v1/artifact_types/${memoSlug}/artifacts/stream?project_id=${org.projectId}`;
      const res = await postStream(t, url, org.orgKey, { skill_id: skillId, inputs: [] });
      expect(res.status).toBe(422);
      expect(res.body.error.details).toHaveProperty('inputs.topic');
      const missing = await postStream(
        t,
        `/api/v1/artifact_types/nope/artifacts/stream?project_id=${org.projectId}`,
        org.orgKey,
        {
          skill_id: skillId,
          inputs: memoInputs,
        },
      );
      expect(missing.status).toBe(404);
    });

    it('sends an error event with the v1 error object and saves nothing when the model fails mid-stream', async () => {
      const before = await artifactCount();
      fake.enqueue({ chunks: ['# Half', ' a memo', ' and then'], failAfterChunks: 2 });
      const res = await postStream(
        t,
        `/api/v1/artifact_types/${memoSlug}/artifacts/stream?project_id=${org.projectId}`,
        org.orgKey,
        {
          skill_id: skillId,
          inputs: memoInputs,
        },
      );
      expect(res.status).toBe(200);
      const last = res.events.at(-1)!;
      expect(last.event).toBe('error');
      expect(JSON.parse(last.data)).toEqual({
        error: { message: expect.any(String), code: 'generation_failed', details: {} },
      });
      expect(res.events.some((e) => e.event === 'done')).toBe(false);
      expect(await artifactCount()).toBe(before);
    });
  });

  describe('refinement', () => {
    async function freshArtifact(text = '# Draft\n\nFirst version.') {
      fake.enqueue({ text });
      const res = await generate();
      expectStatus(res, 201);
      return res.body.artifact;
    }

    it('blocking generation and refinement carry a Server-Timing header (db, model, overhead, total)', async () => {
      const parse = (header: unknown) =>
        Object.fromEntries(
          String(header)
            .split(', ')
            .map((entry) => {
              const [name, dur] = entry.split(';dur=');
              return [name, Number(dur)];
            }),
        );
      fake.enqueue({ text: '# Timed\n\nBody.', firstTokenDelayMs: 40 });
      const generated = await generate();
      expectStatus(generated, 201);
      fake.enqueue({ text: '# Timed\n\nShorter.', firstTokenDelayMs: 40 });
      const refined = await call(t, 'POST', `${artifactUrl(generated.body.artifact.id)}/refine`, {
        key: org.orgKey,
        body: { refine_prompt: 'Shorter' },
      });
      expectStatus(refined, 200);
      for (const res of [generated, refined]) {
        const entries = parse(res.headers['server-timing']);
        expect(Object.keys(entries)).toEqual(['db', 'model', 'overhead', 'total']);
        expect(entries.db).toBeGreaterThan(0);
        // The model waited 40 ms before its first token: model time, not overhead.
        expect(entries.model).toBeGreaterThanOrEqual(35);
        expect(entries.overhead).toBeLessThanOrEqual(entries.total);
        expect(entries.db + entries.model).toBeLessThanOrEqual(entries.total + 0.2);
      }
    });

    it('gives the model the chat history plus the instruction and saves the whole new content', async () => {
      const artifact = await freshArtifact();
      fake.reset();
      fake.enqueue({ text: '# Draft\n\nSecond, shorter version.' });
      const res = await call(t, 'POST', `${artifactUrl(artifact.id)}/refine`, {
        key: org.orgKey,
        body: { refine_prompt: 'Make it shorter' },
      });
      expectStatus(res, 200);
      const messages = fake.chatRequests()[0].body.messages as { role: string; content: string }[];
      expect(messages.map((m) => m.role)).toEqual(['system', 'user', 'assistant', 'user']);
      expect(messages[1].content).toContain('the quarterly offsite');
      expect(messages[2].content).toBe('# Draft\n\nFirst version.');
      expect(messages[3].content).toContain('Make it shorter');
      expect(messages[3].content).not.toContain('current version');
      expect(res.body.url).toBe(artifact.url);
      expect(res.body.artifact).toMatchObject({
        id: artifact.id,
        content: '# Draft\n\nSecond, shorter version.',
        name: 'Draft',
        share_token: artifact.share_token,
      });
      expect(res.body.artifact.chat_history).toEqual([
        ...artifact.chat_history,
        { role: 'user', content: 'Make it shorter' },
        { role: 'assistant', content: '# Draft\n\nSecond, shorter version.' },
      ]);
      const read = await call(t, 'GET', artifactUrl(artifact.id), { key: org.orgKey });
      expect(read.body.artifact.content).toBe('# Draft\n\nSecond, shorter version.');
      const [event] = await t.deps.database.db
        .select()
        .from(webhookEvents)
        .where(eq(webhookEvents.eventName, 'artifact_refined'))
        .then((rows) => rows.filter((r) => r.eventData.artifact_id === artifact.id));
      expect(event.eventData).toEqual({
        name: 'Draft',
        artifact_id: artifact.id,
        artifact_type_slug: memoSlug,
        project_id: org.projectId,
        api_async_create_event_id: expect.stringMatching(UUID),
      });
    });

    it('streams a refinement whose chunks concatenate to the saved content', async () => {
      const artifact = await freshArtifact();
      const chunks = ['# Draft\n\n', 'Now in ', 'French.'];
      fake.enqueue({ chunks });
      const res = await postStream(t, `${artifactUrl(artifact.id)}/refine_stream`, org.orgKey, {
        refine_prompt: 'In French',
      });
      expect(res.status).toBe(200);
      expect(res.data.at(-1)).toEqual({ artifact_id: artifact.id, done: true });
      const streamed = res.data
        .slice(0, -1)
        .map((d) => d.content)
        .join('');
      expect(streamed).toBe(chunks.join(''));
      const read = await call(t, 'GET', artifactUrl(artifact.id), { key: org.orgKey });
      expect(read.body.artifact.content).toBe(streamed);
      expect(read.body.artifact.chat_history.at(-2)).toEqual({ role: 'user', content: 'In French' });
    });

    it('leaves the artifact untouched when a streamed refinement fails', async () => {
      const artifact = await freshArtifact();
      fake.enqueue({ chunks: ['# New', ' text', ' more'], failAfterChunks: 2 });
      const res = await postStream(t, `${artifactUrl(artifact.id)}/refine_stream`, org.orgKey, {
        refine_prompt: 'Change',
      });
      expect(res.events.at(-1)!.event).toBe('error');
      const read = await call(t, 'GET', artifactUrl(artifact.id), { key: org.orgKey });
      expect(read.body.artifact.content).toBe(artifact.content);
      expect(read.body.artifact.chat_history).toEqual(artifact.chat_history);
    });

    it('400 when refine_prompt is missing, empty or blank, on both endpoints', async () => {
      const artifact = await freshArtifact();
      for (const suffix of ['refine', 'refine_stream']) {
        for (const body of [{}, { refine_prompt: '' }, { refine_prompt: '   ' }]) {
          const res = await call(t, 'POST', `${artifactUrl(artifact.id)}/${suffix}`, {
            key: org.orgKey,
            body,
          });
          expectV1Error(res, 400);
          expect(res.body.error.details).toHaveProperty('refine_prompt');
        }
      }
      expectV1Error(
        await call(t, 'POST', `${artifactUrl(artifact.id)}/refine`, {
          key: org.orgKey,
          body: { refine_prompt: 5 },
        }),
        400,
      );
    });

    it('404 for an unknown artifact or one of another type slug', async () => {
      const artifact = await freshArtifact();
      const body = { refine_prompt: 'x' };
      expectV1Error(
        await call(t, 'POST', `${artifactUrl(2147483000)}/refine`, { key: org.orgKey, body }),
        404,
        'artifact_not_found',
      );
      expectV1Error(
        await call(t, 'POST', `${artifactUrl(artifact.id, reportSlug)}/refine`, { key: org.orgKey, body }),
        404,
        'artifact_not_found',
      );
      expect(fake.chatRequests()).toHaveLength(1);
    });
  });

  describe('read, edit and delete', () => {
    let artifact: any;
    beforeAll(async () => {
      fake.enqueue({ text: '# Keep\n\nOriginal.' });
      const res = await generate();
      expectStatus(res, 201);
      artifact = res.body.artifact;
    });

    it('GET returns {artifact} with its url', async () => {
      const res = await call(t, 'GET', artifactUrl(artifact.id), { key: org.orgKey });
      expectStatus(res, 200);
      expect(res.body).toEqual({ artifact });
      expect(res.body.artifact.url).toBe(`${PUBLIC_BASE_URL}/share/artifacts/${artifact.share_token}`);
      // A personal key of an admin sees it too.
      expectStatus(await call(t, 'GET', artifactUrl(artifact.id), { key: org.adminKey }), 200);
    });

    it('404 for another type slug, another organization, or a project the member cannot use', async () => {
      expectV1Error(
        await call(t, 'GET', artifactUrl(artifact.id, reportSlug), { key: org.orgKey }),
        404,
        'artifact_not_found',
      );
      expectV1Error(await call(t, 'GET', artifactUrl(artifact.id, 'unknown'), { key: org.orgKey }), 404);
      const other = await createOrg(t);
      await createArtifactType(t, other, memoSlug);
      for (const method of ['GET', 'PUT', 'DELETE']) {
        expectV1Error(
          await call(t, method, artifactUrl(artifact.id), {
            key: other.orgKey,
            body: method === 'PUT' ? { notes: 'x' } : undefined,
          }),
          404,
        );
      }
      expectV1Error(
        await call(t, 'POST', `${artifactUrl(artifact.id)}/refine`, {
          key: other.orgKey,
          body: { refine_prompt: 'x' },
        }),
        404,
      );
      // A member reaches artifacts of projects in their groups, not of others.
      const member = await createMember(t, org);
      expectStatus(await call(t, 'GET', artifactUrl(artifact.id), { key: member.key }), 200);
      const [hidden] = await t.deps.database.db
        .insert(projects)
        .values({ organizationId: org.organizationId, name: 'Hidden 2' })
        .returning();
      fake.enqueue({ text: '# Hidden' });
      const made = await call(t, 'POST', generateUrl(memoSlug, hidden.id), {
        key: org.orgKey,
        body: { skill_id: skillId, inputs: memoInputs },
      });
      expectStatus(made, 201);
      expectV1Error(await call(t, 'GET', artifactUrl(made.body.artifact.id), { key: member.key }), 404);
    });

    it('PUT edits name and notes without marking the content edited', async () => {
      const res = await call(t, 'PUT', artifactUrl(artifact.id), {
        key: org.orgKey,
        body: { name: 'Renamed', notes: 'Checked by legal' },
      });
      expectStatus(res, 200);
      expect(res.body.artifact).toMatchObject({
        name: 'Renamed',
        notes: 'Checked by legal',
        manually_edited: false,
        content: artifact.content,
      });
      const same = await call(t, 'PUT', artifactUrl(artifact.id), {
        key: org.orgKey,
        body: { content: artifact.content },
      });
      expect(same.body.artifact.manually_edited).toBe(false);
    });

    it('PUT with new content sets manually_edited, and the next refinement sees the edited text', async () => {
      const res = await call(t, 'PUT', artifactUrl(artifact.id), {
        key: org.orgKey,
        body: { content: '# Keep\n\nEdited by hand.' },
      });
      expectStatus(res, 200);
      expect(res.body.artifact).toMatchObject({
        content: '# Keep\n\nEdited by hand.',
        manually_edited: true,
      });
      expect(res.body.artifact.updated_at >= artifact.updated_at).toBe(true);
      const read = await call(t, 'GET', artifactUrl(artifact.id), { key: org.orgKey });
      expect(read.body.artifact.manually_edited).toBe(true);
      fake.enqueue({ text: '# Keep\n\nEdited and refined.' });
      const refined = await call(t, 'POST', `${artifactUrl(artifact.id)}/refine`, {
        key: org.orgKey,
        body: { refine_prompt: 'Polish' },
      });
      expectStatus(refined, 200);
      const last = fake.chatRequests()[0].body.messages.at(-1).content as string;
      expect(last).toContain('Edited by hand.');
      expect(refined.body.artifact.manually_edited).toBe(true);
    });

    it('PUT rejects bad fields', async () => {
      expectV1Error(
        await call(t, 'PUT', artifactUrl(artifact.id), { key: org.orgKey, body: { name: '' } }),
        422,
      );
      expectV1Error(
        await call(t, 'PUT', artifactUrl(artifact.id), { key: org.orgKey, body: { name: '   ' } }),
        422,
      );
      expectV1Error(
        await call(t, 'PUT', artifactUrl(artifact.id), { key: org.orgKey, body: { content: 42 } }),
        400,
      );
    });

    it('DELETE answers {message}; afterwards the artifact and its share page are gone', async () => {
      fake.enqueue({ text: '# Doomed' });
      const made = await generate();
      const doomed = made.body.artifact;
      const res = await call(t, 'DELETE', artifactUrl(doomed.id), { key: org.orgKey });
      expectStatus(res, 200);
      expect(res.body).toEqual({ message: expect.any(String) });
      expectV1Error(
        await call(t, 'GET', artifactUrl(doomed.id), { key: org.orgKey }),
        404,
        'artifact_not_found',
      );
      expectV1Error(await call(t, 'DELETE', artifactUrl(doomed.id), { key: org.orgKey }), 404);
      const page = await call(t, 'GET', `/share/artifacts/${doomed.share_token}`);
      expect(page.status).toBe(404);
    });

    it('keeps artifacts reachable only while their type is live', async () => {
      const type = await createArtifactType(t, org, 'temporary');
      const skill = await createSkill(t, org, { name: 'T', content: 'x', typeIds: [type.id] });
      fake.enqueue({ text: '# Temp' });
      const made = await call(t, 'POST', generateUrl('temporary'), {
        key: org.orgKey,
        body: { skill_id: skill.id, inputs: [] },
      });
      expectStatus(made, 201);
      await t.deps.database.db
        .update(artifactTypes)
        .set({ deletedAt: '2025-01-01T00:00:00Z' })
        .where(eq(artifactTypes.id, type.id));
      expectV1Error(
        await call(t, 'GET', artifactUrl(made.body.artifact.id, 'temporary'), { key: org.orgKey }),
        404,
      );
    });
  });
});
