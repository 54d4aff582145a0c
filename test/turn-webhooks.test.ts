/**
 * Webhooks for chats and documents (issue 17): project webhooks may select chat_turn_completed and
 * chat_turn_failed; organization webhooks (/api/v1/webhooks) may select every event, documents'
 * too. Deliveries are signed like the artifact events and verify with `standardwebhooks`.
 */
import { Webhook as StandardWebhook } from 'standardwebhooks';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { addModel, type ChatTestApp, startChatApp } from './chats-support.js';
import { uploadFile } from './fixtures/knowledge-helpers.js';
import {
  call,
  createMember,
  createOrg,
  expectStatus,
  expectV1Error,
  type TestOrg,
  TIMESTAMP,
} from './helpers/app.js';
import { describeAuthMatrix } from './helpers/auth-matrix.js';
import { type FakeModelServer, startFakeModelServer } from './helpers/fake-model-server.js';
import {
  type ReceivedDelivery,
  startWebhookReceiver,
  type WebhookReceiver,
} from './helpers/webhook-receiver.js';

const HOOK = { url: 'https://hooks.example.com/org', events: ['document_processed'] };

describeAuthMatrix('v1', [
  { method: 'GET', url: '/api/v1/webhooks', write: true },
  { method: 'POST', url: '/api/v1/webhooks', body: HOOK, write: true },
  { method: 'GET', url: '/api/v1/webhooks/999999', write: true },
  { method: 'DELETE', url: '/api/v1/webhooks/999999', write: true },
  { method: 'GET', url: '/api/v1/webhooks/999999/deliveries', write: true },
]);

describe('webhooks for chats and documents', () => {
  let t: ChatTestApp;
  let fake: FakeModelServer;
  let receiver: WebhookReceiver;
  let org: TestOrg;

  beforeAll(async () => {
    fake = await startFakeModelServer();
    receiver = await startWebhookReceiver();
    t = await startChatApp({ env: { OUTBOUND_ALLOW_PRIVATE: 'true', WEBHOOK_RETRY_BASE_MS: '100' } });
    org = await createOrg(t);
    await addModel(t, org.organizationId, { baseUrl: fake.baseUrl, makeDefault: true });
  });
  afterEach(() => fake.reset());
  afterAll(async () => {
    await t?.close();
    await fake?.close();
    await receiver?.close();
  });

  /** The delivery verified with its secret (Standard Webhooks), as a receiver would. */
  function verified(delivery: ReceivedDelivery, secret: string) {
    const headers = Object.fromEntries(
      Object.entries(delivery.headers).map(([name, value]) => [name, String(value)]),
    );
    return new StandardWebhook(secret).verify(delivery.raw, headers) as {
      event_name: string;
      event_data: any;
    };
  }

  /** A delivery log once its `count` deliveries are settled (the receiver's answer is recorded after it). */
  async function settledLog(path: string, count: number): Promise<any[]> {
    const deadline = Date.now() + 10_000;
    for (;;) {
      const res = await call(t, 'GET', path, { key: org.orgKey });
      expectStatus(res, 200);
      const settled = res.body.deliveries.filter((d: any) => d.status !== 'pending');
      if (res.body.deliveries.length === count && settled.length === count) return res.body.deliveries;
      if (Date.now() > deadline) return res.body.deliveries;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }

  async function newChat(o = org, projectId = o.projectId): Promise<number> {
    const res = await call(t, 'POST', '/api/v2/chats', { key: o.orgKey, body: { project_id: projectId } });
    expectStatus(res, 201);
    return res.body.response.chat.id;
  }

  it('organization webhooks: created with their secret once, listed, read, refused for unknown events, deleted', async () => {
    const res = await call(t, 'POST', '/api/v1/webhooks', {
      key: org.orgKey,
      body: { url: 'https://hooks.example.com/all', events: ['document_failed', 'chat_turn_completed'] },
    });
    expectStatus(res, 201);
    expect(res.body.webhook).toEqual({
      id: expect.any(Number),
      project_id: null,
      url: 'https://hooks.example.com/all',
      events: ['chat_turn_completed', 'document_failed'],
      secret: expect.stringMatching(/^whsec_/),
      created_at: expect.stringMatching(TIMESTAMP),
      updated_at: expect.stringMatching(TIMESTAMP),
    });
    const id = res.body.webhook.id;
    const list = await call(t, 'GET', '/api/v1/webhooks', { key: org.orgKey });
    expectStatus(list, 200);
    expect(list.body.webhooks.map((w: any) => w.id)).toContain(id);
    expect(list.body.webhooks[0]).not.toHaveProperty('secret');
    expect(list.body.pagination).toMatchObject({ page: 1, total_count: expect.any(Number) });
    expectStatus(await call(t, 'GET', `/api/v1/webhooks/${id}`, { key: org.orgKey }), 200);

    // Not a project webhook, and not another organization's.
    expectV1Error(
      await call(t, 'GET', `/api/v1/projects/${org.projectId}/webhooks/${id}`, { key: org.orgKey }),
      404,
    );
    const other = await createOrg(t);
    expectV1Error(await call(t, 'GET', `/api/v1/webhooks/${id}`, { key: other.orgKey }), 404);
    expectV1Error(await call(t, 'DELETE', `/api/v1/webhooks/${id}`, { key: other.orgKey }), 404);
    // Members may not read or write them (they see every project's events).
    const member = await createMember(t, org);
    expectV1Error(await call(t, 'GET', '/api/v1/webhooks', { key: member.key }), 403);

    const bad = await call(t, 'POST', '/api/v1/webhooks', {
      key: org.orgKey,
      body: { url: 'https://hooks.example.com/x', events: ['chat_turn_completed', 'nope'] },
    });
    expectV1Error(bad, 422);
    expect(bad.body.error.details.events[0]).toMatch(/unknown: nope/);
    // Document events are the organization's: a project webhook cannot select them.
    expectV1Error(
      await call(t, 'POST', `/api/v1/projects/${org.projectId}/webhooks`, {
        key: org.orgKey,
        body: { url: 'https://hooks.example.com/p', events: ['document_processed'] },
      }),
      422,
    );

    expectStatus(await call(t, 'DELETE', `/api/v1/webhooks/${id}`, { key: org.orgKey }), 200);
    expectV1Error(await call(t, 'GET', `/api/v1/webhooks/${id}`, { key: org.orgKey }), 404);
  });

  it('a project webhook gets chat_turn_completed and chat_turn_failed for its chats, signed', async () => {
    const hook = await call(t, 'POST', `/api/v1/projects/${org.projectId}/webhooks`, {
      key: org.orgKey,
      body: { url: `${receiver.url}/project`, events: ['chat_turn_completed', 'chat_turn_failed'] },
    });
    expectStatus(hook, 201);
    const { secret, id: webhookId } = hook.body.webhook;
    const chatId = await newChat();

    fake.enqueue({ text: 'Hello there', usage: { prompt_tokens: 12, completion_tokens: 3 } });
    const sent = await call(t, 'POST', `/api/v2/chats/${chatId}/messages`, {
      key: org.orgKey,
      body: { content: 'Hi' },
    });
    expectStatus(sent, 200);
    const messageId = sent.body.response.message.id;
    const [completed] = await receiver.waitFor(1, {
      match: (d) => d.path === '/project' && d.body.event_name === 'chat_turn_completed',
    });
    expect(verified(completed, secret)).toEqual({
      event_name: 'chat_turn_completed',
      event_data: {
        chat_id: chatId,
        message_id: messageId,
        project_id: org.projectId,
        usage: { input_tokens: 12, output_tokens: 3, credits: 0 },
      },
    });

    // A provider failing on every try: the failure, without the provider's own text.
    fake.setResponder(() => ({ status: 500, errorBody: { error: { message: 'INTERNAL-SECRET-DATA' } } }));
    const failed = await call(t, 'POST', `/api/v2/chats/${chatId}/messages`, {
      key: org.orgKey,
      body: { content: 'Again' },
    });
    expectStatus(failed, 500);
    const [failure] = await receiver.waitFor(1, {
      match: (d) => d.path === '/project' && d.body.event_name === 'chat_turn_failed',
    });
    const event = verified(failure, secret);
    expect(event).toEqual({
      event_name: 'chat_turn_failed',
      event_data: {
        chat_id: chatId,
        message_id: expect.any(Number),
        project_id: org.projectId,
        error: { code: 'model_error', message: expect.any(String) },
      },
    });
    expect(failure.raw).not.toContain('INTERNAL-SECRET-DATA');
    const history = await call(t, 'GET', `/api/v2/chats/${chatId}/messages`, { key: org.orgKey });
    expect(history.body.response.messages.at(-1)).toMatchObject({
      id: event.event_data.message_id,
      status: 'failed',
    });

    // The delivery log, as for artifact events.
    const log = await settledLog(`/api/v1/projects/${org.projectId}/webhooks/${webhookId}/deliveries`, 2);
    expect(log.map((d: any) => [d.event_name, d.status])).toEqual([
      ['chat_turn_failed', 'delivered'],
      ['chat_turn_completed', 'delivered'],
    ]);
  });

  it("a project webhook does not get another project's chats; an organization webhook gets every project's", async () => {
    const second = await call(t, 'POST', '/api/v1/projects', {
      key: org.orgKey,
      body: { name: 'Second project', use_default_group: true },
    });
    expectStatus(second, 201);
    const secondId = second.body.project.id;
    const orgHook = await call(t, 'POST', '/api/v1/webhooks', {
      key: org.orgKey,
      body: { url: `${receiver.url}/org-chats`, events: ['chat_turn_completed'] },
    });
    expectStatus(orgHook, 201);
    const before = receiver.received.filter((d) => d.path === '/project').length;

    const chatId = await newChat(org, secondId);
    fake.enqueue({ text: 'Second project reply' });
    expectStatus(
      await call(t, 'POST', `/api/v2/chats/${chatId}/messages`, { key: org.orgKey, body: { content: 'Hi' } }),
      200,
    );
    const [delivery] = await receiver.waitFor(1, { match: (d) => d.path === '/org-chats' });
    expect(verified(delivery, orgHook.body.webhook.secret).event_data).toMatchObject({
      chat_id: chatId,
      project_id: secondId,
    });
    expect(receiver.received.filter((d) => d.path === '/project')).toHaveLength(before);
  });

  it('an organization webhook gets document_processed and document_failed; its delivery log and redelivery work', async () => {
    const hook = await call(t, 'POST', '/api/v1/webhooks', {
      key: org.orgKey,
      body: { url: `${receiver.url}/documents`, events: ['document_processed', 'document_failed'] },
    });
    expectStatus(hook, 201);
    const { id: webhookId, secret } = hook.body.webhook;

    const good = await uploadFile(t, org.orgKey, 'notes.md', '# Notes\n\nThe launch is on Tuesday.');
    const [processed] = await receiver.waitFor(1, {
      match: (d) => d.path === '/documents' && d.body.event_data.document_id === good.id,
    });
    expect(verified(processed, secret)).toEqual({
      event_name: 'document_processed',
      event_data: { document_id: good.id, name: 'notes.md', processing_status: 'completed', error: null },
    });

    // A PDF that is not one: processing fails with a reason.
    const bad = await uploadFile(t, org.orgKey, 'broken.pdf', Buffer.from('%PDF-1.7\nnot really a pdf'));
    const [failed] = await receiver.waitFor(1, {
      match: (d) => d.path === '/documents' && d.body.event_data.document_id === bad.id,
    });
    const event = verified(failed, secret);
    expect(event).toEqual({
      event_name: 'document_failed',
      event_data: {
        document_id: bad.id,
        name: 'broken.pdf',
        processing_status: 'failed',
        error: expect.any(String),
      },
    });
    const read = await call(t, 'GET', `/api/v1/data_center/documents/${bad.id}`, { key: org.orgKey });
    expect(read.body.document.processing_error).toBe(event.event_data.error);

    const log = await settledLog(`/api/v1/webhooks/${webhookId}/deliveries`, 2);
    expect(log[0]).toMatchObject({ event_name: 'document_failed', project_id: null, status: 'delivered' });
    const count = receiver.received.length;
    const again = await call(t, 'POST', `/api/v1/webhooks/${webhookId}/deliveries/${log[0].id}/redeliver`, {
      key: org.orgKey,
    });
    expectStatus(again, 202);
    const redelivered = await receiver.waitFor(count + 1);
    const last = redelivered.at(-1)!;
    // The same webhook-id: receivers can drop it if they processed it.
    expect(last.headers['webhook-id']).toBe(failed.headers['webhook-id']);
    expect(verified(last, secret).event_name).toBe('document_failed');
  });
});
