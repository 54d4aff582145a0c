/**
 * A chat's next model request goes out while the turn's opening statement runs
 * (src/llm/speculative-requests.ts): the turn takes its response only when the payload it builds
 * from the statement's reads is the one sent early, and drops it otherwise or when refused. The
 * model therefore always receives what the turn would have sent; the metric says what happened.
 */
import type { ModelMessage } from 'ai';
import { eq } from 'drizzle-orm';
import { Agent } from 'undici';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { chats, organizations, projects } from '../src/db/schema/index.js';
import {
  type EarlyRequest,
  type LeanModel,
  streamLean,
  type TurnModelStream,
} from '../src/llm/lean-client.js';
import { type SpeculationOutcome, SpeculativeRequests } from '../src/llm/speculative-requests.js';
import { addModel, type ChatTestApp, postStream, startChatApp, streamedText } from './chats-support.js';
import { call, createOrg, expectStatus, type TestOrg } from './helpers/app.js';
import { type FakeModelServer, startFakeModelServer } from './helpers/fake-model-server.js';
import { sample } from './helpers/metrics.js';

let server: FakeModelServer;
let t: ChatTestApp;

beforeAll(async () => {
  server = await startFakeModelServer();
  t = await startChatApp();
});
afterEach(() => server.reset());
afterAll(async () => {
  await t?.close();
  await server?.close();
});

async function earlyRequests(): Promise<{ used: number; dropped: number }> {
  const res = await call(t, 'GET', '/metrics');
  expectStatus(res, 200);
  const count = (outcome: string) =>
    sample(res.body as string, 'scriptorium_early_model_requests_total', { outcome });
  return { used: count('used'), dropped: count('dropped') };
}

async function chatOf(org: TestOrg, key = org.orgKey): Promise<number> {
  const res = await call(t, 'POST', '/api/v2/chats', { key, body: { project_id: org.projectId } });
  expectStatus(res, 201);
  return res.body.response.chat.id as number;
}

async function send(org: TestOrg, chatId: number, content: string, key = org.orgKey) {
  const res = await postStream(t.baseUrl, `/api/v2/chats/${chatId}/messages`, key, { content, stream: true });
  expect(res.status).toBe(200);
  return res;
}

async function storedContents(org: TestOrg, chatId: number): Promise<string[]> {
  const res = await call(t, 'GET', `/api/v2/chats/${chatId}/messages`, { key: org.orgKey });
  expectStatus(res, 200);
  return (res.body.response.messages as { content: string }[]).map((m) => m.content);
}

/** A chat of `org` whose first message, `one`, got `reply`: its next request is known. */
async function chatAfterTurn(org: TestOrg, reply: string): Promise<number> {
  const chatId = await chatOf(org);
  server.enqueue({ chunks: [reply] });
  await send(org, chatId, 'one');
  return chatId;
}

/**
 * Holds the chat's row in a transaction until the returned function is called: the turn's statement,
 * which updates the chat, waits meanwhile (both backends).
 */
async function holdChatRow(app: ChatTestApp, chatId: number): Promise<() => Promise<void>> {
  let release!: () => void;
  const released = new Promise<void>((resolve) => {
    release = resolve;
  });
  let locked!: () => void;
  const rowHeld = new Promise<void>((resolve) => {
    locked = resolve;
  });
  const holding = app.deps.database.db.transaction(async (tx) => {
    await tx.select({ id: chats.id }).from(chats).where(eq(chats.id, chatId)).for('update');
    locked();
    await released;
  });
  await rowHeld;
  return () => {
    release();
    return holding;
  };
}

const wireMessages = (body: { messages: { role: string; content: string }[] }) =>
  body.messages.filter((m) => m.role !== 'system').map((m) => [m.role, m.content]);

async function orgWithModel(): Promise<TestOrg> {
  const org = await createOrg(t);
  await addModel(t, org.organizationId, { baseUrl: server.baseUrl, model: 'local-llama', makeDefault: true });
  return org;
}

describe('the model request of a chat’s next message, sent early', () => {
  it('is used when the statement’s reads build the same payload: one request per turn', async () => {
    const org = await orgWithModel();
    const chatId = await chatOf(org);
    server.enqueue({ chunks: ['First ', 'answer.'] }, { chunks: ['Second ', 'answer.'] });
    const before = await earlyRequests();
    expect(streamedText((await send(org, chatId, 'one')).events)).toBe('First answer.');
    expect(streamedText((await send(org, chatId, 'two')).events)).toBe('Second answer.');

    const requests = server.chatRequests();
    expect(requests).toHaveLength(2);
    expect(wireMessages(requests[1]!.body)).toEqual([
      ['user', 'one'],
      ['assistant', 'First answer.'],
      ['user', 'two'],
    ]);
    expect(await earlyRequests()).toEqual({ used: before.used + 1, dropped: before.dropped });
    expect(await storedContents(org, chatId)).toEqual(['one', 'First answer.', 'two', 'Second answer.']);
  });

  it('times the reply by the request it used: the model’s wait is the model’s, the statement’s the service’s', async () => {
    const org = await orgWithModel();
    const chatId = await chatAfterTurn(org, 'Noted.');
    const before = await earlyRequests();
    server.enqueue({ chunks: ['Later.'], firstTokenDelayMs: 50 });
    // The request sent early is answered (first chunk after 50 ms) while the turn's statement
    // waits for the chat's row, and its chunks wait for the turn.
    const release = await holdChatRow(t, chatId);
    const sending = send(org, chatId, 'two');
    await server.waitForRequests(2);
    await new Promise((resolve) => setTimeout(resolve, 500));
    await release();
    const { events } = await sending;
    expect(streamedText(events)).toBe('Later.');
    expect(await earlyRequests()).toEqual({ used: before.used + 1, dropped: before.dropped });

    const timing = (events.find((e) => e.event === 'done')!.data as any).message.timing;
    // The request left before the wait and its first chunk came about 50 ms later: that is the
    // model's time. The 500 ms the chunk then waited for the statement is the service's. (The fake
    // times its 50 ms in its own process, so this side may read a little less: 49.7 failed a CI run.)
    expect(timing.model_first_token_ms).toBeGreaterThanOrEqual(45);
    expect(timing.model_first_token_ms).toBeLessThan(400);
    expect(timing.overhead_ms).toBeGreaterThanOrEqual(300);
    expect(timing.overhead_ms + timing.model_first_token_ms).toBeLessThanOrEqual(timing.total_ms);
  });

  it('a chat created empty after a turn in its context sends its first message’s request early too', async () => {
    const org = await orgWithModel();
    server.enqueue({ chunks: ['First chat.'] }, { chunks: ['Second chat.'] });
    await send(org, await chatOf(org), 'one');
    const before = await earlyRequests();
    const fresh = await chatOf(org);
    expect(streamedText((await send(org, fresh, 'hello')).events)).toBe('Second chat.');

    expect(await earlyRequests()).toEqual({ used: before.used + 1, dropped: before.dropped });
    expect(server.chatRequests()).toHaveLength(2);
    expect(wireMessages(server.chatRequests()[1]!.body)).toEqual([['user', 'hello']]);
    expect(server.chatRequests()[1]!.body.messages[0]).toEqual(server.chatRequests()[0]!.body.messages[0]);
  });

  it('is dropped when the chat’s context changed since: the turn sends what it read', async () => {
    const org = await orgWithModel();
    const chatId = await chatAfterTurn(org, 'Noted.');
    await t.deps.database.db
      .update(projects)
      .set({ overview: 'A project about lighthouses.' })
      .where(eq(projects.id, org.projectId));
    const before = await earlyRequests();
    // The dropped request may be answered too: the reply follows the system prompt it was sent with.
    server.setResponder((req) => ({
      chunks: [JSON.stringify(req.body.messages).includes('lighthouses') ? 'Lighthouses.' : 'Stale.'],
    }));
    expect(streamedText((await send(org, chatId, 'two')).events)).toBe('Lighthouses.');

    expect(await earlyRequests()).toEqual({ used: before.used, dropped: before.dropped + 1 });
    const last = server.chatRequests().at(-1)!;
    expect(JSON.stringify(last.body.messages[0])).toContain('lighthouses');
    expect(await storedContents(org, chatId)).toEqual(['one', 'Noted.', 'two', 'Lighthouses.']);
  });

  it('is dropped when the turn is refused (402): nothing is stored or streamed from it', async () => {
    const org = await orgWithModel();
    const chatId = await chatAfterTurn(org, 'Paid.');
    await t.deps.database.db
      .update(organizations)
      .set({ creditBalance: 0 })
      .where(eq(organizations.id, org.organizationId));
    const before = await earlyRequests();
    const refused = await send(org, chatId, 'two');
    expect(refused.events.map((e) => [e.event, e.data.code])).toEqual([['error', 402]]);

    expect(await earlyRequests()).toEqual({ used: before.used, dropped: before.dropped + 1 });
    expect(await storedContents(org, chatId)).toEqual(['one', 'Paid.']);
  });

  it('is sent only for the key whose turn ended last in the chat: another key’s message sends nothing', async () => {
    const org = await orgWithModel();
    const second = await call(t, 'POST', '/api/v1/api_keys', {
      key: org.orgKey,
      body: { kind: 'organization' },
    });
    expectStatus(second, 201);
    const chatId = await chatAfterTurn(org, 'Hello.');
    const before = await earlyRequests();
    // Chats are their key's (spec): the other key's message is refused, and nothing went to the model.
    const other = await postStream(t.baseUrl, `/api/v2/chats/${chatId}/messages`, second.body.key, {
      content: 'two',
      stream: true,
    });
    expect(other.status).toBe(404);
    expect(await earlyRequests()).toEqual(before);
    expect(server.chatRequests()).toHaveLength(1);
    // The chat's own key still finds its next request ready.
    server.enqueue({ chunks: ['Hello again.'] });
    expect(streamedText((await send(org, chatId, 'three')).events)).toBe('Hello again.');
    expect(await earlyRequests()).toEqual({ used: before.used + 1, dropped: before.dropped });
  });
});

describe('the lean client with a request sent early', () => {
  const agent = new Agent();
  afterAll(() => agent.close());
  const model = (): LeanModel => ({
    provider: 'openai-compatible',
    model: 'local-llama',
    url: `${server.baseUrl}/chat/completions`,
    headers: { 'content-type': 'application/json' },
    dispatcher: () => agent,
  });
  const textOf = async (stream: TurnModelStream) => {
    let text = '';
    for await (const part of stream.fullStream) if (part.type === 'text-delta') text += part.text;
    return text;
  };

  it('takes a reply that streamed in full before the turn asked for it: nothing lost, nothing sent twice', async () => {
    const lean = model();
    const signal = new AbortController().signal;
    server.enqueue({ chunks: ['Short.'] });
    const first = streamLean(lean, {
      system: 'Be brief.',
      messages: [{ role: 'user', content: 'one' }],
      tools: {},
      maxSteps: 1,
      signal,
    });
    expect(await textOf(first)).toBe('Short.');
    const counted: SpeculationOutcome[] = [];
    const requests = new SpeculativeRequests((outcome) => counted.push(outcome));
    const context = { projectId: 3, agentId: null, modelConfigurationId: 4 };
    requests.remember(7, { organizationId: 1, keyId: 2 }, context, first.firstRequest!, 'Short.', 100);

    // Far more than the 16 KB a response holds unread: the rest waits in the socket.
    const chunks = Array.from({ length: 200 }, (_, i) => `${String(i).padStart(3, '0')}${'x'.repeat(500)} `);
    server.enqueue({ chunks });
    const early = requests.send(7, { organizationId: 1, keyId: 2 }, 'two');
    expect(early).not.toBeNull();
    await server.waitForRequests(2);
    await new Promise((resolve) => setTimeout(resolve, 300));
    const second = streamLean(lean, {
      system: 'Be brief.',
      messages: [
        { role: 'user', content: 'one' },
        { role: 'assistant', content: 'Short.' },
        { role: 'user', content: 'two' },
      ],
      tools: {},
      maxSteps: 1,
      signal,
      early,
    });
    expect(await textOf(second)).toBe(chunks.join(''));
    expect(counted).toEqual(['used']);
    expect(server.chatRequests()).toHaveLength(2);
    // Used once: the chat's next request is unknown until a turn ends again.
    expect(requests.send(7, { organizationId: 1, keyId: 2 }, 'three')).toBeNull();
    // A chat created empty in the same context gets its first request; in another, nothing.
    requests.created(8, { organizationId: 1, keyId: 2 }, { ...context, agentId: 5 });
    expect(requests.send(8, { organizationId: 1, keyId: 2 }, 'hi')).toBeNull();
    requests.created(9, { organizationId: 1, keyId: 2 }, context);
    const fresh = requests.send(9, { organizationId: 1, keyId: 2 }, 'hi');
    expect(fresh).not.toBeNull();
    fresh!.drop();
    expect(counted).toEqual(['used', 'dropped']);
  });

  it('builds the next requests of a chat without a system prompt byte for byte: the turns take them', async () => {
    const lean = model();
    const signal = new AbortController().signal;
    const counted: SpeculationOutcome[] = [];
    const requests = new SpeculativeRequests((outcome) => counted.push(outcome));
    const owner = { organizationId: 1, keyId: 2 };
    const context = { projectId: 3, agentId: null, modelConfigurationId: 4 };
    const turn = (messages: ModelMessage[], early: EarlyRequest | null = null) =>
      streamLean(lean, { system: '', messages, tools: {}, maxSteps: 1, signal, early });

    server.enqueue({ chunks: ['Short.'] }, { chunks: ['Again.'] }, { chunks: ['Fresh.'] });
    const first = turn([{ role: 'user', content: 'one' }]);
    expect(await textOf(first)).toBe('Short.');
    requests.remember(7, owner, context, first.firstRequest!, 'Short.', 100);
    // The same chat's next message: the kept messages, the reply and the new one.
    const history: ModelMessage[] = [
      { role: 'user', content: 'one' },
      { role: 'assistant', content: 'Short.' },
      { role: 'user', content: 'two' },
    ];
    expect(await textOf(turn(history, requests.send(7, owner, 'two')))).toBe('Again.');
    // A chat created empty in the context: its request opens the messages with the new one.
    requests.created(8, owner, context);
    expect(await textOf(turn([{ role: 'user', content: 'hi' }], requests.send(8, owner, 'hi')))).toBe(
      'Fresh.',
    );

    expect(counted).toEqual(['used', 'used']);
    const bodies = server.chatRequests().map((r) => r.body as { messages: unknown[] });
    expect(bodies).toHaveLength(3);
    expect(bodies[1]!.messages).toEqual(history);
    expect(bodies[2]!.messages).toEqual([{ role: 'user', content: 'hi' }]);
  });

  it('keeps payloads up to its bound, pushing out the oldest chats first', async () => {
    server.enqueue({ chunks: ['Short.'] });
    const first = streamLean(model(), {
      system: 'Be brief.',
      messages: [{ role: 'user', content: 'one' }],
      tools: {},
      maxSteps: 1,
      signal: new AbortController().signal,
    });
    expect(await textOf(first)).toBe('Short.');
    const sent = first.firstRequest!;
    // What one chat's entry holds: the request's messages, the reply, and the rest of the payload.
    const entry = `${sent.head},${JSON.stringify({ role: 'assistant', content: 'Short.' })}${sent.tail}`
      .length;
    const requests = new SpeculativeRequests(() => {}, Math.floor(entry * 2.5));
    const owner = { organizationId: 1, keyId: 2 };
    const context = { projectId: 3, agentId: null, modelConfigurationId: 4 };
    for (const chatId of [1, 2, 3]) requests.remember(chatId, owner, context, sent, 'Short.', 100);
    // Two fit: chat 1's entry went when chat 3's came.
    expect(requests.send(1, owner, 'next')).toBeNull();
    for (const chatId of [2, 3]) {
      const early = requests.send(chatId, owner, 'next');
      expect(early).not.toBeNull();
      early!.drop();
    }
  });
});

describe('EARLY_MODEL_REQUESTS=false', () => {
  let off: ChatTestApp;
  beforeAll(async () => {
    off = await startChatApp({ env: { EARLY_MODEL_REQUESTS: 'false' } });
  });
  afterAll(() => off?.close());

  it('sends a chat’s model request only once its turn’s statement answered', async () => {
    const org = await createOrg(off);
    await addModel(off, org.organizationId, {
      baseUrl: server.baseUrl,
      model: 'local-llama',
      makeDefault: true,
    });
    const created = await call(off, 'POST', '/api/v2/chats', {
      key: org.orgKey,
      body: { project_id: org.projectId },
    });
    expectStatus(created, 201);
    const chatId = created.body.response.chat.id as number;
    const message = (content: string) =>
      postStream(off.baseUrl, `/api/v2/chats/${chatId}/messages`, org.orgKey, { content, stream: true });
    server.enqueue({ chunks: ['Noted.'] }, { chunks: ['Later.'] });
    expect(streamedText((await message('one')).events)).toBe('Noted.');

    const release = await holdChatRow(off, chatId);
    const sending = message('two');
    // Switched on, the request would reach the model now (the test above).
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(server.chatRequests()).toHaveLength(1);
    await release();
    expect(streamedText((await sending).events)).toBe('Later.');
    expect(server.chatRequests()).toHaveLength(2);
    expect(wireMessages(server.chatRequests()[1]!.body)).toEqual([
      ['user', 'one'],
      ['assistant', 'Noted.'],
      ['user', 'two'],
    ]);
  });
});
