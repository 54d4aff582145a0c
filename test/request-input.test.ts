import { connect } from 'node:net';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createArtifactType, createSkill, useFakeModel } from './artifacts-fixtures.js';
import {
  buildTestApp,
  call,
  createMember,
  createOrg,
  expectStatus,
  expectV1Error,
  expectV2Error,
  startTestServer,
  type TestApp,
  type TestOrg,
} from './helpers/app.js';
import { type FakeModelServer, startFakeModelServer } from './helpers/fake-model-server.js';

const JSON_TYPE = { 'content-type': 'application/json' };

describe('request input: integers, empty bodies, unstorable text', () => {
  let t: TestApp;
  let fake: FakeModelServer;
  let org: TestOrg;
  let chatId: number;
  let memoSlug: string;
  let skillId: number;

  beforeAll(async () => {
    fake = await startFakeModelServer();
    t = await buildTestApp();
    org = await createOrg(t);
    await useFakeModel(t, org, fake);
    const chat = await call(t, 'POST', '/api/v2/chats', {
      key: org.orgKey,
      body: { project_id: org.projectId },
    });
    expectStatus(chat, 201);
    chatId = chat.body.response.chat.id;
    const memo = await createArtifactType(t, org, 'memo', 'Memo');
    memoSlug = memo.slug;
    skillId = (
      await createSkill(t, org, {
        name: 'Topic',
        content: 'About {custom.topic}.',
        variables: ['topic'],
        typeIds: [memo.id],
      })
    ).id;
  });
  afterAll(async () => {
    await t.close();
    await fake.close();
  });
  beforeEach(() => fake.reset());

  it('refuses integers in paths and query strings that are not written in digits', async () => {
    for (const q of ['page=1e1', 'page=0x2', 'page=%201', 'page=%2B1', 'page_size=1.0', 'page_size=1e2']) {
      expectV2Error(await call(t, 'GET', `/api/v2/chats?${q}`, { key: org.orgKey }), 400, 'invalid_request');
      expectV1Error(await call(t, 'GET', `/api/v1/users?${q}`, { key: org.orgKey }), 400, 'invalid_request');
    }
    for (const id of ['1e1', `${chatId}.0`, '0x1']) {
      expectV2Error(await call(t, 'GET', `/api/v2/chats/${id}`, { key: org.orgKey }), 400, 'invalid_request');
    }
    // Digits still work, leading zeros included.
    const page = await call(t, 'GET', '/api/v2/chats?page=01&page_size=007', { key: org.orgKey });
    expectStatus(page, 200);
    expect(page.body.response.pagination).toMatchObject({ page: 1, page_size: 7 });
    expectStatus(await call(t, 'GET', `/api/v2/chats/${chatId}`, { key: org.orgKey }), 200);
  });

  it('answers a page far past the end with an empty page, never a database error', async () => {
    for (const page of ['21474838', '2147483648', '999999999999999']) {
      const list = await call(t, 'GET', `/api/v2/chats?page=${page}&page_size=100`, { key: org.orgKey });
      expectStatus(list, 200);
      expect(list.body.response.chats).toEqual([]);
      expect(list.body.response.pagination).toMatchObject({ page: Number(page), total_count: 1 });
      const history = await call(t, 'GET', `/api/v2/chats/${chatId}/messages?page=${page}&page_size=100`, {
        key: org.orgKey,
      });
      expectStatus(history, 200);
      expect(history.body.response.messages).toEqual([]);
      const users = await call(t, 'GET', `/api/v1/users?page=${page}&page_size=100`, { key: org.orgKey });
      expectStatus(users, 200);
      expect(users.body.users).toEqual([]);
    }
  });

  it('lets a request without a body but with a JSON content type reach a route that takes none', async () => {
    const project = await call(t, 'POST', '/api/v1/projects', {
      key: org.orgKey,
      body: { name: 'Short-lived', group_ids: [org.defaultGroupId] },
    });
    expectStatus(project, 201);
    const archived = await call(t, 'POST', `/api/v1/projects/${project.body.project.id}/archive`, {
      key: org.orgKey,
      headers: JSON_TYPE,
    });
    expectStatus(archived, 200);
    expectV1Error(
      await call(t, 'DELETE', '/api/v1/projects/999999', { key: org.orgKey, headers: JSON_TYPE }),
      404,
    );
    const chat = await call(t, 'POST', '/api/v2/chats', {
      key: org.orgKey,
      body: { project_id: org.projectId },
    });
    const removed = await call(t, 'DELETE', `/api/v2/chats/${chat.body.response.chat.id}`, {
      key: org.orgKey,
      headers: JSON_TYPE,
    });
    expect(removed.status).toBe(204);
    // A route that takes a body still calls an empty one malformed.
    expectV1Error(
      await call(t, 'POST', '/api/v1/projects', { key: org.orgKey, headers: JSON_TYPE, body: '' }),
      400,
      'malformed_json',
    );
  });

  it('reads no body as {} where every body field is optional, and OpenAPI says the body may be left out', async () => {
    const doc = (await call(t, 'GET', '/openapi.json')).body;
    const operations = Object.values<any>(doc.paths).flatMap((item) => Object.values<any>(item));
    const byId = (id: string) => operations.find((o) => o.operationId === id);
    expect(byId('regenerateMessage').requestBody.required).toBe(false);
    expect(byId('createProject').requestBody.required).toBe(true);
    // An update whose fields are all optional: no body, or an empty one with a JSON type, changes nothing.
    const project = await call(t, 'POST', '/api/v1/projects', {
      key: org.orgKey,
      body: { name: 'Unchanged', group_ids: [org.defaultGroupId] },
    });
    for (const headers of [{}, JSON_TYPE]) {
      const updated = await call(t, 'PUT', `/api/v1/projects/${project.body.project.id}`, {
        key: org.orgKey,
        headers,
      });
      expectStatus(updated, 200);
      expect(updated.body.project.name).toBe('Unchanged');
    }
  });

  it('answers a body of another type than JSON 415, plain text included', async () => {
    for (const type of ['text/plain', 'application/xml', 'application/x-www-form-urlencoded']) {
      const v2 = await call(t, 'POST', '/api/v2/chats', {
        key: org.orgKey,
        headers: { 'content-type': type },
        body: 'hello',
      });
      expectV2Error(v2, 415, 'unsupported_media_type');
      const v1 = await call(t, 'POST', '/api/v1/projects', {
        key: org.orgKey,
        headers: { 'content-type': type },
        body: 'hello',
      });
      expectV1Error(v1, 415, 'unsupported_media_type');
    }
  });

  it('holds a chat message to 1,048,576 characters, though the chat routes take 70 MB for attachments', async () => {
    const long = 'x'.repeat(1_048_577);
    const created = await call(t, 'POST', '/api/v2/chats', {
      key: org.orgKey,
      body: { project_id: org.projectId, content: long },
    });
    expectV2Error(created, 400, 'invalid_request');
    expect(created.body.response.message).toContain('content');
    expectV2Error(
      await call(t, 'POST', `/api/v2/chats/${chatId}/messages`, { key: org.orgKey, body: { content: long } }),
      400,
      'invalid_request',
    );
    expect(fake.chatRequests()).toHaveLength(0);
  });

  it('refuses a value outside a closed list (a role, a key kind) with 422 naming the field', async () => {
    const role = await call(t, 'POST', '/api/v1/users', {
      key: org.orgKey,
      body: { email: 'owner@example.com', role: 'owner' },
    });
    expectV1Error(role, 422, 'validation_failed');
    expect(role.body.error.details).toEqual({ role: ['must be one of: admin, member'] });
    const kind = await call(t, 'POST', '/api/v1/api_keys', {
      key: org.orgKey,
      body: { kind: 'super_admin' },
    });
    expectV1Error(kind, 422, 'validation_failed');
    expect(Object.keys(kind.body.error.details)).toEqual(['kind']);
    // Still a 400 when the type is wrong.
    expectV1Error(await call(t, 'POST', '/api/v1/api_keys', { key: org.orgKey, body: { kind: 7 } }), 400);
  });

  it("tells a member that a read is refused as a read: the organization's webhooks", async () => {
    const member = await createMember(t, org);
    for (const url of ['/api/v1/webhooks', '/api/v1/webhooks/1', '/api/v1/webhooks/1/deliveries']) {
      const res = await call(t, 'GET', url, { key: member.key });
      expectV1Error(res, 403, 'forbidden');
      expect(res.body.error.message).toBe(
        "Members may not read the organization's webhooks; only organization admins may",
      );
    }
  });

  it('refuses a name of only whitespace (422, must not be blank), wherever a resource is named', async () => {
    for (const [url, body] of [
      ['/api/v1/artifact_types', { name: ' \t ' }],
      ['/api/v1/projects', { name: '   ', group_ids: [org.defaultGroupId] }],
      ['/api/v1/groups', { name: '\n' }],
      ['/api/v1/categories', { name: '  ', use_default_group: true }],
    ] as const) {
      const res = await call(t, 'POST', url, { key: org.orgKey, body });
      expectV1Error(res, 422, 'validation_failed');
      expect(res.body.error.details).toEqual({ name: ['must not be blank'] });
    }
    const spaced = await call(t, 'POST', '/api/v1/groups', { key: org.orgKey, body: { name: ' Team ' } });
    expectStatus(spaced, 201);
  });

  it('refuses a NUL character or a lone surrogate with a 400 naming the field, before the model runs', async () => {
    const generate = (body: string, stream = false) =>
      call(
        t,
        'POST',
        `/api/v1/artifact_types/${memoSlug}/artifacts${stream ? '/stream' : ''}?project_id=${org.projectId}`,
        {
          key: org.orgKey,
          headers: JSON_TYPE,
          body,
        },
      );
    const nul = `{"skill_id":${skillId},"inputs":[{"name":"topic","value":"a\\u0000b"}]}`;
    for (const stream of [false, true]) {
      const res = await generate(nul, stream);
      expectV1Error(res, 400, 'invalid_request');
      expect(res.body.error.details).toEqual({
        'inputs.0.value': ['must not contain a NUL character or a lone surrogate'],
      });
    }
    const surrogate = await generate(`{"skill_id":${skillId},"inputs":[],"name":"\\udfff"}`);
    expectV1Error(surrogate, 400, 'invalid_request');
    expect(Object.keys(surrogate.body.error.details)).toEqual(['name']);
    const chat = await call(t, 'POST', `/api/v2/chats/${chatId}/messages`, {
      key: org.orgKey,
      headers: JSON_TYPE,
      body: '{"content":"hi \\ud800 there"}',
    });
    expectV2Error(chat, 400, 'invalid_request');
    expect(fake.chatRequests()).toHaveLength(0);
    // An escaped backslash before "u0000" is text, and a surrogate pair is one character.
    fake.enqueue({ text: 'Done.' });
    const fine = await generate(
      `{"skill_id":${skillId},"inputs":[{"name":"topic","value":"\\\\u0000 \\ud83d\\ude00"}]}`,
    );
    expectStatus(fine, 201);
  });
});

describe('rate limiting of requests without a valid key', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await buildTestApp({ RATE_LIMIT_PER_MINUTE: '3' });
  });
  afterAll(() => t.close());

  it('counts requests without a key against the address', async () => {
    for (let i = 0; i < 3; i++) expectV1Error(await call(t, 'GET', '/api/v1/projects'), 401);
    const limited = await call(t, 'GET', '/api/v1/projects');
    expectV1Error(limited, 429, 'rate_limited');
    expect(String(limited.headers['retry-after'])).toMatch(/^\d+$/);
  });

  it('counts keys nobody holds against the address too, however many are tried', async () => {
    const guess = (i: number, family: 'v1' | 'v2') =>
      call(t, 'GET', family === 'v1' ? '/api/v1/projects' : '/api/v2/chats', {
        key: `sk_org_guess${i}${Math.random()}`,
        remoteAddress: '10.0.0.7',
      });
    expectV1Error(await guess(1, 'v1'), 401);
    expectV2Error(await guess(2, 'v2'), 403);
    expectV1Error(await guess(3, 'v1'), 401);
    const limited = await guess(4, 'v2');
    expectV2Error(limited, 429, 'rate_limited');
    expect(String(limited.headers['retry-after'])).toMatch(/^\d+$/);
    expectV1Error(await guess(5, 'v1'), 429, 'rate_limited');
    // A valid key from the same address keeps its own budget.
    const org = await call(t, 'GET', '/api/v1/projects', {
      key: t.boot.organization_key,
      remoteAddress: '10.0.0.7',
    });
    expectStatus(org, 200);
  });
});

describe('requests the HTTP parser refuses', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestServer();
  });
  afterAll(() => t.close());

  /** Sends raw bytes and reads the whole answer (the server closes the connection). */
  function raw(bytes: Buffer): Promise<{ status: number; body: any }> {
    const { port } = new URL(t.baseUrl);
    return new Promise((resolve, reject) => {
      const socket = connect(Number(port), '127.0.0.1', () => socket.end(bytes));
      const chunks: Buffer[] = [];
      socket.on('data', (chunk) => chunks.push(chunk));
      socket.on('error', reject);
      socket.on('close', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        const [head, body] = text.split('\r\n\r\n');
        resolve({ status: Number(head!.split(' ')[1]), body: JSON.parse(body!) });
      });
    });
  }

  it('answers a malformed request line in the family error body', async () => {
    const line = (path: string) =>
      Buffer.concat([
        Buffer.from(`GET ${path}?page=`),
        Buffer.from([0xef, 0xbc, 0x91]),
        Buffer.from(' HTTP/1.1\r\nHost: x\r\n\r\n'),
      ]);
    const v2 = await raw(line('/api/v2/chats'));
    expect(v2).toEqual({
      status: 400,
      body: {
        status: 'error',
        response: { code: 400, error: 'invalid_request', message: 'The HTTP request is malformed' },
      },
    });
    const v1 = await raw(line('/api/v1/projects'));
    expect(v1).toEqual({
      status: 400,
      body: { error: { message: 'The HTTP request is malformed', code: 'invalid_request', details: {} } },
    });
  });
});

describe('requests while the process drains', () => {
  it('are answered 503 shutting_down in the family envelope, with Connection: close', async () => {
    const fake = await startFakeModelServer();
    const t = await startTestServer();
    try {
      const org = await createOrg(t);
      await useFakeModel(t, org, fake);
      // A turn that runs until released holds the drain open (the grace period waits for it).
      let release!: () => void;
      fake.enqueue({ text: 'Late reply.', holdUntil: new Promise<void>((resolve) => (release = resolve)) });
      const turn = call(t, 'POST', '/api/v2/chats', {
        key: org.orgKey,
        body: { project_id: org.projectId, content: 'Hold on' },
      });
      await fake.waitForRequests(1);
      const closed = t.app.close();
      // Over HTTP (inject is refused once close() began); the listener stays open while the
      // drain waits for the turn, and close() runs its preClose hooks a few ticks later.
      const get = async (path: string) => {
        const res = await fetch(`${t.baseUrl}${path}`, {
          headers: { authorization: `Bearer ${org.orgKey}` },
        });
        return { status: res.status, connection: res.headers.get('connection'), body: await res.json() };
      };
      await expect.poll(async () => (await get('/health')).status).toBe(503);
      const v2 = await get('/api/v2/chats');
      expect(v2).toEqual({
        status: 503,
        connection: 'close',
        body: {
          status: 'error',
          response: { code: 503, error: 'shutting_down', message: expect.any(String) },
        },
      });
      const v1 = await get('/api/v1/projects');
      expect(v1.body).toEqual({ error: { code: 'shutting_down', message: expect.any(String), details: {} } });
      release();
      expectStatus(await turn, 201);
      await closed;
    } finally {
      await t.close().catch(() => {});
      await fake.close();
    }
  });
});
