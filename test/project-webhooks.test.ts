import { eq } from 'drizzle-orm';
import { Webhook as StandardWebhook } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { projectWebhooks } from '../src/db/schema/index.js';
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

const HOOK = { url: 'https://hooks.example.com/scriptorium', events: ['artifact_generated'] };

describeAuthMatrix('v1', [
  { method: 'GET', url: (o) => `/api/v1/projects/${o.projectId}/webhooks` },
  { method: 'POST', url: (o) => `/api/v1/projects/${o.projectId}/webhooks`, body: HOOK, write: true },
  { method: 'GET', url: (o) => `/api/v1/projects/${o.projectId}/webhooks/999999` },
  { method: 'DELETE', url: (o) => `/api/v1/projects/${o.projectId}/webhooks/999999`, write: true },
]);

describe('project webhooks', () => {
  let t: TestApp;
  let org: TestOrg;
  let other: TestOrg;
  beforeAll(async () => {
    t = await buildTestApp();
    org = await createOrg(t);
    other = await createOrg(t);
  });
  afterAll(() => t.close());

  const hooksOf = (o: TestOrg, projectId = o.projectId) => `/api/v1/projects/${projectId}/webhooks`;
  const post = (body: unknown, o = org) => call(t, 'POST', hooksOf(o), { key: o.orgKey, body });

  it('creates a webhook and returns its whsec_ secret once', async () => {
    const res = await post({
      url: 'https://hooks.example.com/in',
      events: ['artifact_refined', 'artifact_generated', 'artifact_generated'],
    });
    expectStatus(res, 201);
    expect(res.body).toEqual({
      webhook: {
        id: expect.any(Number),
        project_id: org.projectId,
        url: 'https://hooks.example.com/in',
        events: ['artifact_generated', 'artifact_refined'],
        secret: expect.stringMatching(/^whsec_[A-Za-z0-9+/]+={0,2}$/),
        created_at: expect.stringMatching(TIMESTAMP),
        updated_at: expect.stringMatching(TIMESTAMP),
      },
    });
    const { id, secret } = res.body.webhook;
    expect(Buffer.from(secret.slice('whsec_'.length), 'base64')).toHaveLength(32);

    // Stored encrypted, and usable to sign as Standard Webhooks receivers verify.
    const [row] = await t.deps.database.db.select().from(projectWebhooks).where(eq(projectWebhooks.id, id));
    expect(row.secretEncrypted).not.toContain(secret.slice(6));
    const stored = t.deps.secrets.decrypt(row.secretEncrypted);
    expect(stored).toBe(secret);
    const payload = JSON.stringify({ event_name: 'artifact_generated', event_data: {} });
    const now = new Date();
    const signature = new StandardWebhook(stored).sign('msg_1', now, payload);
    const headers = {
      'webhook-id': 'msg_1',
      'webhook-timestamp': String(Math.floor(now.getTime() / 1000)),
      'webhook-signature': signature,
    };
    expect(new StandardWebhook(secret).verify(payload, headers)).toEqual(JSON.parse(payload));

    const list = await call(t, 'GET', hooksOf(org), { key: org.orgKey });
    expectStatus(list, 200);
    const { secret: _shown, ...withoutSecret } = res.body.webhook;
    expect(list.body.webhooks).toEqual([withoutSecret]);
    expect(list.body.pagination).toEqual({ page: 1, page_size: 50, total_count: 1, total_pages: 1 });
    const one = await call(t, 'GET', `${hooksOf(org)}/${id}`, { key: org.orgKey });
    expect(one.body).toEqual({ webhook: withoutSecret });
    expect(JSON.stringify([list.body, one.body])).not.toContain(secret.slice(6));
  });

  it('gives every webhook its own secret', async () => {
    const a = await post(HOOK);
    const b = await post(HOOK);
    expect(a.body.webhook.secret).not.toBe(b.body.webhook.secret);
  });

  it('refuses events outside the three names (422 naming events)', async () => {
    for (const events of [['artifact_deleted'], ['artifact_generated', 'chat_created'], []]) {
      const res = await post({ url: HOOK.url, events });
      expectV1Error(res, 422);
      expect(Object.keys(res.body.error.details)).toEqual(['events']);
    }
    const missing = await post({ url: HOOK.url });
    expectV1Error(missing, 422);
    expect(missing.body.error.details).toEqual({ events: ['is required'] });
    expectV1Error(await post({ url: HOOK.url, events: 'artifact_generated' }), 400);
  });

  it('refuses URLs that are not https on a public address (422 naming url)', async () => {
    for (const url of [
      'http://hooks.example.com/in',
      'https://127.0.0.1/in',
      'https://localhost:8443/in',
      'https://10.1.2.3/in',
      'https://[::1]/in',
      // The probe's escapes: IPv4-compatible, 6to4, Teredo, site-local, a trailing dot.
      'https://[::127.0.0.1]/in',
      'https://[2002:7f00:1::]/in',
      'https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/in',
      'https://[fec0::1]/in',
      'https://localhost./in',
      'https://user:pw@hooks.example.com/in',
      'ftp://hooks.example.com/in',
      'not a url',
    ]) {
      const res = await post({ url, events: ['artifact_generated'] });
      expectV1Error(res, 422);
      expect({ url, fields: Object.keys(res.body.error.details) }).toEqual({ url, fields: ['url'] });
    }
    const both = await post({ url: 'http://127.0.0.1/', events: ['nope'] });
    expect(Object.keys(both.body.error.details).sort()).toEqual(['events', 'url']);
  });

  it('accepts http and private addresses with OUTBOUND_ALLOW_PRIVATE', async () => {
    const open = await buildTestApp({ OUTBOUND_ALLOW_PRIVATE: 'true' });
    try {
      const res = await call(open, 'POST', `/api/v1/projects/${open.boot.project_id}/webhooks`, {
        key: open.boot.organization_key,
        body: { url: 'http://127.0.0.1:9/hook', events: ['artifact_generation_failed'] },
      });
      expectStatus(res, 201);
      expect(res.body.webhook.url).toBe('http://127.0.0.1:9/hook');
    } finally {
      await open.close();
    }
  });

  it('deletes a webhook', async () => {
    const created = await post(HOOK);
    const url = `${hooksOf(org)}/${created.body.webhook.id}`;
    const res = await call(t, 'DELETE', url, { key: org.orgKey });
    expectStatus(res, 200);
    expect(res.body).toEqual({ message: expect.any(String) });
    expectV1Error(await call(t, 'GET', url, { key: org.orgKey }), 404, 'webhook_not_found');
    expectV1Error(await call(t, 'DELETE', url, { key: org.orgKey }), 404, 'webhook_not_found');
  });

  it('answers 404 for projects and webhooks of another organization', async () => {
    const theirs = await post(HOOK, other);
    const theirUrl = `${hooksOf(other)}/${theirs.body.webhook.id}`;
    expectV1Error(await call(t, 'GET', hooksOf(other), { key: org.orgKey }), 404, 'project_not_found');
    expectV1Error(await post(HOOK, { ...other, orgKey: org.orgKey }), 404, 'project_not_found');
    expectV1Error(await call(t, 'GET', theirUrl, { key: org.orgKey }), 404);
    expectV1Error(await call(t, 'DELETE', theirUrl, { key: org.orgKey }), 404);
    // Their webhook id under our project is not ours either.
    expectV1Error(
      await call(t, 'DELETE', `${hooksOf(org)}/${theirs.body.webhook.id}`, { key: org.orgKey }),
      404,
      'webhook_not_found',
    );
    expectStatus(await call(t, 'GET', theirUrl, { key: other.orgKey }), 200);
  });

  it('hides webhooks of projects a member cannot see, and lets members only read', async () => {
    const own = await createOrg(t);
    const group = await call(t, 'POST', '/api/v1/groups', { key: own.orgKey, body: { name: 'Secret' } });
    const hidden = await call(t, 'POST', '/api/v1/projects', {
      key: own.orgKey,
      body: { name: 'Hidden', group_ids: [group.body.group.id] },
    });
    const member = await createMember(t, own);
    expectV1Error(
      await call(t, 'GET', hooksOf(own, hidden.body.project.id), { key: member.key }),
      404,
      'project_not_found',
    );
    expectStatus(await call(t, 'GET', hooksOf(own), { key: member.key }), 200);
    expectV1Error(await call(t, 'POST', hooksOf(own), { key: member.key, body: HOOK }), 403, 'forbidden');
  });

  it('refuses webhooks on a deleted project', async () => {
    const own = await createOrg(t);
    await call(t, 'DELETE', `/api/v1/projects/${own.projectId}`, { key: own.orgKey });
    expectV1Error(await post(HOOK, own), 404, 'project_not_found');
  });
});
