import { randomUUID } from 'node:crypto';
import { eq, sql } from 'drizzle-orm';
import { Webhook } from 'standardwebhooks';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { artifacts, asyncRequests } from '../src/db/schema/index.js';
import { createArtifactType, createSkill, useFakeModel } from './artifacts-fixtures.js';
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
import { createTestDatabase } from './helpers/database.js';
import { type FakeModelServer, startFakeModelServer } from './helpers/fake-model-server.js';
import {
  type ReceivedDelivery,
  startWebhookReceiver,
  type WebhookReceiver,
} from './helpers/webhook-receiver.js';

const ENV = { OUTBOUND_ALLOW_PRIVATE: 'true', WEBHOOK_RETRY_BASE_MS: '100' };
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const ALL_EVENTS = ['artifact_generated', 'artifact_refined', 'artifact_generation_failed'];

interface Setup {
  org: TestOrg;
  slug: string;
  skillId: number;
  secret: string;
}

/** An organization with a memo type and skill on the fake model, and a webhook to the receiver. */
async function setUp(t: TestApp, fake: FakeModelServer, receiver: WebhookReceiver): Promise<Setup> {
  const org = await createOrg(t);
  await useFakeModel(t, org, fake);
  const slug = `memo-${Math.random().toString(36).slice(2, 7)}`;
  const type = await createArtifactType(t, org, slug, 'Memo');
  const skill = await createSkill(t, org, {
    name: 'Memo writer',
    content: 'Write a memo about {custom.topic}.',
    variables: ['topic'],
    typeIds: [type.id],
  });
  const hook = await call(t, 'POST', `/api/v1/projects/${org.projectId}/webhooks`, {
    key: org.orgKey,
    body: { url: `${receiver.url}/scriptorium`, events: ALL_EVENTS },
  });
  expectStatus(hook, 201);
  return { org, slug, skillId: skill.id, secret: hook.body.webhook.secret };
}

const generateUrl = (s: Setup, projectId: number = s.org.projectId) =>
  `/api/v1/artifact_types/${s.slug}/artifacts?project_id=${projectId}`;

const generateBody = (s: Setup, extra: Record<string, unknown> = {}) => ({
  skill_id: s.skillId,
  inputs: [{ name: 'topic', value: 'the offsite' }],
  fire_and_forget: true,
  ...extra,
});

function verified(secret: string, delivery: ReceivedDelivery) {
  return new Webhook(secret).verify(delivery.raw, {
    'webhook-id': String(delivery.headers['webhook-id']),
    'webhook-timestamp': String(delivery.headers['webhook-timestamp']),
    'webhook-signature': String(delivery.headers['webhook-signature']),
  });
}

const forRequest = (id: string) => (d: ReceivedDelivery) =>
  d.body?.event_data?.api_async_create_event_id === id;

async function statusOf(t: TestApp, key: string, id: string) {
  const res = await call(t, 'GET', `/api/v1/async_requests/${id}`, { key });
  expectStatus(res, 200);
  return res.body.async_request;
}

describe('fire-and-forget generation', () => {
  let t: TestApp;
  let fake: FakeModelServer;
  let receiver: WebhookReceiver;
  let s: Setup;

  beforeAll(async () => {
    fake = await startFakeModelServer();
    receiver = await startWebhookReceiver();
    t = await buildTestApp(ENV);
    s = await setUp(t, fake, receiver);
  });
  afterAll(async () => {
    await t.close();
    await receiver.close();
    await fake.close();
  });
  afterEach(() => fake.setResponder(null));

  it('answers at once, then generates in the background and notifies with the same id', async () => {
    fake.enqueue({ text: '# Offsite memo\n\nWe meet on Monday.', firstTokenDelayMs: 1500 });
    const started = Date.now();
    const res = await call(t, 'POST', generateUrl(s), { key: s.org.orgKey, body: generateBody(s) });
    expectStatus(res, 200);
    expect(Date.now() - started).toBeLessThan(1500);
    expect(res.body).toEqual({
      message: expect.any(String),
      api_async_create_event_id: expect.stringMatching(UUID),
    });
    const id = res.body.api_async_create_event_id as string;

    // Nothing exists yet: the request is accepted and the model has not answered.
    expect(await statusOf(t, s.org.orgKey, id)).toEqual({
      id,
      status: 'accepted',
      artifact_id: null,
      artifact_type_slug: s.slug,
      project_id: s.org.projectId,
      error: null,
      created_at: expect.stringMatching(TIMESTAMP),
      updated_at: expect.stringMatching(TIMESTAMP),
    });

    const [delivery] = await receiver.waitFor(1, { match: forRequest(id) });
    expect(delivery.path).toBe('/scriptorium');
    expect(delivery.body).toEqual({
      event_name: 'artifact_generated',
      event_data: {
        name: 'Offsite memo',
        artifact_id: expect.any(Number),
        artifact_type_slug: s.slug,
        project_id: s.org.projectId,
        api_async_create_event_id: id,
      },
    });
    expect(verified(s.secret, delivery)).toEqual(delivery.body);

    // Fetch after notify: the artifact is there.
    const artifactId = delivery.body.event_data.artifact_id;
    const artifact = await call(t, 'GET', `/api/v1/artifact_types/${s.slug}/artifacts/${artifactId}`, {
      key: s.org.orgKey,
    });
    expectStatus(artifact, 200);
    expect(artifact.body.artifact).toMatchObject({ id: artifactId, name: 'Offsite memo' });
    expect(artifact.body.artifact.content).toContain('We meet on Monday.');
    expect(await statusOf(t, s.org.orgKey, id)).toMatchObject({
      status: 'generated',
      artifact_id: artifactId,
      error: null,
    });
  });

  it('validates synchronously like the blocking call and stores nothing for a refused request', async () => {
    const before = await t.deps.database.db.select({ n: sql<number>`count(*)::int` }).from(asyncRequests);
    const key = s.org.orgKey;
    expectV1Error(
      await call(t, 'POST', generateUrl({ ...s, slug: 'no-such-type' }), { key, body: generateBody(s) }),
      404,
    );
    expectV1Error(await call(t, 'POST', generateUrl(s, 2147483647), { key, body: generateBody(s) }), 404);
    expectV1Error(
      await call(t, 'POST', generateUrl(s), { key, body: generateBody(s, { skill_id: 2147483647 }) }),
      404,
    );
    expectV1Error(await call(t, 'POST', generateUrl(s), { key, body: generateBody(s, { inputs: [] }) }), 422);
    expectV1Error(
      await call(t, 'POST', generateUrl(s), { key, body: generateBody(s, { fire_and_forget: 'yes' }) }),
      400,
    );
    expectV1Error(
      await call(t, 'POST', `/api/v1/artifact_types/${s.slug}/artifacts`, { key, body: generateBody(s) }),
      400,
    );
    const after = await t.deps.database.db.select({ n: sql<number>`count(*)::int` }).from(asyncRequests);
    expect(after[0].n).toBe(before[0].n);
  });

  it('reports a failed generation with artifact_generation_failed', async () => {
    fake.setResponder(() => ({ status: 500, errorBody: { error: { message: 'model exploded' } } }));
    const res = await call(t, 'POST', generateUrl(s), { key: s.org.orgKey, body: generateBody(s) });
    expectStatus(res, 200);
    const id = res.body.api_async_create_event_id as string;
    const [delivery] = await receiver.waitFor(1, { match: forRequest(id) });
    expect(delivery.body).toEqual({
      event_name: 'artifact_generation_failed',
      event_data: {
        api_async_create_event_id: id,
        project_id: s.org.projectId,
        artifact_type_slug: s.slug,
        reason: expect.any(String),
      },
    });
    expect(verified(s.secret, delivery)).toEqual(delivery.body);
    // The provider's status, never its words (they may come from any server a base URL names).
    expect(delivery.body.event_data.reason).toMatch(
      /^The model failed while generating the artifact: the provider answered HTTP 500( \(\d+ attempts\))?$/,
    );
    const status = await statusOf(t, s.org.orgKey, id);
    expect(status).toMatchObject({
      status: 'failed',
      artifact_id: null,
      error: delivery.body.event_data.reason,
    });
  });

  it('cancels a running request: the model call stops, it ends failed, and the webhook says why', async () => {
    fake.enqueue({ text: 'never finished', hang: true });
    const res = await call(t, 'POST', generateUrl(s), { key: s.org.orgKey, body: generateBody(s) });
    const id = res.body.api_async_create_event_id as string;
    await fake.waitForRequests(fake.requests.length + 1);
    const cancelled = await call(t, 'POST', `/api/v1/async_requests/${id}/cancel`, { key: s.org.orgKey });
    expectStatus(cancelled, 200);
    expect(cancelled.body.async_request).toMatchObject({
      id,
      status: 'failed',
      error: 'Cancelled by the client',
    });
    const [delivery] = await receiver.waitFor(1, { match: forRequest(id) });
    expect(delivery.body).toEqual({
      event_name: 'artifact_generation_failed',
      event_data: {
        api_async_create_event_id: id,
        project_id: s.org.projectId,
        artifact_type_slug: s.slug,
        reason: 'Cancelled by the client',
      },
    });
    expectV1Error(await call(t, 'POST', `/api/v1/async_requests/${id}/cancel`, { key: s.org.orgKey }), 409);
    // The job let go of the model call and saved nothing.
    await new Promise((r) => setTimeout(r, 1200));
    expect(await statusOf(t, s.org.orgKey, id)).toMatchObject({ status: 'failed', artifact_id: null });
    expect(receiver.received.filter(forRequest(id))).toHaveLength(1);
  });

  it('refines in the background with fire_and_forget and notifies artifact_refined', async () => {
    fake.enqueue({ text: '# Draft\n\nFirst version.' });
    const created = await call(t, 'POST', generateUrl(s), {
      key: s.org.orgKey,
      body: generateBody(s, { fire_and_forget: false }),
    });
    expectStatus(created, 201);
    const artifactId = created.body.artifact.id as number;

    fake.enqueue({ text: '# Draft\n\nShorter.', firstTokenDelayMs: 800 });
    const res = await call(t, 'POST', `/api/v1/artifact_types/${s.slug}/artifacts/${artifactId}/refine`, {
      key: s.org.orgKey,
      body: { refine_prompt: 'Make it shorter', fire_and_forget: true },
    });
    expectStatus(res, 200);
    expect(res.body).toEqual({
      message: expect.any(String),
      api_async_create_event_id: expect.stringMatching(UUID),
    });
    const id = res.body.api_async_create_event_id as string;
    expect(await statusOf(t, s.org.orgKey, id)).toMatchObject({
      status: 'accepted',
      artifact_id: artifactId,
    });

    const [delivery] = await receiver.waitFor(1, { match: forRequest(id) });
    expect(delivery.body).toEqual({
      event_name: 'artifact_refined',
      event_data: {
        name: 'Draft',
        artifact_id: artifactId,
        artifact_type_slug: s.slug,
        project_id: s.org.projectId,
        api_async_create_event_id: id,
      },
    });
    const [row] = await t.deps.database.db.select().from(artifacts).where(eq(artifacts.id, artifactId));
    expect(row.content).toContain('Shorter.');
    expect(await statusOf(t, s.org.orgKey, id)).toMatchObject({ status: 'refined', artifact_id: artifactId });

    // The refine checks still answer synchronously.
    expectV1Error(
      await call(t, 'POST', `/api/v1/artifact_types/${s.slug}/artifacts/2147483647/refine`, {
        key: s.org.orgKey,
        body: { refine_prompt: 'x', fire_and_forget: true },
      }),
      404,
    );
    expectV1Error(
      await call(t, 'POST', `/api/v1/artifact_types/${s.slug}/artifacts/${artifactId}/refine`, {
        key: s.org.orgKey,
        body: { fire_and_forget: true },
      }),
      400,
    );
  });

  it('shows a request only inside its organization and to keys that may use its project', async () => {
    fake.enqueue({ text: 'Quick memo' });
    const res = await call(t, 'POST', generateUrl(s), { key: s.org.orgKey, body: generateBody(s) });
    const id = res.body.api_async_create_event_id as string;
    await receiver.waitFor(1, { match: forRequest(id) });
    // The admin user's personal key sees it; a member who shares the project's group does too.
    expect((await statusOf(t, s.org.adminKey, id)).id).toBe(id);
    const member = await createMember(t, s.org);
    expect((await statusOf(t, member.key, id)).id).toBe(id);

    const stranger = await createOrg(t);
    expectV1Error(
      await call(t, 'GET', `/api/v1/async_requests/${id}`, { key: stranger.orgKey }),
      404,
      'async_request_not_found',
    );
    expectV1Error(await call(t, 'GET', `/api/v1/async_requests/${randomUUID()}`, { key: s.org.orgKey }), 404);
    // An unknown id is a 404 whatever its form.
    for (const unknown of ['not-a-uuid', '12345', `${randomUUID()}x`]) {
      expectV1Error(
        await call(t, 'GET', `/api/v1/async_requests/${unknown}`, { key: s.org.orgKey }),
        404,
        'async_request_not_found',
      );
      expectV1Error(
        await call(t, 'POST', `/api/v1/async_requests/${unknown}/cancel`, { key: s.org.orgKey }),
        404,
        'async_request_not_found',
      );
    }
  });
});

describe('fire-and-forget across a restart', () => {
  it('runs a request accepted by a process that stopped before working on it', async () => {
    const fake = await startFakeModelServer();
    const receiver = await startWebhookReceiver();
    const testDb = await createTestDatabase();
    try {
      const first = await buildTestApp(ENV, testDb);
      const s = await setUp(first, fake, receiver);
      // This process accepts requests but dies before any worker takes one.
      await first.deps.jobs.stop();
      fake.enqueue({ text: '# Survivor\n\nStill here.' });
      const res = await call(first, 'POST', generateUrl(s), { key: s.org.orgKey, body: generateBody(s) });
      expectStatus(res, 200);
      const id = res.body.api_async_create_event_id as string;
      await first.close();
      expect(fake.requests).toEqual([]);

      const second = await buildTestApp(ENV, testDb);
      try {
        const [delivery] = await receiver.waitFor(1, { match: forRequest(id) });
        expect(delivery.body.event_name).toBe('artifact_generated');
        expect(await statusOf(second, s.org.orgKey, id)).toMatchObject({
          status: 'generated',
          artifact_id: delivery.body.event_data.artifact_id,
        });
      } finally {
        await second.close();
      }
    } finally {
      await testDb.drop();
      await receiver.close();
      await fake.close();
    }
  });
});

describeAuthMatrix('v1', [{ method: 'GET', url: `/api/v1/async_requests/${randomUUID()}` }]);

describeAuthMatrix('v1', [{ method: 'POST', url: `/api/v1/async_requests/${randomUUID()}/cancel` }]);
