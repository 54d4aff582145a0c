/**
 * Model base URLs follow the outbound rule (issue 15 item 6): refused when saved and when
 * connecting, except the operator's MODEL_BASE_URL_ALLOW; provider error text never reaches callers.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import { eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../src/config.js';
import { modelConfigurations, webhookEvents } from '../src/db/schema/index.js';
import { assertModelBaseUrlAllowed } from '../src/net/model-base-url.js';
import { createArtifactType, createSkill, postStream, useFakeModel } from './artifacts-fixtures.js';
import {
  call,
  createOrg,
  expectStatus,
  expectV1Error,
  expectV2Error,
  startTestServer,
  type TestApp,
  type TestOrg,
  testEnv,
} from './helpers/app.js';
import { type FakeModelServer, startFakeModelServer } from './helpers/fake-model-server.js';

const SECRET_BODY = 'INTERNAL-SECRET-DATA from a service that should never have been reached';
const STRICT = { MODEL_BASE_URL_ALLOW: '' };

async function newChat(t: TestApp, org: TestOrg) {
  const res = await call(t, 'POST', '/api/v2/chats', {
    key: org.orgKey,
    body: { project_id: org.projectId },
  });
  expectStatus(res, 201);
  return res.body.response.chat.id as number;
}

function createConfiguration(t: TestApp, org: TestOrg, baseUrl: string) {
  return call(t, 'POST', '/api/v1/model_configurations', {
    key: org.orgKey,
    body: { name: `Model ${Math.random()}`, provider: 'openai-compatible', model: 'm', base_url: baseUrl },
  });
}

describe('model base URLs when saved', () => {
  let strict: TestApp;
  let strictOrg: TestOrg;
  beforeAll(async () => {
    strict = await startTestServer(STRICT);
    strictOrg = await createOrg(strict);
  });
  afterAll(() => strict.close());

  it.each([
    ['http://127.0.0.1:8080/v1', 'must use https'],
    ['https://127.0.0.1:8080/v1', 'must point to a public address'],
    ['https://169.254.169.254/latest', 'must point to a public address'],
    ['https://[::1]/v1', 'must point to a public address'],
    ['https://[::127.0.0.1]/v1', 'must point to a public address'],
    ['https://[2002:7f00:1::]/v1', 'must point to a public address'],
    ['https://localhost./v1', 'must point to a public address'],
    ['https://10.0.0.5/v1', 'must point to a public address'],
    ['https://user:pw@api.example.com/v1', 'must not contain credentials'],
  ])('refuses %s with 422 on create and update', async (url, reason) => {
    const res = await createConfiguration(strict, strictOrg, url);
    expectV1Error(res, 422, 'validation_failed');
    expect(res.body.error.details).toEqual({ base_url: [reason] });

    const ok = await createConfiguration(strict, strictOrg, 'https://api.example.com/v1');
    expectStatus(ok, 201);
    const id = ok.body.model_configuration.id;
    const put = await call(strict, 'PUT', `/api/v1/model_configurations/${id}`, {
      key: strictOrg.orgKey,
      body: { base_url: url },
    });
    expectV1Error(put, 422, 'validation_failed');
    expect(put.body.error.details).toEqual({ base_url: [reason] });
  });

  it('accepts what MODEL_BASE_URL_ALLOW names, and anything with OUTBOUND_ALLOW_PRIVATE', async () => {
    const allowing = await startTestServer({ MODEL_BASE_URL_ALLOW: '127.0.0.1:11434, *.models.internal:*' });
    try {
      const org = await createOrg(allowing);
      expectStatus(await createConfiguration(allowing, org, 'http://127.0.0.1:11434/v1'), 201);
      expectStatus(await createConfiguration(allowing, org, 'http://gpu.models.internal:8000/v1'), 201);
      const otherPort = await createConfiguration(allowing, org, 'http://127.0.0.1:9999/v1');
      expectV1Error(otherPort, 422);
      expect(otherPort.body.error.details).toEqual({ base_url: ['must use https'] });
    } finally {
      await allowing.close();
    }
    const open = await startTestServer({ ...STRICT, OUTBOUND_ALLOW_PRIVATE: 'true' });
    try {
      const org = await createOrg(open);
      expectStatus(await createConfiguration(open, org, 'http://169.254.169.254/v1'), 201);
    } finally {
      await open.close();
    }
  });

  it('parses MODEL_BASE_URL_ALLOW and always allows the host of LLM_BASE_URL', () => {
    const config = loadConfig(
      testEnv({
        MODEL_BASE_URL_ALLOW: ' 127.0.0.1:11434 ,[::1]:8080,*.Internal:*',
        LLM_PROVIDER: 'openai-compatible',
        LLM_BASE_URL: 'http://10.1.2.3/v1',
        LLM_MODEL: 'm',
      }),
    );
    expect(config.modelBaseUrlAllow).toEqual([
      '127.0.0.1:11434',
      '[::1]:8080',
      '*.internal:*',
      '10.1.2.3:80',
    ]);
    expect(() => assertModelBaseUrlAllowed('http://10.1.2.3/v1', config)).not.toThrow();
    expect(() => assertModelBaseUrlAllowed('http://[::1]:8080/v1', config)).not.toThrow();
    expect(() => assertModelBaseUrlAllowed('http://10.1.2.3:81/v1', config)).toThrow('must use https');
    for (const bad of ['127.0.0.1', 'http://127.0.0.1:80', 'host:port', '::1:80']) {
      expect(() => loadConfig(testEnv({ MODEL_BASE_URL_ALLOW: bad }))).toThrow(ConfigError);
    }
  });
});

describe('model base URLs when connecting', () => {
  let t: TestApp;
  let fake: FakeModelServer;
  beforeAll(async () => {
    fake = await startFakeModelServer();
    t = await startTestServer(STRICT);
  });
  afterAll(async () => {
    await t.close();
    await fake.close();
  });

  it('refuses a loopback base URL saved under another rule: no request reaches the server', async () => {
    const org = await createOrg(t);
    // As if saved while the service allowed private addresses.
    await useFakeModel(t, org, fake);
    fake.reset();
    const chat = await newChat(t, org);
    const res = await call(t, 'POST', `/api/v2/chats/${chat}/messages`, {
      key: org.orgKey,
      body: { content: 'Hi' },
    });
    expectV2Error(res, 500, 'model_error');
    expect(res.body.response.message).toBe(
      "The model provider failed: the model's base URL is refused: must use https",
    );
    expect(fake.chatRequests()).toHaveLength(0);
  });

  it('refuses a public-looking name that resolves to a private address', async () => {
    const org = await createOrg(t);
    const row = await useFakeModel(t, org, fake);
    const port = new URL(fake.baseUrl).port;
    // The machine's own name passes the URL check and resolves to loopback or a private address.
    await t.deps.database.db
      .update(modelConfigurations)
      .set({ baseUrl: `https://${os.hostname()}:${port}/v1` })
      .where(eq(modelConfigurations.id, row.id));
    fake.reset();
    const chat = await newChat(t, org);
    const res = await call(t, 'POST', `/api/v2/chats/${chat}/messages`, {
      key: org.orgKey,
      body: { content: 'Hi' },
    });
    expectV2Error(res, 500, 'model_error');
    expect(res.body.response.message).toMatch(
      new RegExp(`base URL is refused: ${os.hostname()} resolves to a private address`),
    );
    expect(fake.chatRequests()).toHaveLength(0);
  });
});

describe('provider error text', () => {
  let t: TestApp;
  let fake: FakeModelServer;
  let org: TestOrg;
  beforeAll(async () => {
    fake = await startFakeModelServer();
    t = await startTestServer();
    org = await createOrg(t);
    await useFakeModel(t, org, fake);
  });
  afterAll(async () => {
    await t.close();
    await fake.close();
  });
  const leaky = () => ({ status: 400, errorBody: { error: { message: SECRET_BODY } } });

  it('stays out of a blocking chat reply: only the status is shown', async () => {
    fake.setResponder(leaky);
    const chat = await newChat(t, org);
    const res = await call(t, 'POST', `/api/v2/chats/${chat}/messages`, {
      key: org.orgKey,
      body: { content: 'Hi' },
    });
    expectV2Error(res, 500, 'model_error');
    expect(res.body.response.message).toBe('The model provider failed: the provider answered HTTP 400');
    expect(JSON.stringify(res.body)).not.toContain('INTERNAL-SECRET');
  });

  it('stays out of a streamed chat error event', async () => {
    fake.setResponder(leaky);
    const chat = await newChat(t, org);
    const res = await postStream(t, `/api/v2/chats/${chat}/messages`, org.orgKey, {
      content: 'Hi',
      stream: true,
    });
    const error = res.data.at(-1);
    expect(res.events.at(-1)?.event).toBe('error');
    expect(error).toMatchObject({
      code: 500,
      message: 'The model provider failed: the provider answered HTTP 400',
    });
    expect(JSON.stringify(res.data)).not.toContain('INTERNAL-SECRET');
  });

  it('calls an answer that broke off mid-stream so, not an HTTP 200 failure', async () => {
    fake.setResponder(() => ({ chunks: ['One ', 'two ', 'three ', 'four'], failAfterChunks: 2 }));
    const slug = `memo-${Math.random().toString(36).slice(2, 7)}`;
    const type = await createArtifactType(t, org, slug, 'Memo');
    const skill = await createSkill(t, org, {
      name: `Broken ${slug}`,
      content: 'Write.',
      typeIds: [type.id],
    });
    const res = await call(
      t,
      'POST',
      `/api/v1/artifact_types/${slug}/artifacts?project_id=${org.projectId}`,
      {
        key: org.orgKey,
        body: { skill_id: skill.id, inputs: [] },
      },
    );
    expectV1Error(res, 500, 'generation_failed');
    expect(res.body.error.message).toMatch(/broke off|could not be reached|other side closed/);
    expect(res.body.error.message).not.toContain('answered HTTP 200');
    fake.setResponder(null);
  });

  it('stays out of artifact errors and the artifact_generation_failed payload', async () => {
    fake.setResponder(leaky);
    const slug = `memo-${Math.random().toString(36).slice(2, 7)}`;
    const type = await createArtifactType(t, org, slug, 'Memo');
    const skill = await createSkill(t, org, {
      name: `Writer ${slug}`,
      content: 'Write a memo.',
      typeIds: [type.id],
    });
    const url = `/api/v1/artifact_types/${slug}/artifacts?project_id=${org.projectId}`;
    const blocking = await call(t, 'POST', url, {
      key: org.orgKey,
      body: { skill_id: skill.id, inputs: [] },
    });
    expectV1Error(blocking, 500, 'generation_failed');
    expect(blocking.body.error.message).toBe(
      'The model failed while generating the artifact: the provider answered HTTP 400',
    );

    const async = await call(t, 'POST', url, {
      key: org.orgKey,
      body: { skill_id: skill.id, inputs: [], fire_and_forget: true },
    });
    expectStatus(async, 200);
    const id = async.body.api_async_create_event_id as string;
    let status: any;
    for (let i = 0; i < 200; i++) {
      status = (await call(t, 'GET', `/api/v1/async_requests/${id}`, { key: org.orgKey })).body.async_request;
      if (status.status !== 'accepted') break;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(status).toMatchObject({ status: 'failed' });
    expect(JSON.stringify(status)).not.toContain('INTERNAL-SECRET');
    const events = await t.deps.database.db
      .select({ data: webhookEvents.eventData })
      .from(webhookEvents)
      .where(eq(webhookEvents.eventName, 'artifact_generation_failed'));
    const event = events.find((e) => e.data.api_async_create_event_id === id);
    expect(event?.data.reason).toBe(
      'The model failed while generating the artifact: the provider answered HTTP 400',
    );
  });
});

describe('redirects from a model server', () => {
  let t: TestApp;
  let fake: FakeModelServer;
  let redirector: Server;
  let org: TestOrg;
  beforeAll(async () => {
    fake = await startFakeModelServer();
    // Answers every request with a redirect to the fake model: a provider that points elsewhere.
    redirector = createServer((req, res) => {
      res.writeHead(307, { location: `${fake.baseUrl}${req.url?.replace(/^\/v1/, '') ?? ''}` });
      res.end();
    });
    await new Promise<void>((resolve) => redirector.listen(0, '127.0.0.1', resolve));
    const { port } = redirector.address() as AddressInfo;
    t = await startTestServer();
    org = await createOrg(t);
    const row = await useFakeModel(t, org, fake);
    await t.deps.database.db
      .update(modelConfigurations)
      .set({ baseUrl: `http://127.0.0.1:${port}/v1` })
      .where(eq(modelConfigurations.id, row.id));
  });
  afterAll(async () => {
    await t.close();
    await fake.close();
    await new Promise((resolve) => redirector.close(resolve));
  });

  it('are not followed, on the lean path or the AI SDK path: no request reaches where they point', async () => {
    const chat = await newChat(t, org);
    const lean = await call(t, 'POST', `/api/v2/chats/${chat}/messages`, {
      key: org.orgKey,
      body: { content: 'Hi' },
    });
    expectV2Error(lean, 500, 'model_error');
    const structured = await call(t, 'POST', `/api/v2/chats/${chat}/messages`, {
      key: org.orgKey,
      body: {
        content: 'Hi',
        response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object' } } },
      },
    });
    expectV2Error(structured, 500);
    const slug = `memo-${Math.random().toString(36).slice(2, 7)}`;
    const type = await createArtifactType(t, org, slug, 'Memo');
    const skill = await createSkill(t, org, {
      name: `Writer ${slug}`,
      content: 'Write.',
      typeIds: [type.id],
    });
    const artifact = await call(
      t,
      'POST',
      `/api/v1/artifact_types/${slug}/artifacts?project_id=${org.projectId}`,
      {
        key: org.orgKey,
        body: { skill_id: skill.id, inputs: [] },
      },
    );
    expectV1Error(artifact, 500, 'generation_failed');
    expect(fake.chatRequests()).toHaveLength(0);
  });
});
