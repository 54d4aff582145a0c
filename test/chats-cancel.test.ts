import { and, eq, sql } from 'drizzle-orm';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { chatMessages, chatTurns, creditLedger } from '../src/db/schema/index.js';
import {
  addModel,
  asInHistory,
  type ChatTestApp,
  startChatApp,
  streamedText,
  testKnowledgeFamily,
} from './chats-support.js';
import { call, createMember, createOrg, expectStatus, expectV2Error, type TestOrg } from './helpers/app.js';
import { type FakeModelServer, startFakeModelServer } from './helpers/fake-model-server.js';
import { readSse } from './helpers/sse.js';
import { type SecondProcess, signal, sleep, startSecondProcess } from './streams-support.js';

let server: FakeModelServer;
let t: ChatTestApp;
let second: SecondProcess;

beforeAll(async () => {
  server = await startFakeModelServer();
  // Lease renewals (which also read cancel requests) come every 10 s: a faster stop proves the NOTIFY path.
  const deps = { toolFamilies: testKnowledgeFamily(), turnSettings: { leaseMs: 30_000 } };
  t = await startChatApp({ deps });
  second = await startSecondProcess(t, deps);
});
afterEach(() => server.reset());
afterAll(async () => {
  await second.close();
  await t.close();
  await server.close();
});

/** Prices of 2 and 4 credits per 1k input and output tokens. */
async function orgWithFakeModel(): Promise<TestOrg> {
  const org = await createOrg(t);
  const modelId = await addModel(t, org.organizationId, {
    baseUrl: server.baseUrl,
    model: 'local-llama',
    makeDefault: true,
    input: 2,
    output: 4,
  });
  return { ...org, modelConfigurationId: modelId };
}

async function newChat(org: TestOrg): Promise<number> {
  const res = await call(t, 'POST', '/api/v2/chats', {
    key: org.orgKey,
    body: { project_id: org.projectId },
  });
  expectStatus(res, 201);
  return res.body.response.chat.id;
}

const words = (n: number) => Array.from({ length: n }, (_, i) => `w${i + 1} `);
const history = async (org: TestOrg, chatId: number) => {
  const res = await call(t, 'GET', `/api/v2/chats/${chatId}/messages`, { key: org.orgKey });
  expectStatus(res, 200);
  return res.body.response.messages as any[];
};
const turnsOf = async (chatId: number) =>
  (await t.deps.database.db.select().from(chatTurns).where(eq(chatTurns.chatId, chatId))).map(
    (r) => r.status,
  );
const ledgerOf = async (messageId: number) => {
  const [row] = await t.deps.database.db
    .select()
    .from(creditLedger)
    .where(eq(creditLedger.reference, `message:${messageId}`));
  return row;
};

/** A tool step (usage 100/10) then a slow reply of 100 words that the test cancels. */
function enqueueSlowReply() {
  server.enqueue(
    {
      toolCalls: [{ id: 'call_1', name: 'knowledge_search', arguments: { query: 'holidays' } }],
      usage: { prompt_tokens: 100, completion_tokens: 10 },
    },
    { chunks: words(100), chunkDelayMs: 30, usage: { prompt_tokens: 300, completion_tokens: 100 } },
  );
}

async function expectChatFree(org: TestOrg, chatId: number) {
  server.enqueue({ text: 'Free again' });
  const next = await call(t, 'POST', `/api/v2/chats/${chatId}/messages`, {
    key: org.orgKey,
    body: { content: 'Next' },
  });
  expectStatus(next, 200);
  expect(next.body.response.message.content).toBe('Free again');
}

describe('POST /api/v2/chats/:id/cancel', () => {
  it('streaming, cancelled from another process: the stream ends with done carrying the partial reply, kept in history', async () => {
    const org = await orgWithFakeModel();
    const chat = await newChat(org);
    enqueueSlowReply();
    const midway = signal();
    const stream = readSse(`${t.baseUrl}/api/v2/chats/${chat}/messages`, {
      key: org.orgKey,
      body: { content: 'Tell me about holidays', stream: true },
      onProgress: (events) => {
        if (events.filter((e) => e.event === 'content').length >= 5) midway.resolve();
      },
    });
    await midway.promise;
    const started = Date.now();
    const cancelled = await call(second.api, 'POST', `/api/v2/chats/${chat}/cancel`, { key: org.orgKey });
    expectStatus(cancelled, 200);
    expect(Date.now() - started).toBeLessThan(2000);
    expect(cancelled.body.status).toBe('ok');
    const message = cancelled.body.response.message;
    expect(message).toMatchObject({ role: 'assistant', model: 'local-llama', cancelled: true });
    expect(message.content.length).toBeGreaterThan(0);
    expect(words(100).join('').startsWith(message.content)).toBe(true);
    expect(message.content.length).toBeLessThan(words(100).join('').length);
    expect(message.tool_executions).toMatchObject([{ tool_name: 'knowledge_search', status: 'completed' }]);
    // What the model reported: the finished tool step; the cut-off reply never reported its usage.
    expect(message.usage).toEqual({
      input_tokens: 100,
      output_tokens: 10,
      credits: (100 * 2 + 10 * 4) / 1000,
    });

    const res = await stream;
    const last = res.events.at(-1)!;
    expect(last.event).toBe('done');
    expect(last.data).toEqual({ message });
    expect(streamedText(res.events as any)).toBe(message.content);

    const shown = await history(org, chat);
    expect(shown.map((m) => m.role)).toEqual(['user', 'assistant']);
    expect(shown[1]).toEqual(asInHistory(message));
    const ledger = await ledgerOf(message.id);
    expect(ledger).toMatchObject({ inputTokens: 100, outputTokens: 10, amount: -message.usage.credits });
    expect(await turnsOf(chat)).toEqual(['cancelled']);
    expectV2Error(
      await call(t, 'POST', `/api/v2/chats/${chat}/cancel`, { key: org.orgKey }),
      409,
      'no_turn_in_progress',
    );
    await expectChatFree(org, chat);
    // The partial reply is part of the conversation the model sees next.
    const lastRequest = server.chatRequests().at(-1)!;
    expect(JSON.stringify(lastRequest.body.messages)).toContain(message.content.trim());
  });

  it('blocking: the waiting request answers 200 with the partial reply marked cancelled', async () => {
    const org = await orgWithFakeModel();
    const chat = await newChat(org);
    server.enqueue({ chunks: words(100), chunkDelayMs: 30 });
    const blocking = call(t, 'POST', `/api/v2/chats/${chat}/messages`, {
      key: org.orgKey,
      body: { content: 'Count' },
    });
    await server.waitForRequests(1);
    await sleep(250);
    const cancelled = await call(t, 'POST', `/api/v2/chats/${chat}/cancel`, { key: org.orgKey });
    expectStatus(cancelled, 200);
    const res = await blocking;
    expectStatus(res, 200);
    expect(res.body.response.message).toEqual(cancelled.body.response.message);
    const message = res.body.response.message;
    expect(message.cancelled).toBe(true);
    expect(message.content).toMatch(/^w1 w2 /);
    expect((await history(org, chat)).at(-1)).toEqual(asInHistory(message));
    await expectChatFree(org, chat);
  });

  it('detached (the client disconnected): cancelled from another process, the partial reply lands in history', async () => {
    const org = await orgWithFakeModel();
    const chat = await newChat(org);
    server.enqueue({ chunks: words(100), chunkDelayMs: 30 });
    const left = await readSse(`${t.baseUrl}/api/v2/chats/${chat}/messages`, {
      key: org.orgKey,
      body: { content: 'Count', stream: true },
      until: (events) => events.length >= 3,
    });
    expect(left.events.length).toBeGreaterThanOrEqual(3);
    await sleep(100);
    expect(await turnsOf(chat)).toEqual(['running']);
    const cancelled = await call(second.api, 'POST', `/api/v2/chats/${chat}/cancel`, { key: org.orgKey });
    expectStatus(cancelled, 200);
    const message = cancelled.body.response.message;
    expect(message.cancelled).toBe(true);
    expect(message.content.startsWith(streamedText(left.events as any))).toBe(true);
    const [row] = await t.deps.database.db
      .select()
      .from(chatMessages)
      .where(and(eq(chatMessages.chatId, chat), eq(chatMessages.role, 'assistant')));
    expect(row).toMatchObject({ status: 'cancelled', content: message.content, error: null });
    // A reattached reader sees the same end.
    const replay = await readSse(`${second.baseUrl}/api/v2/chats/${chat}/stream`, { key: org.orgKey });
    expect(replay.events.at(-1)).toMatchObject({ event: 'done', data: { message } });
    await expectChatFree(org, chat);
  });

  it('a create still waiting for the first token: 201 with the chat and an empty cancelled reply', async () => {
    const org = await orgWithFakeModel();
    server.enqueue({ hang: true });
    const creating = call(t, 'POST', '/api/v2/chats', {
      key: org.orgKey,
      body: { project_id: org.projectId, content: 'Hello?' },
    });
    await server.waitForRequests(1);
    const [turn] = await t.deps.database.db
      .select()
      .from(chatTurns)
      .where(eq(chatTurns.organizationId, org.organizationId));
    const cancelled = await call(second.api, 'POST', `/api/v2/chats/${turn.chatId}/cancel`, {
      key: org.orgKey,
    });
    expectStatus(cancelled, 200);
    const res = await creating;
    expectStatus(res, 201);
    expect(res.body.response.chat.id).toBe(turn.chatId);
    expect(res.body.response.message).toMatchObject({ role: 'assistant', content: '', cancelled: true });
    expect(res.body.response.message.usage).toEqual({ input_tokens: 0, output_tokens: 0, credits: 0 });
    await expectChatFree(org, turn.chatId);
  });

  it('a cancel request whose notification never arrived is read at the next lease renewal', async () => {
    const org = await orgWithFakeModel();
    const chat = await newChat(org);
    const shortLease = await startSecondProcess(t, { turnSettings: { leaseMs: 600 } });
    try {
      server.enqueue({ chunks: words(100), chunkDelayMs: 30 });
      const blocking = call(shortLease.api, 'POST', `/api/v2/chats/${chat}/messages`, {
        key: org.orgKey,
        body: { content: 'Count' },
      });
      await server.waitForRequests(1);
      // Marked in the database only, as a process whose NOTIFY was lost would leave it.
      await t.deps.database.db
        .update(chatTurns)
        .set({ cancelRequestedAt: sql`now()` })
        .where(eq(chatTurns.chatId, chat));
      const res = await blocking;
      expectStatus(res, 200);
      expect(res.body.response.message).toMatchObject({ cancelled: true });
      expect(res.body.response.message.content.length).toBeLessThan(words(100).join('').length);
      expect(await turnsOf(chat)).toEqual(['cancelled']);
    } finally {
      await shortLease.close();
    }
  });

  it('409 when nothing runs; 404 for chats of other keys and unknown chats; 401 without a key', async () => {
    const org = await orgWithFakeModel();
    const chat = await newChat(org);
    expectV2Error(
      await call(t, 'POST', `/api/v2/chats/${chat}/cancel`, { key: org.orgKey }),
      409,
      'no_turn_in_progress',
    );
    server.enqueue({ text: 'Done already' });
    expectStatus(
      await call(t, 'POST', `/api/v2/chats/${chat}/messages`, { key: org.orgKey, body: { content: 'Hi' } }),
      200,
    );
    expectV2Error(await call(t, 'POST', `/api/v2/chats/${chat}/cancel`, { key: org.orgKey }), 409);
    const [completed] = (await history(org, chat)).slice(-1);
    expect(completed.cancelled).toBeUndefined();

    server.enqueue({ chunks: words(50), chunkDelayMs: 30 });
    const running = call(t, 'POST', `/api/v2/chats/${chat}/messages`, {
      key: org.orgKey,
      body: { content: 'More' },
    });
    await server.waitForRequests(2);
    const member = await createMember(t, org);
    expectV2Error(await call(t, 'POST', `/api/v2/chats/${chat}/cancel`, { key: member.key }), 404);
    expectV2Error(
      await call(t, 'POST', `/api/v2/chats/${chat}/cancel`, { key: (await createOrg(t)).orgKey }),
      404,
    );
    expectV2Error(await call(t, 'POST', `/api/v2/chats/${chat}/cancel`), 401);
    expectV2Error(await call(t, 'POST', '/api/v2/chats/2147483000/cancel', { key: org.orgKey }), 404);
    // None of those stopped it.
    const res = await running;
    expectStatus(res, 200);
    expect(res.body.response.message.content).toBe(words(50).join(''));
    expect(res.body.response.message.cancelled).toBeUndefined();
  });
});
