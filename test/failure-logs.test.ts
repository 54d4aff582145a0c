import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../src/app.js';
import { addModel } from './chats-support.js';
import { buildTestApp, createOrg, type TestApp } from './helpers/app.js';
import { type FakeModelServer, startFakeModelServer } from './helpers/fake-model-server.js';
import { startWebhookReceiver, type WebhookReceiver } from './helpers/webhook-receiver.js';

// Issue 16: failures are logged with the ids an operator needs to find their owner.
describe('failure logs', () => {
  let t: TestApp;
  let model: FakeModelServer;
  let receiver: WebhookReceiver;
  let app: Awaited<ReturnType<typeof buildApp>>;
  const lines: any[] = [];

  beforeAll(async () => {
    model = await startFakeModelServer();
    receiver = await startWebhookReceiver();
    t = await buildTestApp({ OUTBOUND_ALLOW_PRIVATE: 'true' });
    // The same dependencies behind an app whose JSON log lines are kept.
    app = await buildApp(
      { ...t.deps, toolFamilies: {} },
      { logger: { level: 'info', stream: { write: (line: string) => lines.push(JSON.parse(line)) } } },
    );
    await app.ready();
  });
  afterAll(async () => {
    await app?.close();
    await t?.close();
    await receiver?.close();
    await model?.close();
  });

  const inject = (method: 'GET' | 'POST', url: string, key: string, body?: unknown) =>
    app.inject({
      method,
      url,
      headers: { authorization: `Bearer ${key}` },
      ...(body ? { payload: body as any } : {}),
    });

  it('a failed webhook delivery attempt names organization, project, webhook and delivery', async () => {
    const org = await createOrg(t);
    const created = await inject('POST', `/api/v1/projects/${org.projectId}/webhooks`, org.orgKey, {
      url: `${receiver.url}/hook`,
      events: ['artifact_generated'],
    });
    expect(created.statusCode).toBe(201);
    const webhookId = created.json().webhook.id;
    receiver.answers.push({ status: 503, body: 'down' });
    const test = await inject(
      'POST',
      `/api/v1/projects/${org.projectId}/webhooks/${webhookId}/test`,
      org.orgKey,
    );
    expect(test.statusCode).toBe(200);
    const line = lines.find((l) => l.msg === 'webhook delivery attempt failed' && l.webhook_id === webhookId);
    expect(line).toMatchObject({
      level: 40,
      organization_id: org.organizationId,
      project_id: org.projectId,
      webhook_id: webhookId,
      delivery_id: test.json().delivery.id,
      event_name: 'webhook_test',
      status_code: 503,
    });
  });

  it('a failed chat turn names organization, project, chat and turn', async () => {
    const org = await createOrg(t);
    await addModel(t, org.organizationId, { baseUrl: model.baseUrl, makeDefault: true });
    model.setResponder(() => ({ status: 400, errorBody: { error: { message: 'bad request upstream' } } }));
    const res = await inject('POST', '/api/v2/chats', org.orgKey, {
      project_id: org.projectId,
      content: 'Hi',
    });
    expect(res.statusCode).toBeGreaterThanOrEqual(400);
    const chatId = res.json().response.chat_id;
    const line = lines.find((l) => l.msg === 'chat turn failed' && l.chat_id === chatId);
    expect(line).toMatchObject({
      level: 50,
      organization_id: org.organizationId,
      project_id: org.projectId,
      chat_id: chatId,
      turn_id: expect.any(Number),
    });
  });
});
