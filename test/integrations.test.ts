import { lookup } from 'node:dns/promises';
import os from 'node:os';
import { eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../src/app.js';
import { loadConfig } from '../src/config.js';
import { integrations } from '../src/db/schema/index.js';
import { isPrivateAddress } from '../src/net/outbound.js';
import {
  buildTestApp,
  call,
  createMember,
  createOrg,
  createTestRoot,
  expectStatus,
  expectV1Error,
  type TestApp,
  type TestOrg,
  TIMESTAMP,
  testEnv,
} from './helpers/app.js';
import { describeAuthMatrix } from './helpers/auth-matrix.js';
import { startMcpServer, type TestMcpServer, unusedLoopbackUrl } from './helpers/mcp-server.js';

const body = { name: 'Tools', url: 'https://tools.example.com/mcp' };

describeAuthMatrix('v1', [
  { method: 'GET', url: '/api/v1/integrations' },
  { method: 'POST', url: '/api/v1/integrations', body, write: true },
  { method: 'GET', url: '/api/v1/integrations/999999' },
  { method: 'PUT', url: '/api/v1/integrations/999999', body: { name: 'x' }, write: true },
  { method: 'DELETE', url: '/api/v1/integrations/999999', write: true },
  { method: 'GET', url: '/api/v1/integrations/999999/tools' },
]);

const SECRET = 'Bearer sk-live-very-secret-token-1234';

describe('integrations API', () => {
  let t: TestApp;
  let org: TestOrg;
  let server: TestMcpServer;

  beforeAll(async () => {
    t = await buildTestApp({ OUTBOUND_ALLOW_PRIVATE: 'true' });
    org = await createOrg(t);
    server = await startMcpServer({ requireAuthorization: SECRET });
  });
  afterAll(async () => {
    await t?.close();
    await server?.close();
  });

  const create = (payload: unknown, key = org.orgKey) =>
    call(t, 'POST', '/api/v1/integrations', { key, body: payload });

  it('creates with defaults: every project, enabled; 201 with the v1 shape', async () => {
    const res = await create({ name: 'Ticket Desk', url: 'https://tickets.example.com/mcp' });
    expectStatus(res, 201);
    expect(res.body).toEqual({
      integration: {
        id: expect.any(Number),
        name: 'Ticket Desk',
        slug: 'ticket-desk',
        url: 'https://tickets.example.com/mcp',
        header_names: [],
        all_projects: true,
        project_ids: [],
        enabled: true,
        created_at: expect.stringMatching(TIMESTAMP),
        updated_at: expect.stringMatching(TIMESTAMP),
      },
    });
  });

  it('never returns header values, stores them encrypted, and shows only their names', async () => {
    const res = await create({
      name: 'Secret tools',
      url: server.url,
      headers: { Authorization: SECRET, 'X-Team': 'blue-team-value' },
    });
    expectStatus(res, 201);
    const id = res.body.integration.id;
    expect(res.body.integration.header_names).toEqual(['Authorization', 'X-Team']);
    const responses = [
      res,
      await call(t, 'GET', `/api/v1/integrations/${id}`, { key: org.orgKey }),
      await call(t, 'GET', '/api/v1/integrations', { key: org.orgKey }),
      await call(t, 'PUT', `/api/v1/integrations/${id}`, {
        key: org.orgKey,
        body: { name: 'Secret tools 2' },
      }),
      await call(t, 'GET', `/api/v1/integrations/${id}/tools`, { key: org.orgKey }),
    ];
    for (const r of responses) {
      expect(r.status).toBeLessThan(300);
      expect(r.raw.body).not.toContain('very-secret');
      expect(r.raw.body).not.toContain('blue-team-value');
      expect(r.raw.body).not.toMatch(/"headers"/);
    }
    const [row] = await t.deps.database.db.select().from(integrations).where(eq(integrations.id, id));
    expect(row.headersEncrypted).toBeTruthy();
    expect(row.headersEncrypted).not.toContain('very-secret');
    expect(JSON.parse(t.deps.secrets.decrypt(row.headersEncrypted!))).toEqual({
      Authorization: SECRET,
      'X-Team': 'blue-team-value',
    });
    // The stored headers reach the server: it refuses requests without them.
    expect(server.requests.some((r) => r.headers.authorization === SECRET)).toBe(true);
    expect(server.requests.every((r) => r.headers.authorization === SECRET)).toBe(true);
  });

  it('lists the server tools with names, descriptions and input schemas', async () => {
    const res = await create({ name: 'Lister', url: server.url, headers: { Authorization: SECRET } });
    expectStatus(res, 201);
    const tools = await call(t, 'GET', `/api/v1/integrations/${res.body.integration.id}/tools`, {
      key: org.orgKey,
    });
    expectStatus(tools, 200);
    const byName = Object.fromEntries(tools.body.tools.map((tool: any) => [tool.name, tool]));
    expect(Object.keys(byName).sort()).toEqual(['add', 'echo', 'explode', 'fail', 'hang']);
    expect(byName.echo).toEqual({
      name: 'echo',
      model_name: 'lister__echo',
      description: 'Echoes the text back',
      input_schema: expect.objectContaining({
        type: 'object',
        properties: { text: expect.objectContaining({ type: 'string', description: 'What to echo' }) },
        required: ['text'],
      }),
    });
    expect(byName.add.input_schema.properties).toEqual({
      a: expect.objectContaining({ type: 'number' }),
      b: expect.objectContaining({ type: 'number' }),
    });
  });

  it('lets members list and read integrations and their tools, but not write them', async () => {
    const member = await createMember(t, org);
    const created = await create({
      name: 'Member visible',
      url: server.url,
      headers: { Authorization: SECRET },
    });
    const id = created.body.integration.id;
    expectStatus(await call(t, 'GET', '/api/v1/integrations', { key: member.key }), 200);
    expectStatus(await call(t, 'GET', `/api/v1/integrations/${id}`, { key: member.key }), 200);
    expectStatus(await call(t, 'GET', `/api/v1/integrations/${id}/tools`, { key: member.key }), 200);
    expectV1Error(await create(body, member.key), 403, 'forbidden');
    expectV1Error(
      await call(t, 'PUT', `/api/v1/integrations/${id}`, { key: member.key, body: { enabled: false } }),
      403,
      'forbidden',
    );
    expectV1Error(
      await call(t, 'DELETE', `/api/v1/integrations/${id}`, { key: member.key }),
      403,
      'forbidden',
    );
  });

  it('answers 502 integration_unavailable when the server is down or refuses the headers', async () => {
    const down = await create({ name: 'Down', url: await unusedLoopbackUrl() });
    const res = await call(t, 'GET', `/api/v1/integrations/${down.body.integration.id}/tools`, {
      key: org.orgKey,
    });
    expectV1Error(res, 502, 'integration_unavailable');
    expect(res.body.error.message).toMatch(/could not be reached: connection failed \(ECONNREFUSED\)/);

    const wrong = await create({
      name: 'Wrong key',
      url: server.url,
      headers: { Authorization: 'Bearer nope' },
    });
    const refused = await call(t, 'GET', `/api/v1/integrations/${wrong.body.integration.id}/tools`, {
      key: org.orgKey,
    });
    expectV1Error(refused, 502, 'integration_unavailable');
    expect(refused.body.error.message).toContain('401');
    expect(refused.body.error.message).toContain('[redacted]');
    expect(refused.raw.body).not.toContain('Bearer nope');
  });

  it('falls back to the HTTP+SSE transport for older servers', async () => {
    const old = await startMcpServer({ transport: 'sse' });
    try {
      const created = await create({ name: 'Old server', url: old.url });
      const id = created.body.integration.id;
      const res = await call(t, 'GET', `/api/v1/integrations/${id}/tools`, { key: org.orgKey });
      expectStatus(res, 200);
      expect(res.body.tools.map((tool: any) => tool.name)).toContain('echo');
      expect(await t.deps.mcp.transportOf(id)).toBe('sse');
      // It tried Streamable HTTP first (a POST to the endpoint), then opened the event stream.
      expect(old.requests[0]).toMatchObject({ method: 'POST', path: '/sse' });
      expect(old.requests.some((r) => r.method === 'GET' && r.path === '/sse')).toBe(true);
    } finally {
      await old.close();
    }
  });

  it('uses Streamable HTTP when the server speaks it', async () => {
    const created = await create({ name: 'Modern', url: server.url, headers: { Authorization: SECRET } });
    const id = created.body.integration.id;
    expectStatus(await call(t, 'GET', `/api/v1/integrations/${id}/tools`, { key: org.orgKey }), 200);
    expect(await t.deps.mcp.transportOf(id)).toBe('streamable-http');
  });

  it('scopes to given projects, which must be the organization’s', async () => {
    const other = await createOrg(t);
    const scoped = await create({
      name: 'Scoped',
      url: server.url,
      project_ids: [org.projectId, org.projectId],
    });
    expectStatus(scoped, 201);
    expect(scoped.body.integration).toMatchObject({ all_projects: false, project_ids: [org.projectId] });

    const foreign = await create({ name: 'Foreign', url: server.url, project_ids: [other.projectId] });
    expectV1Error(foreign, 422);
    expect(foreign.body.error.details.project_ids[0]).toContain(String(other.projectId));

    const id = scoped.body.integration.id;
    const widened = await call(t, 'PUT', `/api/v1/integrations/${id}`, {
      key: org.orgKey,
      body: { project_ids: null },
    });
    expectStatus(widened, 200);
    expect(widened.body.integration).toMatchObject({ all_projects: true, project_ids: [] });
    const narrowed = await call(t, 'PUT', `/api/v1/integrations/${id}`, {
      key: org.orgKey,
      body: { project_ids: [org.projectId] },
    });
    expect(narrowed.body.integration).toMatchObject({ all_projects: false, project_ids: [org.projectId] });
  });

  it('keeps an integration scoped to nothing when its only project is deleted, rather than every project', async () => {
    const made = await call(t, 'POST', '/api/v1/projects', {
      key: org.orgKey,
      body: { name: 'Short-lived', use_default_group: true },
    });
    const project = made.body.project as { id: number };
    const created = await create({ name: 'Narrow', url: server.url, project_ids: [project.id] });
    // Deleted through the API: a soft delete, which no foreign key cascades.
    const deleted = await call(t, 'DELETE', `/api/v1/projects/${project.id}`, { key: org.orgKey });
    expect(deleted.status).toBe(200);
    const res = await call(t, 'GET', `/api/v1/integrations/${created.body.integration.id}`, {
      key: org.orgKey,
    });
    expect(res.body.integration).toMatchObject({ all_projects: false, project_ids: [] });
  });

  it('updates fields, keeps the slug on rename, and replaces or clears headers', async () => {
    const created = await create({ name: 'Renamable', url: server.url, headers: { Authorization: SECRET } });
    const id = created.body.integration.id;
    const updated = await call(t, 'PUT', `/api/v1/integrations/${id}`, {
      key: org.orgKey,
      body: { name: 'Renamed', enabled: false, url: 'https://new.example.com/mcp' },
    });
    expectStatus(updated, 200);
    expect(updated.body.integration).toMatchObject({
      name: 'Renamed',
      slug: 'renamable',
      enabled: false,
      url: 'https://new.example.com/mcp',
      header_names: ['Authorization'],
    });
    expect(updated.body.integration.updated_at >= created.body.integration.updated_at).toBe(true);
    const cleared = await call(t, 'PUT', `/api/v1/integrations/${id}`, {
      key: org.orgKey,
      body: { headers: null },
    });
    expect(cleared.body.integration.header_names).toEqual([]);
    const [row] = await t.deps.database.db.select().from(integrations).where(eq(integrations.id, id));
    expect(row.headersEncrypted).toBeNull();
  });

  it('gives clashing names distinct slugs so their tools never clash', async () => {
    const a = await create({ name: 'Twin', url: server.url });
    const b = await create({ name: 'Twin', url: server.url });
    expect([a.body.integration.slug, b.body.integration.slug]).toEqual(['twin', 'twin-2']);
  });

  it('validates bodies: 422 for rule failures, 400 for wrong types', async () => {
    const cases: [unknown, number, string][] = [
      [{ url: server.url }, 422, 'name'],
      [{ name: '', url: server.url }, 422, 'name'],
      [{ name: 'x'.repeat(101), url: server.url }, 422, 'name'],
      [{ name: 'x', url: 'not a url' }, 422, 'url'],
      [{ name: 'x', url: 'ftp://example.com/mcp' }, 422, 'url'],
      [{ name: 'x', url: 'https://user:pw@example.com/mcp' }, 422, 'url'],
      [{ name: 'x', url: server.url, headers: { Host: 'evil.example.com' } }, 422, 'headers'],
      [{ name: 'x', url: server.url, headers: { 'bad name': 'v' } }, 422, 'headers'],
      [{ name: 'x', url: server.url, headers: { 'X-A': 'line\r\nInjected: 1' } }, 422, 'headers'],
      [{ name: 'x', url: server.url, headers: { 'X-A': 1 } }, 400, 'headers.X-A'],
      [{ name: 'x', url: server.url, enabled: 'true' }, 400, 'enabled'],
      [{ name: 'x', url: server.url, project_ids: ['1'] }, 400, 'project_ids.0'],
      [{ name: 'x', url: server.url, project_ids: [0] }, 400, 'project_ids.0'],
    ];
    for (const [payload, status, field] of cases) {
      const res = await create(payload);
      expect({ payload, status: res.status, details: res.body.error?.details }).toMatchObject({
        status,
        details: { [field]: expect.any(Array) },
      });
      expectV1Error(res, status);
    }
    // A refused header value is never echoed back.
    const res = await create({ name: 'x', url: server.url, headers: { 'X-A': 'secret\nvalue' } });
    expect(res.raw.body).not.toContain('secret');
  });

  it('paginates the list and hides other organizations’ integrations (404)', async () => {
    const other = await createOrg(t);
    const theirs = await call(t, 'POST', '/api/v1/integrations', {
      key: other.orgKey,
      body: { name: 'Theirs', url: server.url },
    });
    expectStatus(theirs, 201);
    const id = theirs.body.integration.id;
    for (const [method, url, payload] of [
      ['GET', `/api/v1/integrations/${id}`, undefined],
      ['PUT', `/api/v1/integrations/${id}`, { name: 'Mine now' }],
      ['DELETE', `/api/v1/integrations/${id}`, undefined],
      ['GET', `/api/v1/integrations/${id}/tools`, undefined],
    ] as const) {
      expectV1Error(
        await call(t, method, url, { key: org.orgKey, body: payload }),
        404,
        'integration_not_found',
      );
    }
    const page = await call(t, 'GET', '/api/v1/integrations?page=1&page_size=2', { key: org.orgKey });
    expectStatus(page, 200);
    expect(page.body.integrations).toHaveLength(2);
    expect(page.body.pagination.page_size).toBe(2);
    expect(page.body.pagination.total_count).toBeGreaterThan(2);
    expect(page.body.integrations.every((i: any) => i.id !== id)).toBe(true);
    expectV1Error(await call(t, 'GET', '/api/v1/integrations?page_size=101', { key: org.orgKey }), 400);
  });

  it('deletes with 200 {message}; the integration is gone', async () => {
    const created = await create({ name: 'Doomed', url: server.url });
    const id = created.body.integration.id;
    const res = await call(t, 'DELETE', `/api/v1/integrations/${id}`, { key: org.orgKey });
    expectStatus(res, 200);
    expect(res.body).toEqual({ message: expect.any(String) });
    expectV1Error(await call(t, 'GET', `/api/v1/integrations/${id}`, { key: org.orgKey }), 404);
  });

  it('is in the OpenAPI document', async () => {
    const res = await call(t, 'GET', '/openapi.json');
    expect(Object.keys(res.body.paths)).toEqual(
      expect.arrayContaining([
        '/api/v1/integrations',
        '/api/v1/integrations/{id}',
        '/api/v1/integrations/{id}/tools',
      ]),
    );
  });
});

describe('integrations without OUTBOUND_ALLOW_PRIVATE', () => {
  let t: TestApp;
  let org: TestOrg;
  let server: TestMcpServer;

  beforeAll(async () => {
    t = await buildTestApp();
    org = await createOrg(t);
    server = await startMcpServer();
  });
  afterAll(async () => {
    await t?.close();
    await server?.close();
  });

  it('refuses http:// and private addresses when saving (422 with details)', async () => {
    for (const url of [
      server.url,
      'https://127.0.0.1/mcp',
      'https://localhost/mcp',
      'https://10.1.2.3/mcp',
      'https://[::127.0.0.1]/mcp',
      'https://[2002:7f00:1::]/mcp',
      'https://tools.localhost./mcp',
    ]) {
      const res = await call(t, 'POST', '/api/v1/integrations', {
        key: org.orgKey,
        body: { name: 'x', url },
      });
      expectV1Error(res, 422, 'validation_failed');
      expect(res.body.error.details.url).toEqual([expect.stringMatching(/https|public/)]);
    }
    const ok = await call(t, 'POST', '/api/v1/integrations', {
      key: org.orgKey,
      body: { name: 'Public', url: 'https://tools.example.com/mcp' },
    });
    expectStatus(ok, 201);
    expectV1Error(
      await call(t, 'PUT', `/api/v1/integrations/${ok.body.integration.id}`, {
        key: org.orgKey,
        body: { url: 'http://tools.example.com/mcp' },
      }),
      422,
    );
  });

  it('checks the resolved address when connecting: a public-looking name that resolves privately is refused', async () => {
    const host = os.hostname();
    const resolved = await lookup(host, { all: true });
    // The machine's own name resolves to loopback or a private address in every environment we run in.
    expect(resolved.every((a) => isPrivateAddress(a.address))).toBe(true);
    const port = new URL(server.url).port;
    const created = await call(t, 'POST', '/api/v1/integrations', {
      key: org.orgKey,
      body: { name: 'Rebinding', url: `https://${host}:${port}/mcp` },
    });
    expectStatus(created, 201);
    const res = await call(t, 'GET', `/api/v1/integrations/${created.body.integration.id}/tools`, {
      key: org.orgKey,
    });
    expectV1Error(res, 502, 'integration_unavailable');
    expect(res.body.error.message).toContain('resolves to a private address');
    expect(server.requests).toHaveLength(0);
  });

  it('checks the URL rule again when connecting (a URL saved while private addresses were allowed)', async () => {
    // A second app on the same database, as another process started with OUTBOUND_ALLOW_PRIVATE.
    const root = await createTestRoot(loadConfig(testEnv({ OUTBOUND_ALLOW_PRIVATE: 'true' })), {
      database: t.deps.database,
      jobs: t.deps.jobs,
    });
    const permissive = { app: await buildApp(root, { logger: false }) } as TestApp;
    try {
      const created = await call(permissive, 'POST', '/api/v1/integrations', {
        key: org.orgKey,
        body: { name: 'Saved earlier', url: server.url },
      });
      expectStatus(created, 201);
      const id = created.body.integration.id;
      expectStatus(
        await call(permissive, 'GET', `/api/v1/integrations/${id}/tools`, { key: org.orgKey }),
        200,
      );
      const before = server.requests.length;
      const res = await call(t, 'GET', `/api/v1/integrations/${id}/tools`, { key: org.orgKey });
      expectV1Error(res, 502, 'integration_unavailable');
      expect(res.body.error.message).toContain('must use https');
      expect(server.requests.length).toBe(before);
    } finally {
      await permissive.app.close();
      await root.close();
    }
  });
});
