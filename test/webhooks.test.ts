import { randomBytes } from 'node:crypto';
import os from 'node:os';
import { eq, sql } from 'drizzle-orm';
import { Webhook, WebhookVerificationError } from 'standardwebhooks';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  projects,
  projectWebhooks,
  type WebhookEventName,
  webhookDeliveries,
  webhookEvents,
} from '../src/db/schema/index.js';
import { recordEvent } from '../src/jobs/outbox.js';
import { dispatchPendingEvents } from '../src/jobs/outbox-dispatch.js';
import { retryDelayMs } from '../src/jobs/webhook-delivery.js';
import { postWebhook } from '../src/jobs/webhook-http.js';
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
import { startWebhookReceiver, type WebhookReceiver } from './helpers/webhook-receiver.js';

const ENV = { OUTBOUND_ALLOW_PRIVATE: 'true', WEBHOOK_RETRY_BASE_MS: '100' };

const newSecret = () => `whsec_${randomBytes(24).toString('base64')}`;

/** Until the webhook configuration endpoints exist, tests configure webhooks as the service stores them. */
async function addWebhook(
  t: TestApp,
  org: TestOrg,
  url: string,
  events: WebhookEventName[] = ['artifact_generated', 'artifact_refined', 'artifact_generation_failed'],
  projectId = org.projectId,
) {
  const secret = newSecret();
  const [row] = await t.deps.database.db
    .insert(projectWebhooks)
    .values({
      organizationId: org.organizationId,
      projectId,
      url,
      events,
      secretEncrypted: t.deps.secrets.encrypt(secret),
    })
    .returning({ id: projectWebhooks.id });
  return { id: row.id, secret };
}

/** What the artifact code does when an artifact changes: the event in the changing transaction. */
async function emit(
  t: TestApp,
  org: TestOrg,
  eventName: WebhookEventName,
  data: Record<string, unknown> = {},
) {
  return t.deps.database.db.transaction((tx) =>
    recordEvent(tx, {
      organizationId: org.organizationId,
      projectId: org.projectId,
      eventName,
      eventData: {
        project_id: org.projectId,
        artifact_type_slug: 'memo',
        api_async_create_event_id: 'x',
        ...data,
      },
    }),
  );
}

const deliveriesUrl = (org: TestOrg, webhookId: number) =>
  `/api/v1/projects/${org.projectId}/webhooks/${webhookId}/deliveries`;

async function waitForDelivery(
  t: TestApp,
  org: TestOrg,
  webhookId: number,
  until: (delivery: any) => boolean,
  timeoutMs = 15_000,
) {
  const deadline = Date.now() + timeoutMs;
  let last: any;
  while (Date.now() < deadline) {
    const res = await call(t, 'GET', deliveriesUrl(org, webhookId), { key: org.orgKey });
    expectStatus(res, 200);
    last = res.body.deliveries[0];
    if (last && until(last)) return last;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`delivery did not reach the expected state: ${JSON.stringify(last)}`);
}

function verify(secret: string, delivery: { raw: string; headers: Record<string, any> }) {
  return new Webhook(secret).verify(delivery.raw, {
    'webhook-id': delivery.headers['webhook-id'],
    'webhook-timestamp': delivery.headers['webhook-timestamp'],
    'webhook-signature': delivery.headers['webhook-signature'],
  });
}

describe('webhook delivery', () => {
  let t: TestApp;
  let org: TestOrg;
  let receiver: WebhookReceiver;

  beforeAll(async () => {
    t = await buildTestApp(ENV);
    org = await createOrg(t);
  });
  afterAll(() => t.close());
  afterEach(() => receiver?.close());

  it('signs deliveries with Standard Webhooks headers that verify with the secret and fail with another', async () => {
    receiver = await startWebhookReceiver();
    const hook = await addWebhook(t, org, `${receiver.url}/hooks`);
    const res = await call(t, 'POST', `${deliveriesUrl(org, hook.id).replace(/deliveries$/, 'test')}`, {
      key: org.orgKey,
    });
    expectStatus(res, 200);
    expect(res.body.delivery).toEqual({
      id: expect.any(Number),
      webhook_id: hook.id,
      project_id: org.projectId,
      event_name: 'webhook_test',
      event_data: expect.objectContaining({ project_id: org.projectId, webhook_id: hook.id }),
      message_id: expect.stringMatching(/^msg_[0-9a-f]{32}$/),
      status: 'delivered',
      attempt_count: 1,
      last_status_code: 200,
      last_error: null,
      last_attempt_at: expect.stringMatching(TIMESTAMP),
      next_attempt_at: null,
      delivered_at: expect.stringMatching(TIMESTAMP),
      created_at: expect.stringMatching(TIMESTAMP),
      updated_at: expect.stringMatching(TIMESTAMP),
    });

    const [got] = await receiver.waitFor(1);
    expect(got.path).toBe('/hooks');
    expect(got.headers['content-type']).toBe('application/json');
    expect(got.headers['webhook-id']).toBe(res.body.delivery.message_id);
    expect(got.headers['webhook-timestamp']).toMatch(/^\d{10}$/);
    expect(Math.abs(Number(got.headers['webhook-timestamp']) - Date.now() / 1000)).toBeLessThan(60);
    expect(got.headers['webhook-signature']).toMatch(/^v1,[A-Za-z0-9+/]+=*$/);
    expect(got.body).toEqual({ event_name: 'webhook_test', event_data: res.body.delivery.event_data });
    expect(verify(hook.secret, got)).toEqual(got.body);
    expect(() => verify(newSecret(), got)).toThrow(WebhookVerificationError);
    // A body changed in transit no longer verifies either.
    expect(() =>
      verify(hook.secret, { ...got, raw: got.raw.replace('webhook_test', 'webhook_tesT') }),
    ).toThrow(WebhookVerificationError);
  });

  it('delivers an outbox event to subscribed webhooks only, with {event_name, event_data}', async () => {
    receiver = await startWebhookReceiver();
    const other = await startWebhookReceiver();
    try {
      const subscribed = await addWebhook(t, org, `${receiver.url}/all`);
      const refinedOnly = await addWebhook(t, org, `${other.url}/refined`, ['artifact_refined']);
      const [otherProject] = await t.deps.database.db
        .insert(projects)
        .values({ organizationId: org.organizationId, name: 'Other project' })
        .returning({ id: projects.id });
      await addWebhook(t, org, `${other.url}/other-project`, ['artifact_generated'], otherProject.id);

      const data = {
        name: 'Launch memo',
        artifact_id: 41,
        artifact_type_slug: 'memo',
        project_id: org.projectId,
        api_async_create_event_id: '3b0c7d4e-8a53-4a4e-9d07-0d6f0b0c1a2b',
      };
      const event = await emit(t, org, 'artifact_generated', data);
      const [got] = await receiver.waitFor(1);
      expect(got.body).toEqual({ event_name: 'artifact_generated', event_data: data });
      expect(verify(subscribed.secret, got)).toEqual(got.body);

      const delivered = await waitForDelivery(t, org, subscribed.id, (d) => d.status === 'delivered');
      expect(delivered).toMatchObject({
        event_name: 'artifact_generated',
        event_data: data,
        attempt_count: 1,
      });
      const [eventRow] = await t.deps.database.db
        .select({ dispatchedAt: webhookEvents.dispatchedAt })
        .from(webhookEvents)
        .where(eq(webhookEvents.id, event.id));
      expect(eventRow.dispatchedAt).not.toBeNull();
      // Neither the webhook subscribed to other events nor the other project's webhook hears of it.
      await new Promise((r) => setTimeout(r, 700));
      expect(other.received).toEqual([]);
      const log = await call(t, 'GET', deliveriesUrl(org, refinedOnly.id), { key: org.orgKey });
      expect(log.body.deliveries).toEqual([]);
    } finally {
      await other.close();
    }
  });

  it('retries a failing receiver with backoff, keeping one webhook-id and a valid signature', async () => {
    receiver = await startWebhookReceiver();
    receiver.answers.push({ status: 500, body: 'database down' }, { status: 503 });
    const hook = await addWebhook(t, org, receiver.url);
    await emit(t, org, 'artifact_generation_failed');

    const attempts = await receiver.waitFor(3);
    expect(attempts).toHaveLength(3);
    const ids = new Set(attempts.map((a) => a.headers['webhook-id']));
    expect(ids.size).toBe(1);
    for (const attempt of attempts) expect(verify(hook.secret, attempt)).toEqual(attempts[0].body);
    // Each retry waited at least the (jittered) base delay after the previous attempt.
    expect(attempts[1].at - attempts[0].at).toBeGreaterThanOrEqual(70);
    expect(attempts[2].at - attempts[1].at).toBeGreaterThanOrEqual(140);

    const delivery = await waitForDelivery(t, org, hook.id, (d) => d.status === 'delivered');
    expect(delivery).toMatchObject({
      attempt_count: 3,
      last_status_code: 200,
      last_error: null,
      next_attempt_at: null,
      message_id: attempts[0].headers['webhook-id'],
    });
    await new Promise((r) => setTimeout(r, 600));
    expect(receiver.received).toHaveLength(3);
  });

  it('records each failure in the log and gives up when the retry window closes', async () => {
    receiver = await startWebhookReceiver();
    receiver.fallback = { status: 500, body: 'still broken' };
    const hook = await addWebhook(t, org, receiver.url);
    await emit(t, org, 'artifact_generated');

    const failedOnce = await waitForDelivery(t, org, hook.id, (d) => d.attempt_count >= 1);
    expect(failedOnce).toMatchObject({
      status: 'pending',
      last_status_code: 500,
      last_error: 'receiver answered HTTP 500: still broken',
      delivered_at: null,
      next_attempt_at: expect.stringMatching(TIMESTAMP),
    });
    // A day later: the retry window is over; the next failure is final.
    await t.deps.database.db
      .update(webhookDeliveries)
      .set({ retryUntil: sql`now()` })
      .where(eq(webhookDeliveries.webhookId, hook.id));
    const failed = await waitForDelivery(t, org, hook.id, (d) => d.status === 'failed');
    expect(failed).toMatchObject({ next_attempt_at: null, last_status_code: 500, delivered_at: null });
    const attempts = failed.attempt_count;
    await new Promise((r) => setTimeout(r, 800));
    expect(receiver.received.length).toBe(attempts);
  });

  it('does not follow redirects: a 3xx is a failed attempt', async () => {
    receiver = await startWebhookReceiver();
    receiver.answers.push({ status: 302, headers: { location: `${receiver.url}/elsewhere` } });
    const hook = await addWebhook(t, org, `${receiver.url}/start`);
    const res = await call(t, 'POST', `/api/v1/projects/${org.projectId}/webhooks/${hook.id}/test`, {
      key: org.orgKey,
    });
    expectStatus(res, 200);
    expect(res.body.delivery).toMatchObject({
      status: 'failed',
      attempt_count: 1,
      last_status_code: 302,
      last_error: 'redirect (HTTP 302) not followed',
    });
    expect(receiver.received.map((r) => r.path)).toEqual(['/start']);
  });

  it('redelivers a delivery with the same webhook-id', async () => {
    receiver = await startWebhookReceiver();
    const hook = await addWebhook(t, org, receiver.url);
    await emit(t, org, 'artifact_refined', { name: 'Memo', artifact_id: 7 });
    const first = await waitForDelivery(t, org, hook.id, (d) => d.status === 'delivered');

    const res = await call(t, 'POST', `${deliveriesUrl(org, hook.id)}/${first.id}/redeliver`, {
      key: org.orgKey,
    });
    expectStatus(res, 202);
    expect(res.body.delivery).toMatchObject({ id: first.id, status: 'pending', delivered_at: null });
    const both = await receiver.waitFor(2);
    expect(both[1].headers['webhook-id']).toBe(both[0].headers['webhook-id']);
    expect(both[1].body).toEqual(both[0].body);
    expect(verify(hook.secret, both[1])).toEqual(both[0].body);
    const again = await waitForDelivery(t, org, hook.id, (d) => d.status === 'delivered');
    expect(again).toMatchObject({ id: first.id, attempt_count: 2 });
  });

  it('paginates the delivery log, newest first', async () => {
    receiver = await startWebhookReceiver();
    const hook = await addWebhook(t, org, receiver.url);
    for (let i = 0; i < 3; i++) {
      expectStatus(
        await call(t, 'POST', `/api/v1/projects/${org.projectId}/webhooks/${hook.id}/test`, {
          key: org.orgKey,
        }),
        200,
      );
    }
    const page1 = await call(t, 'GET', `${deliveriesUrl(org, hook.id)}?page=1&page_size=2`, {
      key: org.orgKey,
    });
    expectStatus(page1, 200);
    expect(page1.body.pagination).toEqual({ page: 1, page_size: 2, total_count: 3, total_pages: 2 });
    expect(page1.body.deliveries).toHaveLength(2);
    expect(page1.body.deliveries[0].id).toBeGreaterThan(page1.body.deliveries[1].id);
    const page2 = await call(t, 'GET', `${deliveriesUrl(org, hook.id)}?page=2&page_size=2`, {
      key: org.orgKey,
    });
    expect(page2.body.deliveries).toHaveLength(1);
    expectV1Error(
      await call(t, 'GET', `${deliveriesUrl(org, hook.id)}?page_size=101`, { key: org.orgKey }),
      400,
    );
    expectV1Error(await call(t, 'GET', `${deliveriesUrl(org, hook.id)}?page=0`, { key: org.orgKey }), 400);
  });

  it('keeps projects and webhooks of other organizations and inaccessible projects hidden (404)', async () => {
    receiver = await startWebhookReceiver();
    const hook = await addWebhook(t, org, receiver.url);
    const stranger = await createOrg(t);
    const strangerHook = await addWebhook(t, stranger, receiver.url);
    // Another organization's project, webhook or delivery: 404 whatever the ids.
    expectV1Error(await call(t, 'GET', deliveriesUrl(org, hook.id), { key: stranger.orgKey }), 404);
    expectV1Error(
      await call(t, 'GET', `/api/v1/projects/${org.projectId}/webhooks/${strangerHook.id}/deliveries`, {
        key: org.orgKey,
      }),
      404,
      'webhook_not_found',
    );
    expectV1Error(
      await call(t, 'POST', `/api/v1/projects/${org.projectId}/webhooks/${strangerHook.id}/test`, {
        key: org.orgKey,
      }),
      404,
    );
    expectV1Error(
      await call(t, 'POST', `${deliveriesUrl(org, hook.id)}/2147483647/redeliver`, { key: org.orgKey }),
      404,
      'delivery_not_found',
    );
    expectV1Error(
      await call(t, 'GET', `/api/v1/projects/2147483647/webhooks/${hook.id}/deliveries`, { key: org.orgKey }),
      404,
      'project_not_found',
    );
    expectV1Error(
      await call(t, 'GET', `/api/v1/projects/${org.projectId}/webhooks/abc/deliveries`, { key: org.orgKey }),
      400,
    );

    // A member sees the log of a project in their group, may not send; outside their groups: 404.
    const member = await createMember(t, org);
    expectStatus(await call(t, 'GET', deliveriesUrl(org, hook.id), { key: member.key }), 200);
    expectV1Error(
      await call(t, 'POST', `/api/v1/projects/${org.projectId}/webhooks/${hook.id}/test`, {
        key: member.key,
      }),
      403,
    );
    const [hidden] = await t.deps.database.db
      .insert(projects)
      .values({ organizationId: org.organizationId, name: 'No groups' })
      .returning({ id: projects.id });
    const hiddenHook = await addWebhook(t, org, receiver.url, ['artifact_generated'], hidden.id);
    expectV1Error(
      await call(t, 'GET', `/api/v1/projects/${hidden.id}/webhooks/${hiddenHook.id}/deliveries`, {
        key: member.key,
      }),
      404,
    );
    expect(receiver.received).toEqual([]);
  });

  it('keeps at most 4 attempts in flight per webhook', async () => {
    receiver = await startWebhookReceiver();
    receiver.fallback = { status: 200, delayMs: 700 };
    const hook = await addWebhook(t, org, receiver.url, ['artifact_refined']);
    for (let n = 0; n < 10; n++) await emit(t, org, 'artifact_refined', { n });
    const all = await receiver.waitFor(10, { timeoutMs: 25_000 });
    expect(new Set(all.map((d) => d.body.event_data.n)).size).toBe(10);
    expect(receiver.maxInFlight).toBeLessThanOrEqual(4);
    expect(receiver.maxInFlight).toBeGreaterThan(1);
    const log = await call(t, 'GET', `${deliveriesUrl(org, hook.id)}?page_size=100`, { key: org.orgKey });
    expect(log.body.pagination.total_count).toBe(10);
  });

  it('fails attempts that time out or cannot connect', async () => {
    receiver = await startWebhookReceiver();
    receiver.fallback = { status: 200, hang: true };
    const started = Date.now();
    expect(await postWebhook(receiver.url, '{}', {}, { allowPrivate: true, timeoutMs: 1000 })).toEqual({
      ok: false,
      statusCode: null,
      error: 'timed out after 1 s',
    });
    expect(Date.now() - started).toBeGreaterThanOrEqual(950);
    const closed = await startWebhookReceiver();
    await closed.close();
    const refused = await postWebhook(closed.url, '{}', {}, { allowPrivate: true, timeoutMs: 1000 });
    expect(refused).toMatchObject({
      ok: false,
      statusCode: null,
      error: expect.stringContaining('ECONNREFUSED'),
    });
  });

  it('computes exponential, capped, jittered retry delays', () => {
    const mid = () => 0.5;
    expect([1, 2, 3, 4].map((n) => retryDelayMs(n, 10_000, mid))).toEqual([10_000, 20_000, 40_000, 80_000]);
    // Capped at an hour with the default base; jitter stays within ±25%.
    expect(retryDelayMs(30, 10_000, mid)).toBe(3_600_000);
    expect(retryDelayMs(1, 10_000, () => 0)).toBe(7_500);
    expect(retryDelayMs(1, 10_000, () => 0.999999)).toBeLessThanOrEqual(12_500);
    // The whole schedule spans about a day at the default base.
    let total = 0;
    let attempts = 1;
    while (total + retryDelayMs(attempts, 10_000, mid) <= 24 * 3_600_000)
      total += retryDelayMs(attempts++, 10_000, mid);
    expect(total).toBeGreaterThan(23 * 3_600_000);
    expect(attempts).toBeGreaterThan(20);
    expect(attempts).toBeLessThan(40);
  });
});

describe('outbound address guard', () => {
  let t: TestApp;
  let org: TestOrg;
  let receiver: WebhookReceiver;

  beforeAll(async () => {
    t = await buildTestApp({ WEBHOOK_RETRY_BASE_MS: '100' });
    org = await createOrg(t);
    receiver = await startWebhookReceiver();
  });
  afterAll(async () => {
    await receiver.close();
    await t.close();
  });

  it('refuses loopback and private addresses without OUTBOUND_ALLOW_PRIVATE, also after DNS resolution', async () => {
    const port = new URL(receiver.url).port;
    for (const [url, reason] of [
      [`${receiver.url}/plain-http`, 'URL refused: must use https'],
      [`https://127.0.0.1:${port}/`, 'URL refused: must point to a public address'],
      [`https://10.1.2.3:${port}/`, 'URL refused: must point to a public address'],
      // The machine's own name passes the text check; it resolves to a private or loopback
      // address, which the connection refuses.
      [`https://${os.hostname()}:${port}/`, `URL refused: ${os.hostname()} resolves to a private address`],
    ] as const) {
      const hook = await addWebhook(t, org, url);
      const res = await call(t, 'POST', `/api/v1/projects/${org.projectId}/webhooks/${hook.id}/test`, {
        key: org.orgKey,
      });
      expectStatus(res, 200);
      expect(res.body.delivery).toMatchObject({
        status: 'failed',
        last_status_code: null,
        last_error: reason,
      });
    }
    expect(receiver.received).toEqual([]);
  });
});

describe('durability', () => {
  it('keeps undelivered events and queued attempts across a restart', async () => {
    const receiver = await startWebhookReceiver();
    const testDb = await createTestDatabase();
    const first = await buildTestApp(ENV, testDb);
    const org = await createOrg(first);
    const hook = await addWebhook(first, org, receiver.url);
    try {
      // The first process stops working before it delivers anything ...
      await first.deps.jobs.stop();
      const queued = await emit(first, org, 'artifact_generated', { name: 'queued' });
      await dispatchPendingEvents(first.deps);
      const pending = await emit(first, org, 'artifact_generated', { name: 'undispatched' });
      await first.close();
      expect(receiver.received).toEqual([]);

      // ... and the next one, on the same database, delivers both.
      const second = await buildTestApp(ENV, testDb);
      try {
        const got = await receiver.waitFor(2);
        expect(got.map((d) => d.body.event_data.name).sort()).toEqual(['queued', 'undispatched']);
        const rows = await second.deps.database.db
          .select({ eventId: webhookDeliveries.eventId, status: webhookDeliveries.status })
          .from(webhookDeliveries)
          .where(eq(webhookDeliveries.webhookId, hook.id));
        expect(rows.map((r) => r.eventId).sort()).toEqual([queued.id, pending.id].sort());
      } finally {
        await second.close();
      }
    } finally {
      await testDb.drop();
      await receiver.close();
    }
  });
});

describeAuthMatrix('v1', [
  { method: 'GET', url: (o) => `/api/v1/projects/${o.projectId}/webhooks/1/deliveries` },
  {
    method: 'POST',
    url: (o) => `/api/v1/projects/${o.projectId}/webhooks/1/deliveries/1/redeliver`,
    write: true,
  },
  { method: 'POST', url: (o) => `/api/v1/projects/${o.projectId}/webhooks/1/test`, write: true },
]);
