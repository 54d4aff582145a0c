import { Writable } from 'node:stream';
import { generateText } from 'ai';
import { eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../src/app.js';
import { modelConfigurations } from '../src/db/schema/index.js';
import { resolveModel } from '../src/llm/resolve-model.js';
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
import { type FakeModelServer, startFakeModelServer } from './helpers/fake-model-server.js';

describeAuthMatrix('v1', [
  { method: 'GET', url: '/api/v1/model_configurations' },
  {
    method: 'POST',
    url: '/api/v1/model_configurations',
    body: { name: 'Offline', provider: 'builtin' },
    write: true,
  },
  { method: 'GET', url: (o) => `/api/v1/model_configurations/${o.modelConfigurationId}` },
  {
    method: 'PUT',
    url: (o) => `/api/v1/model_configurations/${o.modelConfigurationId}`,
    body: { name: 'x' },
    write: true,
  },
  { method: 'DELETE', url: '/api/v1/model_configurations/999999', write: true },
]);

const SECRET = 'sk-live-DO-NOT-LEAK-4f2a9c';

describe('model configurations', () => {
  let t: TestApp;
  let org: TestOrg;
  let other: TestOrg;
  let logs: string[];
  let models: FakeModelServer;
  beforeAll(async () => {
    t = await buildTestApp();
    // The same app, logging everything it would ever log, to prove the key never reaches a log line.
    logs = [];
    const sink = new Writable({
      write(chunk, _encoding, done) {
        logs.push(String(chunk));
        done();
      },
    });
    await t.app.close();
    t.app = await buildApp(t.deps, { logger: { level: 'trace', stream: sink } });
    await t.app.ready();
    org = await createOrg(t);
    other = await createOrg(t);
    models = await startFakeModelServer();
  });
  afterAll(async () => {
    await models.close();
    await t.close();
  });

  const post = (body: Record<string, unknown>, o = org) =>
    call(t, 'POST', '/api/v1/model_configurations', { key: o.orgKey, body });
  const put = (id: number, body: Record<string, unknown>, o = org) =>
    call(t, 'PUT', `/api/v1/model_configurations/${id}`, { key: o.orgKey, body });
  const get = (id: number, o = org) =>
    call(t, 'GET', `/api/v1/model_configurations/${id}`, { key: o.orgKey });

  it('lists the organization default created with it', async () => {
    const res = await call(t, 'GET', '/api/v1/model_configurations', { key: org.adminKey });
    expectStatus(res, 200);
    expect(res.body).toEqual({
      model_configurations: [
        {
          id: org.modelConfigurationId,
          name: 'Built-in offline model',
          provider: 'builtin',
          model: 'scriptorium-offline',
          base_url: null,
          purpose: 'chat',
          is_default: true,
          has_api_key: false,
          credits_per_1k_input_tokens: 0,
          credits_per_1k_output_tokens: 0,
          created_at: expect.stringMatching(TIMESTAMP),
          updated_at: expect.stringMatching(TIMESTAMP),
        },
      ],
      pagination: { page: 1, page_size: 50, total_count: 1, total_pages: 1 },
    });
  });

  it('creates a configuration with an encrypted, write-only api_key', async () => {
    const res = await post({
      name: 'Local LLM',
      provider: 'openai-compatible',
      model: 'fake-model',
      base_url: models.baseUrl,
      api_key: SECRET,
      credits_per_1k_input_tokens: 0.5,
      credits_per_1k_output_tokens: 1.25,
    });
    expectStatus(res, 201);
    expect(res.body).toEqual({
      model_configuration: {
        id: expect.any(Number),
        name: 'Local LLM',
        provider: 'openai-compatible',
        model: 'fake-model',
        base_url: models.baseUrl,
        purpose: 'chat',
        is_default: false,
        has_api_key: true,
        credits_per_1k_input_tokens: 0.5,
        credits_per_1k_output_tokens: 1.25,
        created_at: expect.stringMatching(TIMESTAMP),
        updated_at: expect.stringMatching(TIMESTAMP),
      },
    });
    const id = res.body.model_configuration.id;

    const [row] = await t.deps.database.db
      .select()
      .from(modelConfigurations)
      .where(eq(modelConfigurations.id, id));
    expect(row.apiKeyEncrypted).not.toContain(SECRET);
    expect(t.deps.secrets.decrypt(row.apiKeyEncrypted!)).toBe(SECRET);

    // The stored key is what the provider really sends.
    const principal = { kind: 'organization', keyId: 0, organizationId: org.organizationId, userId: null };
    const resolved = await resolveModel(
      {
        db: t.deps.database.db,
        secrets: t.deps.secrets,
        config: t.deps.config,
        principal: { ...principal, role: 'admin' } as any,
      },
      id,
    );
    models.enqueue({ text: 'pong' });
    const reply = await generateText({ model: resolved.model, prompt: 'ping' });
    expect(reply.text).toBe('pong');
    expect(models.chatRequests().at(-1)?.headers.authorization).toBe(`Bearer ${SECRET}`);
  });

  it('never shows the api_key in a response or a log line', async () => {
    const created = await post({
      name: 'Anthropic',
      provider: 'anthropic',
      model: 'claude-x',
      api_key: SECRET,
    });
    expectStatus(created, 201);
    const id = created.body.model_configuration.id;
    const responses = [
      created,
      await get(id),
      await call(t, 'GET', '/api/v1/model_configurations?page_size=100', { key: org.orgKey }),
      await put(id, { api_key: SECRET, name: 'Renamed' }),
      await put(id, { api_key: 42 }),
      await post({ name: 'Bad', provider: 'nope', api_key: SECRET }),
    ];
    for (const res of responses) expect(JSON.stringify(res.body)).not.toContain(SECRET);
    expect(responses[3].body.model_configuration).not.toHaveProperty('api_key');
    expect(logs.length).toBeGreaterThan(0);
    expect(logs.join('\n')).not.toContain(SECRET);
  });

  it('keeps, replaces and removes the key on PUT', async () => {
    const created = await post({ name: 'OpenAI', provider: 'openai', model: 'gpt-x', api_key: 'first' });
    const id = created.body.model_configuration.id;
    const stored = async () =>
      (await t.deps.database.db.select().from(modelConfigurations).where(eq(modelConfigurations.id, id)))[0]
        .apiKeyEncrypted;
    const renamed = await put(id, { name: 'OpenAI main' });
    expect(renamed.body.model_configuration.has_api_key).toBe(true);
    expect(t.deps.secrets.decrypt((await stored())!)).toBe('first');
    await put(id, { api_key: 'second' });
    expect(t.deps.secrets.decrypt((await stored())!)).toBe('second');
    const removed = await put(id, { api_key: null });
    expect(removed.body.model_configuration.has_api_key).toBe(false);
    expect(await stored()).toBeNull();
  });

  it('keeps one default per organization: setting another moves it', async () => {
    const own = await createOrg(t);
    const res = await post({ name: 'Second', provider: 'builtin', is_default: true }, own);
    expectStatus(res, 201);
    const second = res.body.model_configuration;
    expect(second).toMatchObject({ is_default: true, model: 'scriptorium-offline' });
    expect((await get(own.modelConfigurationId, own)).body.model_configuration.is_default).toBe(false);
    const orgRead = await call(t, 'GET', `/api/v1/admin/organizations/${own.organizationId}`, {
      key: t.boot.super_admin_key,
    });
    expect(orgRead.body.organization.default_model_configuration_id).toBe(second.id);

    const back = await put(own.modelConfigurationId, { is_default: true }, own);
    expect(back.body.model_configuration.is_default).toBe(true);
    const list = await call(t, 'GET', '/api/v1/model_configurations', { key: own.orgKey });
    expect(list.body.model_configurations.filter((m: any) => m.is_default).map((m: any) => m.id)).toEqual([
      own.modelConfigurationId,
    ]);

    const unset = await put(own.modelConfigurationId, { is_default: false }, own);
    expectV1Error(unset, 422, 'default_model_configuration');
    expect(Object.keys(unset.body.error.details)).toEqual(['is_default']);
  });

  it('refuses to delete the default and deletes others', async () => {
    const own = await createOrg(t);
    const refused = await call(t, 'DELETE', `/api/v1/model_configurations/${own.modelConfigurationId}`, {
      key: own.orgKey,
    });
    expectV1Error(refused, 422, 'default_model_configuration');
    const extra = await post({ name: 'Extra', provider: 'builtin' }, own);
    const id = extra.body.model_configuration.id;
    const deleted = await call(t, 'DELETE', `/api/v1/model_configurations/${id}`, { key: own.orgKey });
    expectStatus(deleted, 200);
    expect(deleted.body).toEqual({ message: expect.any(String) });
    expectV1Error(await get(id, own), 404, 'model_configuration_not_found');
    const list = await call(t, 'GET', '/api/v1/model_configurations', { key: own.orgKey });
    expect(list.body.model_configurations.map((m: any) => m.id)).toEqual([own.modelConfigurationId]);
  });

  it('checks provider settings (422 naming each field)', async () => {
    const cases: [Record<string, unknown>, string[]][] = [
      [{ name: 'X', provider: 'nope' }, ['provider']],
      [{ name: 'X', provider: 'openai-compatible', model: 'm' }, ['base_url']],
      [{ name: 'X', provider: 'openai-compatible', model: 'm', base_url: 'not a url' }, ['base_url']],
      [{ name: 'X', provider: 'openai', model: 'm', base_url: 'ftp://example.com' }, ['base_url']],
      [{ name: 'X', provider: 'anthropic' }, ['model']],
      [{ name: 'X', provider: 'builtin', purpose: 'vision' }, ['purpose']],
      [{ name: 'X', provider: 'anthropic', model: 'c', purpose: 'embedding' }, ['purpose']],
      [{ name: 'X', provider: 'openai', model: 'e', purpose: 'embedding', is_default: true }, ['is_default']],
      [{ name: 'X', provider: 'builtin', credits_per_1k_input_tokens: -1 }, ['credits_per_1k_input_tokens']],
      [{ provider: 'builtin' }, ['name']],
    ];
    for (const [body, fields] of cases) {
      const res = await post(body);
      expectV1Error(res, 422);
      expect({ body, fields: Object.keys(res.body.error.details) }).toEqual({ body, fields });
    }
    expectV1Error(await post({ name: 'X', provider: 'builtin', is_default: 'true' }), 400);
    expectV1Error(await post({ name: 'X', provider: 'builtin', credits_per_1k_input_tokens: '1' }), 400);

    const embedding = await post({
      name: 'Embed',
      provider: 'openai',
      model: 'text-embed',
      purpose: 'embedding',
    });
    expectStatus(embedding, 201);
    expect(embedding.body.model_configuration.purpose).toBe('embedding');
    const merged = await put(embedding.body.model_configuration.id, { provider: 'anthropic' });
    expectV1Error(merged, 422);
    expect(Object.keys(merged.body.error.details)).toEqual(['purpose']);
  });

  it('answers 404 for another organization and lets members only read', async () => {
    for (const [method, body] of [['GET'], ['PUT', { name: 'Mine' }], ['DELETE']] as const) {
      expectV1Error(
        await call(t, method, `/api/v1/model_configurations/${other.modelConfigurationId}`, {
          key: org.orgKey,
          body,
        }),
        404,
        'model_configuration_not_found',
      );
    }
    const member = await createMember(t, org);
    expectStatus(await call(t, 'GET', '/api/v1/model_configurations', { key: member.key }), 200);
    expectV1Error(
      await call(t, 'POST', '/api/v1/model_configurations', {
        key: member.key,
        body: { name: 'M', provider: 'builtin' },
      }),
      403,
    );
  });
});
