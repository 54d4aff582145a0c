import { eq, sql } from 'drizzle-orm';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { chatTurns, eventStreams, streamEvents } from '../src/db/schema/index.js';
import { Notifier } from '../src/streams/notifier.js';
import { addModel, type ChatTestApp, startChatApp, streamedText } from './chats-support.js';
import { call, createMember, createOrg, expectStatus, expectV2Error, type TestOrg } from './helpers/app.js';
import { type FakeModelServer, startFakeModelServer } from './helpers/fake-model-server.js';
import { readSse } from './helpers/sse.js';
import { idsOf, range, type SecondProcess, sleep, startSecondProcess } from './streams-support.js';

let server: FakeModelServer;
let t: ChatTestApp;
let second: SecondProcess;

beforeAll(async () => {
  server = await startFakeModelServer();
  t = await startChatApp({ deps: { streamHub: { pollMs: 200 } } });
  second = await startSecondProcess(t, { streamHub: { pollMs: 200 } });
});
afterEach(() => server.reset());
afterAll(async () => {
  await second.close();
  await t.close();
  await server.close();
});

async function orgWithFakeModel(): Promise<TestOrg> {
  const org = await createOrg(t);
  const modelId = await addModel(t, org.organizationId, { baseUrl: server.baseUrl, makeDefault: true });
  return { ...org, modelConfigurationId: modelId };
}

async function newChat(org: TestOrg, key = org.orgKey): Promise<number> {
  const res = await call(t, 'POST', '/api/v2/chats', { key, body: { project_id: org.projectId } });
  expectStatus(res, 201);
  return res.body.response.chat.id;
}

const words = (n: number) => Array.from({ length: n }, (_, i) => `w${i + 1} `);
const turnStatus = async (chatId: number) => {
  const rows = await t.deps.database.db.select().from(chatTurns).where(eq(chatTurns.chatId, chatId));
  return rows.map((r) => r.status);
};

describe('reattaching to a chat stream', () => {
  it('every event of a streamed turn has an id line after its data line: 1, 2, 3...', async () => {
    const org = await orgWithFakeModel();
    const chat = await newChat(org);
    server.enqueue({ chunks: ['a', 'b', 'c'] });
    const res = await readSse(`${t.baseUrl}/api/v2/chats/${chat}/messages`, {
      key: org.orgKey,
      body: { content: 'Hi', stream: true },
    });
    // Deltas arriving while the process is busy, or in one read of the model's response, are
    // merged into one event (adaptive coalescing, issue 14), so the count may be lower; the ids
    // stay 1, 2, 3... and the first token is never held (it goes out with its read).
    const n = res.events.length;
    expect(res.events.map((e) => e.id)).toEqual(range(1, n).map(String));
    expect(res.events.map((e) => e.event)).toEqual([...Array(n - 1).fill('content'), 'done']);
    expect(streamedText(res.events as any)).toBe('abc');
    expect(res.text).toMatch(/^event: content\ndata: \{"content":"a[bc]*"\}\nid: 1\n\n/);
  });

  it('a client that drops mid-stream gets exactly the remaining events, in order, from another process (Last-Event-ID)', async () => {
    const org = await orgWithFakeModel();
    const chat = await newChat(org);
    const chunks = words(40);
    server.enqueue({ chunks, chunkDelayMs: 25 });
    const first = await readSse(`${t.baseUrl}/api/v2/chats/${chat}/messages`, {
      key: org.orgKey,
      body: { content: 'Count', stream: true },
      until: (events) => events.length >= 5,
    });
    const seen = first.events.length;
    expect(idsOf(first.events)).toEqual(range(1, seen));
    // Still running in the first process: the second one serves it live from the database.
    expect(await turnStatus(chat)).toEqual(['running']);
    const rest = await readSse(`${second.baseUrl}/api/v2/chats/${chat}/stream`, {
      key: org.orgKey,
      headers: { 'last-event-id': String(seen) },
    });
    expect(rest.status).toBe(200);
    expect(rest.headers.get('content-type')).toBe('text/event-stream; charset=utf-8');
    expect(idsOf(rest.events)).toEqual(range(seen + 1, seen + rest.events.length));
    expect(rest.events.at(-1)!.event).toBe('done');
    const all = [...first.events, ...rest.events];
    expect(idsOf(all)).toEqual(range(1, all.length));
    expect(streamedText(all as any)).toBe(chunks.join(''));
    expect(rest.events.at(-1)!.data.message).toMatchObject({ role: 'assistant', content: chunks.join('') });
  });

  it('?after= resumes the same way; with no position the whole stream replays; all of it read is a 204', async () => {
    const org = await orgWithFakeModel();
    const chat = await newChat(org);
    server.enqueue({ chunks: ['one ', 'two ', 'three ', 'four'], chunkDelayMs: 30 });
    const original = await readSse(`${t.baseUrl}/api/v2/chats/${chat}/messages`, {
      key: org.orgKey,
      body: { content: 'Hi', stream: true },
    });
    // Usually 5 (4 deltas 30 ms apart, then done); fewer when a busy machine merged deltas.
    const n = original.events.length;
    expect(n).toBeGreaterThanOrEqual(3);
    expect(idsOf(original.events)).toEqual(range(1, n));

    for (const base of [t.baseUrl, second.baseUrl]) {
      const after = await readSse(`${base}/api/v2/chats/${chat}/stream?after=2`, { key: org.orgKey });
      expect(after.events).toEqual(original.events.slice(2));
      const whole = await readSse(`${base}/api/v2/chats/${chat}/stream`, { key: org.orgKey });
      expect(whole.events).toEqual(original.events);
      // The header wins over the query (EventSource resends the URL it started with).
      const header = await readSse(`${base}/api/v2/chats/${chat}/stream?after=1`, {
        key: org.orgKey,
        headers: { 'last-event-id': String(n - 1) },
      });
      expect(header.events).toEqual(original.events.slice(n - 1));
      const done = await readSse(`${base}/api/v2/chats/${chat}/stream?after=${n}`, { key: org.orgKey });
      expect(done.status).toBe(204);
      expect(done.text).toBe('');
    }
  });

  it('204 without a turn, or once the last turn ended more than 10 minutes ago; 404 for chats of other keys; 400 for a bad position', async () => {
    const org = await orgWithFakeModel();
    const chat = await newChat(org);
    const none = await call(t, 'GET', `/api/v2/chats/${chat}/stream`, { key: org.orgKey });
    expect(none.status).toBe(204);

    server.enqueue({ text: 'Answer' });
    expectStatus(
      await call(t, 'POST', `/api/v2/chats/${chat}/messages`, { key: org.orgKey, body: { content: 'Hi' } }),
      200,
    );
    const recent = await readSse(`${t.baseUrl}/api/v2/chats/${chat}/stream`, { key: org.orgKey });
    expect(recent.events.map((e) => e.event)).toEqual(['content', 'done']);
    await t.deps.database.db
      .update(chatTurns)
      .set({ finishedAt: sql`now() - interval '11 minutes'` })
      .where(eq(chatTurns.chatId, chat));
    expect((await call(t, 'GET', `/api/v2/chats/${chat}/stream`, { key: org.orgKey })).status).toBe(204);

    const member = await createMember(t, org);
    expectV2Error(
      await call(t, 'GET', `/api/v2/chats/${chat}/stream`, { key: member.key }),
      404,
      'chat_not_found',
    );
    expectV2Error(await call(t, 'GET', `/api/v2/chats/${chat}/stream`, { key: org.adminKey }), 404);
    const other = await createOrg(t);
    expectV2Error(await call(t, 'GET', `/api/v2/chats/${chat}/stream`, { key: other.orgKey }), 404);
    expectV2Error(await call(t, 'GET', `/api/v2/chats/${chat}/stream`), 401);
    expectV2Error(
      await call(t, 'GET', `/api/v2/chats/${chat}/stream`, {
        key: org.orgKey,
        headers: { 'last-event-id': 'x' },
      }),
      400,
    );
    expectV2Error(await call(t, 'GET', `/api/v2/chats/${chat}/stream?after=-1`, { key: org.orgKey }), 400);
    expectV2Error(await call(t, 'GET', '/api/v2/chats/99999999/stream', { key: org.orgKey }), 404);
  });

  it('several readers of one turn, in both processes, each get every event once', async () => {
    const org = await orgWithFakeModel();
    const chat = await newChat(org);
    const chunks = words(20);
    server.enqueue({ chunks, chunkDelayMs: 20, firstTokenDelayMs: 150 });
    const writer = readSse(`${t.baseUrl}/api/v2/chats/${chat}/messages`, {
      key: org.orgKey,
      body: { content: 'Hi', stream: true },
    });
    await server.waitForRequests(1);
    const readers = await Promise.all(
      [t.baseUrl, second.baseUrl, second.baseUrl].map((base) =>
        readSse(`${base}/api/v2/chats/${chat}/stream`, { key: org.orgKey }),
      ),
    );
    const original = await writer;
    expect(idsOf(original.events)).toEqual(range(1, original.events.length));
    expect(streamedText(original.events as any)).toBe(chunks.join(''));
    for (const reader of readers) expect(reader.events).toEqual(original.events);
  });

  it('a turn whose process died after writing its reply, before storing `done`: the stored events, then `done` with that reply', async () => {
    const org = await orgWithFakeModel();
    const chat = await newChat(org);
    server.enqueue({ chunks: ['Kept ', 'whole'] });
    const original = await readSse(`${t.baseUrl}/api/v2/chats/${chat}/messages`, {
      key: org.orgKey,
      body: { content: 'Hi', stream: true },
    });
    const done = original.events.at(-1) as { id: string; event: string; data: { message: any } };
    expect(done.event).toBe('done');
    // What a process killed within the hub's final flush leaves: the reply and the turn's end
    // written, the stream without its last event, its liveness still vouched for.
    const db = t.deps.database.db;
    const [turn] = await db.select().from(chatTurns).where(eq(chatTurns.chatId, chat));
    const key = `chat-turn:${turn.id}`;
    const lastSeq = Number(done.id) - 1;
    // Local readers get `done` at once; the hub stores it a few milliseconds later.
    for (let i = 0; i < 100; i++) {
      const [head] = await db.select().from(eventStreams).where(eq(eventStreams.key, key));
      if (head?.endedAt) break;
      await sleep(20);
    }
    await db
      .delete(streamEvents)
      .where(sql`${streamEvents.streamKey} = ${key} and ${streamEvents.seq} > ${lastSeq}`);
    await db
      .update(eventStreams)
      .set({ lastSeq, endedAt: null, aliveUntil: sql`now() + interval '1 minute'` })
      .where(eq(eventStreams.key, key));
    await db
      .update(chatTurns)
      .set({ finishedAt: sql`now() - interval '10 seconds'` })
      .where(eq(chatTurns.id, turn.id));

    const res = await readSse(`${second.baseUrl}/api/v2/chats/${chat}/stream`, { key: org.orgKey });
    expect(res.events.slice(0, -1)).toEqual(original.events.slice(0, -1));
    const recovered = res.events.at(-1) as { id: string; event: string; data: { message: any } };
    expect(recovered.event).toBe('done');
    expect(recovered.id).toBe(String(lastSeq));
    expect(recovered.data.message).toMatchObject({
      id: done.data.message.id,
      role: 'assistant',
      content: 'Kept whole',
      status: 'completed',
    });
  });

  it('a turn whose process died: the stored events, then an error event; the chat is not stuck', async () => {
    const org = await orgWithFakeModel();
    const chat = await newChat(org);
    const db = t.deps.database.db;
    const [turn] = await db
      .insert(chatTurns)
      .values({
        organizationId: org.organizationId,
        chatId: chat,
        status: 'running',
        leaseExpiresAt: sql`now() + interval '1 second'`,
      })
      .returning();
    const key = `chat-turn:${turn.id}`;
    await db.insert(eventStreams).values({ key, lastSeq: 2, aliveUntil: sql`now() - interval '1 second'` });
    await db.insert(streamEvents).values([
      { streamKey: key, seq: 1, event: 'content', data: { content: 'Half ' } },
      { streamKey: key, seq: 2, event: 'content', data: { content: 'way' } },
    ]);
    const res = await readSse(`${second.baseUrl}/api/v2/chats/${chat}/stream`, { key: org.orgKey });
    expect(res.events).toEqual([
      { id: '1', event: 'content', data: { content: 'Half ' } },
      { id: '2', event: 'content', data: { content: 'way' } },
      { id: '2', event: 'error', data: { message: expect.stringMatching(/interrupted/), code: 500 } },
    ]);
    await sleep(1100);
    server.enqueue({ text: 'Fresh' });
    const next = await call(t, 'POST', `/api/v2/chats/${chat}/messages`, {
      key: org.orgKey,
      body: { content: 'Hi' },
    });
    expectStatus(next, 200);
  });

  it('a fast 200-token reply is stored in a few batched writes (one NOTIFY each), not one per token', async () => {
    const org = await orgWithFakeModel();
    const chat = await newChat(org);
    const notifier = new Notifier(t.deps.database, t.app.log);
    const notices: string[] = [];
    await notifier.listen('scriptorium_stream_events', (payload) => notices.push(payload));
    try {
      const chunks = words(200);
      server.enqueue({ chunks });
      const res = await readSse(`${t.baseUrl}/api/v2/chats/${chat}/messages`, {
        key: org.orgKey,
        body: { content: 'Hi', stream: true },
      });
      // At most one event per token (busy moments merge deltas), numbered without a gap.
      const n = res.events.length;
      expect(n).toBeLessThanOrEqual(201);
      expect(idsOf(res.events)).toEqual(range(1, n));
      expect(streamedText(res.events as any)).toBe(chunks.join(''));
      await sleep(100);
      const [turn] = await t.deps.database.db.select().from(chatTurns).where(eq(chatTurns.chatId, chat));
      const mine = notices
        .flatMap((p) => p.split('\n'))
        .filter((line) => line.startsWith(`chat-turn:${turn.id} `));
      expect(mine.length).toBeGreaterThan(0);
      expect(mine.length).toBeLessThanOrEqual(10);
      expect(mine.at(-1)).toBe(`chat-turn:${turn.id} ${n}`);
      const stored = await t.deps.database.db
        .select({ seq: streamEvents.seq })
        .from(streamEvents)
        .where(eq(streamEvents.streamKey, `chat-turn:${turn.id}`));
      expect(stored.map((r) => r.seq).sort((a, b) => a - b)).toEqual(range(1, n));
    } finally {
      await notifier.close();
    }
  });
});
