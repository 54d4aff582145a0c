import { and, eq, sql } from 'drizzle-orm';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { artifacts, chatMessages, chats, chatTurns, creditLedger } from '../src/db/schema/index.js';
import { createArtifactType, createSkill, setBalance, useFakeModel } from './artifacts-fixtures.js';
import {
  addModel,
  asInHistory,
  type ChatTestApp,
  startChatApp,
  streamedText,
  testKnowledgeFamily,
} from './chats-support.js';
import {
  busyEventData,
  call,
  createOrg,
  expectStatus,
  expectV1Error,
  expectV2Error,
  type TestOrg,
} from './helpers/app.js';
import { type FakeModelServer, startFakeModelServer } from './helpers/fake-model-server.js';
import { readSse } from './helpers/sse.js';
import { idsOf, range, type SecondProcess, startSecondProcess } from './streams-support.js';

let server: FakeModelServer;
let t: ChatTestApp;
let second: SecondProcess;

beforeAll(async () => {
  server = await startFakeModelServer();
  const deps = { toolFamilies: testKnowledgeFamily(), streamHub: { pollMs: 200 } };
  t = await startChatApp({ deps });
  second = await startSecondProcess(t, deps);
});
afterEach(() => server.reset());
afterAll(async () => {
  await second.close();
  await t.close();
  await server.close();
});

const words = (n: number) => Array.from({ length: n }, (_, i) => `w${i + 1} `);
const idem = (key: string) => ({ 'idempotency-key': key });

async function orgWithFakeModel(prices: { input?: number; output?: number } = {}): Promise<TestOrg> {
  const org = await createOrg(t);
  const modelId = await addModel(t, org.organizationId, {
    baseUrl: server.baseUrl,
    makeDefault: true,
    ...prices,
  });
  return { ...org, modelConfigurationId: modelId };
}

const chatsOf = async (org: TestOrg) =>
  t.deps.database.db.select().from(chats).where(eq(chats.organizationId, org.organizationId));
const turnsOf = async (org: TestOrg) =>
  t.deps.database.db.select().from(chatTurns).where(eq(chatTurns.organizationId, org.organizationId));
const ledgerOf = async (reference: string) =>
  t.deps.database.db.select().from(creditLedger).where(eq(creditLedger.reference, reference));

describe('Idempotency-Key on streamed chat requests', () => {
  it('a repeated create reattaches to the first stream from its start, running or finished: one chat, one turn', async () => {
    const org = await orgWithFakeModel();
    const chunks = words(30);
    server.enqueue({ chunks, chunkDelayMs: 25 });
    const body = { project_id: org.projectId, content: 'Count to thirty', stream: true };
    const url = (base: string) => `${base}/api/v2/chats`;
    const first = await readSse(url(t.baseUrl), {
      key: org.orgKey,
      body,
      headers: idem('create-1'),
      until: (events) => events.length >= 3,
    });
    expect(idsOf(first.events)).toEqual(range(1, first.events.length));

    // While it runs, from another process: everything from event 1, then live to the end.
    const repeat = await readSse(url(second.baseUrl), { key: org.orgKey, body, headers: idem('create-1') });
    expect(repeat.status).toBe(200);
    // At most one event per token (busy moments merge deltas), without a gap.
    const n = repeat.events.length;
    expect(n).toBeLessThanOrEqual(31);
    expect(idsOf(repeat.events)).toEqual(range(1, n));
    expect(repeat.events.slice(0, first.events.length)).toEqual(first.events);
    const done = repeat.events.at(-1)!;
    expect(done.event).toBe('done');
    expect(done.data.message.content).toBe(chunks.join(''));
    expect(streamedText(repeat.events as any)).toBe(chunks.join(''));
    const [chat] = await chatsOf(org);
    expect(done.data.chat).toMatchObject({ id: chat.id, title: 'Count to thirty' });

    // Finished: the same stream again, from either process.
    for (const base of [t.baseUrl, second.baseUrl]) {
      const again = await readSse(url(base), { key: org.orgKey, body, headers: idem('create-1') });
      expect(again.events).toEqual(repeat.events);
    }
    expect(await chatsOf(org)).toHaveLength(1);
    expect(await turnsOf(org)).toHaveLength(1);
    expect(server.chatRequests()).toHaveLength(1);

    // A repeat with Last-Event-ID replays only what follows it (issue 16); a bad one is a 400.
    const resumed = await readSse(url(second.baseUrl), {
      key: org.orgKey,
      body,
      headers: { ...idem('create-1'), 'last-event-id': String(n - 3) },
    });
    expect(idsOf(resumed.events)).toEqual(range(n - 2, n));
    expect(resumed.events).toEqual(repeat.events.slice(n - 3));
    expectV2Error(
      await call(t, 'POST', '/api/v2/chats', {
        key: org.orgKey,
        body,
        headers: { ...idem('create-1'), 'last-event-id': 'x' },
      }),
      400,
    );
    // Without an Idempotency-Key a POST is never resumed: Last-Event-ID is ignored, a new chat starts.
    server.enqueue({ chunks: ['new'] });
    const fresh = await readSse(url(t.baseUrl), {
      key: org.orgKey,
      body,
      headers: { 'last-event-id': '27' },
    });
    expect(fresh.events.map((e) => e.event)).toEqual(['content', 'done']);
    expect(await chatsOf(org)).toHaveLength(2);
    expect(server.chatRequests()).toHaveLength(2);

    const mismatch = await call(t, 'POST', '/api/v2/chats', {
      key: org.orgKey,
      body: { ...body, content: 'Something else' },
      headers: idem('create-1'),
    });
    expectV2Error(mismatch, 422, 'idempotency_key_reused');
    expect(await chatsOf(org)).toHaveLength(2);
  });

  it('a repeated message reattaches instead of sending it twice', async () => {
    const org = await orgWithFakeModel();
    const created = await call(t, 'POST', '/api/v2/chats', {
      key: org.orgKey,
      body: { project_id: org.projectId },
    });
    const chatId = created.body.response.chat.id;
    const chunks = words(20);
    server.enqueue({ chunks, chunkDelayMs: 25 });
    const url = `/api/v2/chats/${chatId}/messages`;
    const body = { content: 'Hi', stream: true };
    const first = readSse(`${t.baseUrl}${url}`, { key: org.orgKey, body, headers: idem('msg-1') });
    await server.waitForRequests(1);
    const repeat = await readSse(`${second.baseUrl}${url}`, {
      key: org.orgKey,
      body,
      headers: idem('msg-1'),
    });
    const original = await first;
    expect(repeat.events).toEqual(original.events);
    // Tokens may be merged while the process is busy (adaptive coalescing): ids 1, 2, 3... up to
    // however many events the reply made, the same ones for both readers.
    expect(idsOf(repeat.events)).toEqual(range(1, original.events.length));
    expect(streamedText(repeat.events as any)).toBe(chunks.join(''));
    const rows = await t.deps.database.db.select().from(chatMessages).where(eq(chatMessages.chatId, chatId));
    expect(rows.map((r) => r.role)).toEqual(['user', 'assistant']);
    expect(server.chatRequests()).toHaveLength(1);
  });

  it('a refused create is replayed with the same chat; a 409 refusal is not kept, so a later retry runs', async () => {
    const org = await orgWithFakeModel();
    await setBalance(t, org, 0);
    const body = { project_id: org.projectId, content: 'Hi', stream: true };
    const refused = await readSse(`${t.baseUrl}/api/v2/chats`, {
      key: org.orgKey,
      body,
      headers: idem('poor'),
    });
    expect(refused.events).toEqual([
      {
        id: '1',
        event: 'error',
        data: {
          message: expect.any(String),
          code: 402,
          error: 'insufficient_credits',
          chat: expect.objectContaining({ id: expect.any(Number) }),
        },
      },
    ]);
    const again = await readSse(`${second.baseUrl}/api/v2/chats`, {
      key: org.orgKey,
      body,
      headers: idem('poor'),
    });
    expect(again.events).toEqual(refused.events);
    expect(await chatsOf(org)).toHaveLength(1);
    await setBalance(t, org, 1000);

    const chatId = refused.events[0].data.chat.id;
    server.enqueue({ chunks: words(20), chunkDelayMs: 25 }, { text: 'Second reply' });
    const busy = readSse(`${t.baseUrl}/api/v2/chats/${chatId}/messages`, {
      key: org.orgKey,
      body: { content: 'First', stream: true },
    });
    await server.waitForRequests(1);
    const message = { content: 'Second', stream: true };
    const conflict = await readSse(`${t.baseUrl}/api/v2/chats/${chatId}/messages`, {
      key: org.orgKey,
      body: message,
      headers: idem('busy'),
    });
    expect(conflict.events).toEqual([
      {
        id: '1',
        event: 'error',
        data: busyEventData(),
      },
    ]);
    await busy;
    const retried = await readSse(`${t.baseUrl}/api/v2/chats/${chatId}/messages`, {
      key: org.orgKey,
      body: message,
      headers: idem('busy'),
    });
    expect(retried.events.at(-1)).toMatchObject({
      event: 'done',
      data: { message: { content: 'Second reply' } },
    });
  });

  it('blocking repeats are replayed by the generic mechanism (no second turn)', async () => {
    const org = await orgWithFakeModel();
    server.enqueue({ text: 'Only once' });
    const body = { project_id: org.projectId, content: 'Hi' };
    const first = await call(t, 'POST', '/api/v2/chats', {
      key: org.orgKey,
      body,
      headers: idem('blocking'),
    });
    expectStatus(first, 201);
    const again = await call(second.api, 'POST', '/api/v2/chats', {
      key: org.orgKey,
      body,
      headers: idem('blocking'),
    });
    expect(again.body).toEqual(first.body);
    expect(await turnsOf(org)).toHaveLength(1);
  });
});

describe('usage on assistant messages', () => {
  it('equals the tokens the model reported, summed over steps, and the ledger row', async () => {
    const org = await orgWithFakeModel({ input: 2, output: 4 });
    server.enqueue(
      {
        toolCalls: [{ name: 'knowledge_search', arguments: { query: 'holidays' } }],
        usage: { prompt_tokens: 120, completion_tokens: 15 },
      },
      { text: 'Use the HR portal.', usage: { prompt_tokens: 230, completion_tokens: 25 } },
    );
    const res = await readSse(`${t.baseUrl}/api/v2/chats`, {
      key: org.orgKey,
      body: { project_id: org.projectId, content: 'Holidays?', stream: true },
    });
    const message = res.events.at(-1)!.data.message;
    const credits = (350 * 2 + 40 * 4) / 1000;
    expect(message.usage).toEqual({ input_tokens: 350, output_tokens: 40, credits });
    const [ledger] = await ledgerOf(`message:${message.id}`);
    expect(ledger).toMatchObject({ inputTokens: 350, outputTokens: 40, amount: -credits });
    const history = await call(t, 'GET', `/api/v2/chats/${res.events.at(-1)!.data.chat.id}/messages`, {
      key: org.orgKey,
    });
    const [user, assistant] = history.body.response.messages;
    expect(user.usage).toBeUndefined();
    expect(assistant).toEqual(asInHistory(message));

    // The ledger sums over the organization's chat usage match the messages.
    const rows = await t.deps.database.db
      .select({
        input: sql<number>`sum(${creditLedger.inputTokens})::int`,
        output: sql<number>`sum(${creditLedger.outputTokens})::int`,
      })
      .from(creditLedger)
      .where(and(eq(creditLedger.organizationId, org.organizationId), eq(creditLedger.kind, 'usage')));
    expect(rows[0]).toEqual({ input: 350, output: 40 });
  });
});

describe('Idempotency-Key on artifact streams, and artifact usage', () => {
  let org: TestOrg;
  let slug: string;
  let skillId: number;
  beforeAll(async () => {
    org = await createOrg(t);
    await useFakeModel(t, org, server, { input: 3, output: 5 });
    const type = await createArtifactType(t, org, 'memo', 'Memo');
    slug = type.slug;
    skillId = (
      await createSkill(t, org, { name: 'Plain', content: 'Write a short memo.', typeIds: [type.id] })
    ).id;
  });
  const artifactsOf = () =>
    t.deps.database.db.select().from(artifacts).where(eq(artifacts.organizationId, org.organizationId));

  it('a repeated generation reattaches to the first stream from its start: one artifact, one model call', async () => {
    const chunks = words(20);
    server.enqueue({ chunks, chunkDelayMs: 25 });
    const url = (base: string) =>
      `${base}/api/v1/artifact_types/${slug}/artifacts/stream?project_id=${org.projectId}`;
    const body = { skill_id: skillId, inputs: [], name: 'Memo' };
    const first = await readSse(url(t.baseUrl), {
      key: org.orgKey,
      body,
      headers: idem('art-1'),
      until: (events) => events.length >= 2,
    });
    expect(idsOf(first.events)).toEqual(range(1, first.events.length));
    const repeat = await readSse(url(second.baseUrl), { key: org.orgKey, body, headers: idem('art-1') });
    expect(idsOf(repeat.events)).toEqual(range(1, 21));
    expect(repeat.events.slice(0, first.events.length)).toEqual(first.events);
    const done = repeat.events.at(-1)!;
    expect(done).toMatchObject({ event: 'done', data: { done: true } });
    const rows = await artifactsOf();
    expect(rows).toHaveLength(1);
    expect(done.data.artifact_id).toBe(rows[0].id);
    expect(rows[0].content).toBe(chunks.join(''));
    const replay = await readSse(url(t.baseUrl), { key: org.orgKey, body, headers: idem('art-1') });
    expect(replay.events).toEqual(repeat.events);
    const resumed = await readSse(url(second.baseUrl), {
      key: org.orgKey,
      body,
      headers: { ...idem('art-1'), 'last-event-id': '18' },
    });
    expect(resumed.events).toEqual(repeat.events.slice(18));
    expect(server.chatRequests()).toHaveLength(1);
    expectV1Error(
      await call(t, 'POST', `/api/v1/artifact_types/${slug}/artifacts/stream?project_id=${org.projectId}`, {
        key: org.orgKey,
        body: { ...body, name: 'Other' },
        headers: idem('art-1'),
      }),
      422,
      'idempotency_key_reused',
    );

    // Refinement: a repeat replays; the artifact is refined once.
    server.enqueue({ text: 'Shorter memo.' });
    const refineUrl = (base: string) =>
      `${base}/api/v1/artifact_types/${slug}/artifacts/${rows[0].id}/refine_stream`;
    const refined = await readSse(refineUrl(t.baseUrl), {
      key: org.orgKey,
      body: { refine_prompt: 'Shorter' },
      headers: idem('refine-1'),
    });
    const refinedAgain = await readSse(refineUrl(second.baseUrl), {
      key: org.orgKey,
      body: { refine_prompt: 'Shorter' },
      headers: idem('refine-1'),
    });
    expect(refinedAgain.events).toEqual(refined.events);
    expect(refined.events.at(-1)).toMatchObject({ event: 'done', id: String(refined.events.length) });
    const [after] = await artifactsOf();
    expect(after.chatHistory).toHaveLength(4);
    expect(server.chatRequests()).toHaveLength(2);
  });

  it("an artifact's usage equals the tokens the model reported and the ledger", async () => {
    server.enqueue({ text: '# Memo\n\nBody.', usage: { prompt_tokens: 400, completion_tokens: 60 } });
    const res = await call(
      t,
      'POST',
      `/api/v1/artifact_types/${slug}/artifacts?project_id=${org.projectId}`,
      {
        key: org.orgKey,
        body: { skill_id: skillId, inputs: [] },
      },
    );
    expectStatus(res, 201);
    const credits = (400 * 3 + 60 * 5) / 1000;
    expect(res.body.usage).toEqual({ input_tokens: 400, output_tokens: 60, credits });
    expect(res.body.artifact.usage).toEqual(res.body.usage);
    const [ledger] = await ledgerOf(`artifact:${res.body.artifact.id}`);
    expect(ledger).toMatchObject({ inputTokens: 400, outputTokens: 60, amount: -credits });

    server.enqueue({ text: '# Memo\n\nShorter.', usage: { prompt_tokens: 500, completion_tokens: 40 } });
    const refined = await call(
      t,
      'POST',
      `/api/v1/artifact_types/${slug}/artifacts/${res.body.artifact.id}/refine`,
      {
        key: org.orgKey,
        body: { refine_prompt: 'Shorter' },
      },
    );
    expectStatus(refined, 200);
    const refineCredits = (500 * 3 + 40 * 5) / 1000;
    expect(refined.body.usage).toEqual({ input_tokens: 500, output_tokens: 40, credits: refineCredits });
    const ledgers = await ledgerOf(`artifact:${res.body.artifact.id}`);
    expect(ledgers.map((l) => [l.inputTokens, l.outputTokens, l.amount])).toEqual([
      [400, 60, -credits],
      [500, 40, -refineCredits],
    ]);
    expect(refined.body.artifact.usage).toEqual({
      input_tokens: 900,
      output_tokens: 100,
      credits: credits + refineCredits,
    });
  });
});
