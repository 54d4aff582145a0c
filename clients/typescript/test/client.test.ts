/**
 * The TypeScript client against a real service: the app listening on loopback, the fake
 * OpenAI-compatible model server, and a TCP proxy in between that can cut a connection mid-stream
 * (what a flaky network or a load balancer timeout does), so reattachment is exercised for real.
 */

import type { AddressInfo } from 'node:net';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { eq } from 'drizzle-orm';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { artifacts, chats } from '../../../src/db/schema/index.js';
import { createArtifactType, createSkill, setBalance } from '../../../test/artifacts-fixtures.js';
import {
  addModel,
  type ChatTestApp,
  startChatApp,
  testKnowledgeFamily,
} from '../../../test/chats-support.js';
import { call, createOrg, expectStatus, type TestOrg } from '../../../test/helpers/app.js';
import { type FakeModelServer, startFakeModelServer } from '../../../test/helpers/fake-model-server.js';
import { startWebhookReceiver, type WebhookReceiver } from '../../../test/helpers/webhook-receiver.js';
import {
  type ChatStreamEvent,
  createScriptoriumClient,
  type Message,
  ScriptoriumError,
  verifyWebhook,
  WebhookVerificationError,
} from '../src/index.js';

/** Forwards TCP to the app; `cutAfterEvents(n)` breaks the next response that carries n event ids. */
interface CuttingProxy {
  url: string;
  /** The first line of each request that went through ("POST /api/v2/chats HTTP/1.1") and its Last-Event-ID. */
  requests: { line: string; lastEventId: string | null }[];
  cutAfterEvents(n: number): void;
  cuts: number;
  close(): Promise<void>;
}

async function startCuttingProxy(target: string): Promise<CuttingProxy> {
  const { port, hostname } = new URL(target);
  const sockets = new Set<Socket>();
  let armed: number | null = null;
  const proxy: CuttingProxy = {
    url: '',
    requests: [],
    cuts: 0,
    cutAfterEvents(n) {
      armed = n;
    },
    close: () =>
      new Promise((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
  const server: Server = createServer((client) => {
    const upstream = connect(Number(port), hostname);
    sockets.add(client).add(upstream);
    let ids = 0;
    client.on('data', (chunk) => {
      const text = chunk.toString('latin1');
      const line = /^(GET|POST|PUT|DELETE) [^\r\n]+/.exec(text);
      if (line) {
        ids = 0; // a new request on a kept-alive connection: count its response's events only
        const last = /\r\nlast-event-id: *([^\r\n]*)/i.exec(text);
        proxy.requests.push({ line: line[0], lastEventId: last ? last[1] : null });
      }
      upstream.write(chunk);
    });
    upstream.on('data', (chunk) => {
      ids += (chunk.toString('utf8').match(/\nid: \d+/g) ?? []).length;
      if (armed === null || ids < armed) {
        client.write(chunk);
        return;
      }
      armed = null;
      proxy.cuts++;
      // Once what was read so far is delivered, both ends at once: the connection breaks mid-stream.
      upstream.pause();
      client.write(chunk, () => {
        client.destroy();
        upstream.destroy();
      });
    });
    const close = () => {
      client.destroy();
      upstream.destroy();
    };
    client.on('error', close).on('close', close);
    upstream.on('error', close).on('close', close);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  proxy.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return proxy;
}

let model: FakeModelServer;
let t: ChatTestApp;
let proxy: CuttingProxy;
let receiver: WebhookReceiver;

beforeAll(async () => {
  model = await startFakeModelServer();
  receiver = await startWebhookReceiver();
  t = await startChatApp({ env: { OUTBOUND_ALLOW_PRIVATE: 'true', RATE_LIMIT_PER_MINUTE: '40' } });
  proxy = await startCuttingProxy(t.baseUrl);
});
afterEach(() => model.reset());
afterAll(async () => {
  await proxy?.close();
  await t?.close();
  await receiver?.close();
  await model?.close();
});

async function orgWithModel(): Promise<TestOrg> {
  const org = await createOrg(t);
  await addModel(t, org.organizationId, { baseUrl: model.baseUrl, makeDefault: true });
  return org;
}

const clientFor = (org: TestOrg, baseUrl = proxy.url) =>
  createScriptoriumClient({ baseUrl, apiKey: org.orgKey, reconnect: { reconnectDelayMs: 50 } });

const words = (n: number) => Array.from({ length: n }, (_, i) => `w${i + 1} `);

async function collect<E>(stream: AsyncIterable<E>): Promise<E[]> {
  const events: E[] = [];
  for await (const event of stream) events.push(event);
  return events;
}

const textOf = (events: ChatStreamEvent[]) =>
  events.map((e) => (e.event === 'content' ? e.data.content : '')).join('');

describe('the TypeScript client', () => {
  it('creates a chat and sends messages, returning the parsed Message', async () => {
    const org = await orgWithModel();
    const client = clientFor(org);
    model.enqueue({ text: 'Hello there' }, { text: 'Second answer' });
    const { chat, message } = await client.chats.create({ project_id: org.projectId, content: 'Hi' });
    expect(chat.id).toEqual(expect.any(Number));
    expect(message).toMatchObject({ role: 'assistant', content: 'Hello there', tool_executions: [] });
    const reply = await client.chats.send(chat.id, 'Again');
    expect(reply.content).toBe('Second answer');
    const history = await client.chats.messages(chat.id);
    expect(history.messages.map((m) => m.role)).toEqual(['user', 'assistant', 'user', 'assistant']);
    expect(history.pagination).toMatchObject({ page: 1, page_size: 50, total_count: 4 });
    const list = await client.chats.list();
    expect(list.chats.map((c) => c.id)).toEqual([chat.id]);
  });

  it('sends attachments and response_format, regenerates, lists versions, forks and reads an image', async () => {
    const org = await orgWithModel();
    const client = clientFor(org);
    const png =
      'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==';
    model.enqueue({ text: '{"answer":"one"}' }, { text: 'again' });
    const { chat } = await client.chats.create({ project_id: org.projectId });
    const reply = await client.chats.send(chat.id, 'Look', {
      extra: {
        attachments: [{ type: 'image', data_url: `data:image/png;base64,${png}` }],
        response_format: {
          type: 'json_schema',
          json_schema: { name: 'a', schema: { type: 'object', required: ['answer'] } },
        },
      },
    });
    expect(reply.parsed).toEqual({ answer: 'one' });
    const regenerated = await client.chats.regenerate(chat.id, reply.id);
    expect(regenerated.content).toBe('again');
    expect((await client.chats.versions(chat.id, regenerated.id)).map((m) => m.id)).toEqual([reply.id]);
    const { messages } = await client.chats.messages(chat.id);
    const fork = await client.chats.fork(chat.id, messages[0].id);
    const [copied] = (await client.chats.messages(fork.id)).messages;
    const image = await client.chats.attachment(fork.id, copied.attachments[0].id);
    expect(image.mediaType).toBe('image/png');
    expect(Buffer.from(image.bytes).equals(Buffer.from(png, 'base64'))).toBe(true);
    await expect(client.chats.regenerate(chat.id, messages[0].id)).rejects.toMatchObject({ status: 409 });
  });

  it('streams a turn as typed events and reattaches through GET /stream after a dropped connection', async () => {
    const org = await orgWithModel();
    const client = clientFor(org);
    const { chat } = await client.chats.create({ project_id: org.projectId });
    const chunks = words(30);
    model.enqueue({ chunks, chunkDelayMs: 20 });
    proxy.cutAfterEvents(5);
    const before = proxy.requests.length;
    const cuts = proxy.cuts;
    const events = await collect(client.chats.stream(chat.id, 'Count to thirty'));

    expect(proxy.cuts).toBe(cuts + 1);
    // Every event exactly once, in order, ending with done. A busy process may merge tokens into
    // fewer content events (src/streams/coalescer.ts), so the count is not fixed.
    expect(events.map((e) => e.id)).toEqual(Array.from({ length: events.length }, (_, i) => i + 1));
    expect(events.length).toBeGreaterThan(5);
    expect(events.at(-1)?.event).toBe('done');
    const done = events.at(-1) as Extract<ChatStreamEvent, { event: 'done' }>;
    expect(done.data.message.content).toBe(chunks.join(''));
    expect(textOf(events)).toBe(chunks.join(''));
    // The reattachment was a GET of the chat's stream with the last id received; one model call.
    const after = proxy.requests.slice(before);
    expect(after[0].line).toContain(`POST /api/v2/chats/${chat.id}/messages`);
    const resume = after.find((r) => r.line.startsWith(`GET /api/v2/chats/${chat.id}/stream`));
    expect(resume?.lastEventId).toMatch(/^\d+$/);
    expect(Number(resume?.lastEventId)).toBeGreaterThanOrEqual(5);
    expect(model.chatRequests()).toHaveLength(1);
  });

  it('resumes a dropped create stream by repeating the idempotent POST: one chat, no event twice', async () => {
    const org = await orgWithModel();
    const client = clientFor(org);
    model.enqueue({ chunks: words(20), chunkDelayMs: 20 });
    proxy.cutAfterEvents(4);
    const before = proxy.requests.length;
    const cuts = proxy.cuts;
    const events = await collect(
      client.chats.createStream(
        { project_id: org.projectId, content: 'A new chat' },
        { idempotencyKey: 'c-1' },
      ),
    );
    expect(proxy.cuts).toBe(cuts + 1);
    expect(events.map((e) => e.id)).toEqual(Array.from({ length: events.length }, (_, i) => i + 1));
    expect(events.length).toBeGreaterThan(4);
    expect(textOf(events)).toBe(words(20).join(''));
    const done = events.at(-1) as Extract<ChatStreamEvent, { event: 'done' }>;
    expect(done.data.chat?.title).toBe('A new chat');
    const posts = proxy.requests.slice(before).filter((r) => r.line.startsWith('POST /api/v2/chats '));
    expect(posts.length).toBe(2);
    expect(Number(posts[1].lastEventId)).toBeGreaterThanOrEqual(4);
    const rows = await t.deps.database.db
      .select()
      .from(chats)
      .where(eq(chats.organizationId, org.organizationId));
    expect(rows).toHaveLength(1);
    expect(model.chatRequests()).toHaveLength(1);
  });

  it('queues a message on a busy chat with ifBusy: enqueue (queued event, then its own turn)', async () => {
    const org = await orgWithModel();
    const client = clientFor(org, t.baseUrl);
    const { chat } = await client.chats.create({ project_id: org.projectId });
    model.enqueue(
      { chunks: words(40), chunkDelayMs: 100 },
      { text: 'Queued answer' },
      { text: 'Blocking answer' },
    );
    const running = client.chats.stream(chat.id, 'Long one');
    const first = await running.next();
    expect(first.value).toMatchObject({ event: 'content' });
    const busy = await client.chats.send(chat.id, 'Rejected').catch((err: unknown) => err);
    expect(busy).toBeInstanceOf(ScriptoriumError);
    expect(busy).toMatchObject({ status: 409, code: 'turn_in_progress' });
    const queued = collect(client.chats.stream(chat.id, 'Then this', { ifBusy: 'enqueue' }));
    await new Promise((resolve) => setTimeout(resolve, 300));
    const blocking = client.chats.send(chat.id, 'And this', { ifBusy: 'enqueue' });
    const events = await queued;
    expect(events[0]).toMatchObject({
      event: 'queued',
      data: { message_id: expect.any(Number), position: 1 },
    });
    expect(textOf(events)).toBe('Queued answer');
    expect((await blocking).content).toBe('Blocking answer');
    await collect(running);
  });

  it('streams an artifact the same way, generated once', async () => {
    const org = await orgWithModel();
    const type = await createArtifactType(t, org, 'memo', 'Memo');
    const skill = await createSkill(t, org, { name: 'Write', content: 'Write a memo', typeIds: [type.id] });
    const client = clientFor(org);
    const chunks = words(15);
    model.enqueue({ chunks, chunkDelayMs: 20 });
    proxy.cutAfterEvents(3);
    const cuts = proxy.cuts;
    const events = await collect(
      client.artifacts.stream('memo', org.projectId, { skill_id: skill.id, inputs: [], name: 'Memo 1' }),
    );
    expect(proxy.cuts).toBe(cuts + 1);
    expect(events.map((e) => e.id)).toEqual(Array.from({ length: 16 }, (_, i) => i + 1));
    const last = events.at(-1)!;
    expect(last.event).toBe('done');
    const rows = await t.deps.database.db
      .select()
      .from(artifacts)
      .where(eq(artifacts.organizationId, org.organizationId));
    expect(rows).toHaveLength(1);
    expect(last.data).toEqual({ artifact_id: rows[0].id, done: true });
    expect(rows[0].content).toBe(chunks.join(''));
    expect((await client.artifacts.get('memo', rows[0].id)).content).toBe(chunks.join(''));
    expect(model.chatRequests()).toHaveLength(1);
  });

  it('tool approval: the stream shows approval_required, decide() approves, the reply finishes', async () => {
    // The app's tool families are the test's to change: a knowledge search the agent gates.
    Object.assign(t.deps.toolFamilies, testKnowledgeFamily());
    try {
      const org = await orgWithModel();
      const client = clientFor(org);
      const agent = await call(t, 'POST', '/api/v1/agents', {
        key: org.orgKey,
        body: { name: 'Gated', instructions: '', tools: ['knowledge'], tools_requiring_approval: ['*'] },
      });
      expectStatus(agent, 201);
      const { chat } = await client.chats.create({
        project_id: org.projectId,
        agent_id: agent.body.agent.id,
      });
      model.enqueue(
        { toolCalls: [{ id: 'call_c', name: 'knowledge_search', arguments: { query: 'q' } }] },
        { text: 'Found it.' },
      );
      const events: ChatStreamEvent[] = [];
      let decided: Promise<unknown> | null = null;
      for await (const event of client.chats.stream(chat.id, 'Search')) {
        events.push(event);
        if (event.event === 'approval_required') {
          expect(event.data).toMatchObject({ tool_call_id: 'call_c', tool_name: 'knowledge_search' });
          decided = client.chats.decide(chat.id, event.data.tool_call_id, { approved: true });
        }
      }
      expect(events.map((e) => e.event)).toEqual(
        expect.arrayContaining(['tool_start', 'approval_required', 'tool_result', 'done']),
      );
      const reply = (await decided) as Message;
      expect(reply).toMatchObject({ status: 'completed', content: 'Found it.' });
      await expect(client.chats.decide(chat.id, 'call_c', { approved: false })).rejects.toMatchObject({
        status: 409,
        code: 'approval_not_pending',
      });
    } finally {
      delete (t.deps.toolFamilies as Record<string, unknown>).knowledge;
    }
  });

  it("stops at the stream's error event", async () => {
    const org = await orgWithModel();
    const client = clientFor(org);
    const { chat } = await client.chats.create({ project_id: org.projectId });
    await setBalance(t, org, 0);
    const events = await collect(client.chats.stream(chat.id, 'Hi'));
    expect(events).toEqual([{ id: 1, event: 'error', data: expect.objectContaining({ code: 402 }) }]);
  });

  it('turns the errors of both API families into ScriptoriumError with status, code and retryAfter', async () => {
    const org = await orgWithModel();
    const client = clientFor(org, t.baseUrl);
    const v2 = await client.chats.get(999_999).catch((e) => e);
    expect(v2).toBeInstanceOf(ScriptoriumError);
    expect(v2).toMatchObject({ status: 404, code: 'chat_not_found', retryAfter: null });
    const v1 = await client.artifacts.get('nope', 1).catch((e) => e);
    expect(v1).toBeInstanceOf(ScriptoriumError);
    expect(v1).toMatchObject({ status: 404, code: expect.stringMatching(/_not_found$/) });
    const invalid = await client.chats.create({ project_id: 0 }).catch((e) => e);
    expect(invalid).toMatchObject({ status: 400 });
    // A stream refused before it opens is thrown too.
    await expect(collect(client.chats.stream(999_999, 'Hi'))).rejects.toMatchObject({ status: 404 });

    // Rate limits are per key (40 a minute here): the 429 says when to retry.
    let limited: unknown = null;
    for (let i = 0; i < 45 && !limited; i++) {
      limited = await client.chats.list().then(
        () => null,
        (e) => e,
      );
    }
    expect(limited).toBeInstanceOf(ScriptoriumError);
    expect(limited).toMatchObject({ status: 429, code: 'rate_limited', retryAfter: expect.any(Number) });
    expect((limited as ScriptoriumError).retryAfter).toBeGreaterThan(0);
  });

  it('verifies a signed webhook and returns the typed event', async () => {
    const org = await createOrg(t);
    const created = await call(t, 'POST', `/api/v1/projects/${org.projectId}/webhooks`, {
      key: org.orgKey,
      body: { url: `${receiver.url}/hook`, events: ['artifact_generated'] },
    });
    expectStatus(created, 201);
    const { id, secret } = created.body.webhook;
    const test = await call(t, 'POST', `/api/v1/projects/${org.projectId}/webhooks/${id}/test`, {
      key: org.orgKey,
    });
    expectStatus(test, 200);
    const [delivery] = await receiver.waitFor(1, { match: (d) => d.body?.event_data?.webhook_id === id });
    const event = verifyWebhook(delivery.raw, delivery.headers as Record<string, string>, secret);
    expect(event.event_name).toBe('webhook_test');
    if (event.event_name === 'webhook_test') expect(event.event_data.project_id).toBe(org.projectId);
    expect(() =>
      verifyWebhook(delivery.raw.replace('webhook_test', 'webhook_tesT'), delivery.headers as any, secret),
    ).toThrow(WebhookVerificationError);
  });
});
