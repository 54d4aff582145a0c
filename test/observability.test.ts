import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { scheduleAttempt } from '../src/jobs/webhook-delivery.js';
import {
  addModel,
  type ChatTestApp,
  expectTiming,
  postStream,
  startChatApp,
  testKnowledgeFamily,
} from './chats-support.js';
import { call, createOrg, expectStatus, type TestOrg } from './helpers/app.js';
import { type FakeModelServer, startFakeModelServer } from './helpers/fake-model-server.js';
import { sample } from './helpers/metrics.js';
import { startWebhookReceiver, type WebhookReceiver } from './helpers/webhook-receiver.js';

describe('overhead in the open: timing, Server-Timing and /metrics', () => {
  let t: ChatTestApp;
  let server: FakeModelServer;
  let receiver: WebhookReceiver;
  let org: TestOrg;

  beforeAll(async () => {
    server = await startFakeModelServer();
    receiver = await startWebhookReceiver();
    t = await startChatApp({
      env: { OUTBOUND_ALLOW_PRIVATE: 'true' },
      deps: { toolFamilies: testKnowledgeFamily() },
    });
    org = await createOrg(t);
    await addModel(t, org.organizationId, {
      baseUrl: server.baseUrl,
      model: 'local-llama',
      makeDefault: true,
      input: 1,
      output: 2,
    });
  });
  afterAll(async () => {
    await t?.close();
    await server?.close();
    await receiver?.close();
  });

  const scrape = async () => {
    const res = await call(t, 'GET', '/metrics');
    expectStatus(res, 200);
    return res.body as string;
  };
  const chat = async () => {
    const res = await call(t, 'POST', '/api/v2/chats', {
      key: org.orgKey,
      body: { project_id: org.projectId },
    });
    expectStatus(res, 201);
    return res.body.response.chat.id as number;
  };
  const turnLabels = { provider: 'openai-compatible', outcome: 'completed' };

  it('a blocking reply carries timing and a Server-Timing header that agree; the metrics move', async () => {
    const before = await scrape();
    server.enqueue({
      chunks: ['Hello', ', world'],
      firstTokenDelayMs: 50,
      usage: { prompt_tokens: 1000, completion_tokens: 500 },
    });
    const res = await call(t, 'POST', `/api/v2/chats/${await chat()}/messages`, {
      key: org.orgKey,
      body: { content: 'Hi' },
    });
    expectStatus(res, 200);
    const { timing } = res.body.response.message;
    expectTiming(timing);
    // The model waited 50 ms before its first token: that is model time, not overhead.
    expect(timing.model_first_token_ms).toBeGreaterThanOrEqual(45);

    const header = String(res.headers['server-timing']);
    const entries = Object.fromEntries(
      header.split(', ').map((entry) => {
        const [name, dur] = entry.split(';dur=');
        return [name, Number(dur)];
      }),
    );
    expect(Object.keys(entries)).toEqual(['db', 'model', 'overhead', 'total']);
    expect(entries.overhead).toBe(timing.overhead_ms);
    expect(entries.total).toBe(timing.total_ms);
    expect(entries.db).toBeGreaterThan(0);
    expect(entries.model).toBeGreaterThanOrEqual(timing.model_first_token_ms);
    expect(entries.db + entries.model).toBeLessThanOrEqual(entries.total + 0.2);

    const after = await scrape();
    const count = (text: string, name: string) => sample(text, `${name}_count`, turnLabels);
    for (const name of [
      'scriptorium_turn_overhead_seconds',
      'scriptorium_model_first_token_seconds',
      'scriptorium_turn_duration_seconds',
    ]) {
      expect(count(after, name) - count(before, name), name).toBe(1);
    }
    const sum = (text: string) => sample(text, 'scriptorium_turn_overhead_seconds_sum', turnLabels);
    expect(sum(after) - sum(before)).toBeCloseTo(timing.overhead_ms / 1000, 3);
    const tokens = (text: string, type: string) =>
      sample(text, 'scriptorium_model_tokens_total', {
        provider: 'openai-compatible',
        model: 'local-llama',
        type,
      });
    expect(tokens(after, 'input') - tokens(before, 'input')).toBe(1000);
    expect(tokens(after, 'output') - tokens(before, 'output')).toBe(500);
    const credits = (text: string) =>
      sample(text, 'scriptorium_credits_charged_total', {
        provider: 'openai-compatible',
        model: 'local-llama',
      });
    expect(credits(after) - credits(before)).toBeCloseTo(2, 6);
  });

  it('the done event of a streamed turn with a tool call carries consistent timing; open streams are counted', async () => {
    server.enqueue(
      { toolCalls: [{ name: 'knowledge_search', arguments: { query: 'refunds' } }] },
      { chunks: ['Thirty', ' days'], chunkDelayMs: 150 },
    );
    const open = () => scrape().then((text) => sample(text, 'scriptorium_open_streams'));
    const idle = await open();
    const seen = server.requests.length;
    const streaming = postStream(t.baseUrl, `/api/v2/chats/${await chat()}/messages`, org.orgKey, {
      content: 'Refund policy?',
      stream: true,
    });
    // The model's second call: the turn runs (its first call may have gone out before the turn's
    // statement answered, llm/speculative-requests.ts, so it does not show the stream open yet).
    await server.waitForRequests(seen + 2);
    expect(await open()).toBe(idle + 1);
    const res = await streaming;
    const done = res.events.at(-1)!;
    expect(done.event).toBe('done');
    expectTiming(done.data.message.timing);
    expect(await open()).toBe(idle);
  });

  it('counts webhook delivery attempts by outcome and shows the job queue depth', async () => {
    const hook = await call(t, 'POST', `/api/v1/projects/${org.projectId}/webhooks`, {
      key: org.orgKey,
      body: { url: `${receiver.url}/hook`, events: ['artifact_generated'] },
    });
    expectStatus(hook, 201);
    const delivered = (text: string) =>
      sample(text, 'scriptorium_webhook_delivery_attempts_total', { outcome: 'delivered' });
    const before = await scrape();
    expectStatus(
      await call(t, 'POST', `/api/v1/projects/${org.projectId}/webhooks/${hook.body.webhook.id}/test`, {
        key: org.orgKey,
      }),
      200,
    );
    expect(delivered(await scrape()) - delivered(before)).toBe(1);

    // A delivery job scheduled an hour ahead waits in the queue (it names no delivery, so it
    // would do nothing if it ran).
    const depth = (text: string) =>
      sample(text, 'scriptorium_job_queue_depth', { queue: 'webhooks-deliver', state: 'created' });
    const waiting = depth(await scrape());
    await scheduleAttempt(t.deps.jobs, { deliveryId: 2147483647, seq: 0 }, { delayMs: 3_600_000 });
    expect(depth(await scrape())).toBe(waiting + 1);
  });
});
