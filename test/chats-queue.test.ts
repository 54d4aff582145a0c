/**
 * Busy policy per message (issue 17 item 1): `if_busy` reject / enqueue / interrupt, the chat's
 * queue (listing, removal, archive, credits at turn start), across two processes on one database.
 */
import { eq } from 'drizzle-orm';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { chatQueuedMessages, organizations } from '../src/db/schema/index.js';
import { addModel, type ChatTestApp, startChatApp } from './chats-support.js';
import { busyEventData, call, createOrg, expectStatus, expectV2Error, type TestOrg } from './helpers/app.js';
import {
  type FakeModelServer,
  type RecordedRequest,
  startFakeModelServer,
} from './helpers/fake-model-server.js';
import { type IdEvent, readSse, type SseRead } from './helpers/sse.js';
import { type SecondProcess, signal, sleep, startSecondProcess } from './streams-support.js';

let server: FakeModelServer;
let t: ChatTestApp;
let second: SecondProcess;

beforeAll(async () => {
  server = await startFakeModelServer();
  t = await startChatApp();
  second = await startSecondProcess(t);
});
afterEach(() => server.reset());
afterAll(async () => {
  await second.close();
  await t.close();
  await server.close();
});

const lastUserText = (req: RecordedRequest): string => {
  const users = (req.body?.messages ?? []).filter((m: { role: string }) => m.role === 'user');
  const content = users.at(-1)?.content;
  return typeof content === 'string' ? content : JSON.stringify(content);
};

/** Every reply echoes its message; `slow` ones (content starting with "slow") take about 6 s. */
function echoReplies() {
  server.setResponder((req) => {
    const text = lastUserText(req);
    if (text.startsWith('slow')) {
      return { chunks: Array.from({ length: 60 }, (_, i) => `s${i} `), chunkDelayMs: 100 };
    }
    return { text: `Echo: ${text}`, chunkDelayMs: 5 };
  });
}
const SLOW_REPLY = Array.from({ length: 60 }, (_, i) => `s${i} `).join('');

async function orgWithFakeModel(): Promise<TestOrg> {
  const org = await createOrg(t);
  const modelId = await addModel(t, org.organizationId, { baseUrl: server.baseUrl, makeDefault: true });
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

const send = (org: TestOrg, chatId: number, body: Record<string, unknown>, app = t) =>
  call(app, 'POST', `/api/v2/chats/${chatId}/messages`, { key: org.orgKey, body });

/** A streamed send over real HTTP; `ready` resolves once `until` holds for the events so far. */
function streamSend(
  org: TestOrg,
  chatId: number,
  body: Record<string, unknown>,
  options: {
    baseUrl?: string;
    readyWhen?: (events: IdEvent[]) => boolean;
    until?: (events: IdEvent[]) => boolean;
  } = {},
): { ready: Promise<void>; done: Promise<SseRead> } {
  const ready = signal();
  const readyWhen = options.readyWhen ?? ((events: IdEvent[]) => events.length > 0);
  const done = readSse(`${options.baseUrl ?? t.baseUrl}/api/v2/chats/${chatId}/messages`, {
    key: org.orgKey,
    body: { ...body, stream: true },
    until: options.until,
    onProgress: (events) => {
      if (readyWhen(events)) ready.resolve();
    },
  });
  void done.then(
    () => ready.resolve(),
    () => ready.resolve(),
  );
  return { ready: ready.promise, done };
}

/** A slow turn streaming in the first process, once its first words arrived: its read to the end. */
async function startSlowTurn(org: TestOrg, chatId: number): Promise<{ done: Promise<SseRead> }> {
  const slow = streamSend(
    org,
    chatId,
    { content: 'slow story' },
    { readyWhen: (events) => events.some((e) => e.event === 'content') },
  );
  await slow.ready;
  return { done: slow.done };
}

const history = async (org: TestOrg, chatId: number) => {
  const res = await call(t, 'GET', `/api/v2/chats/${chatId}/messages?page_size=100`, { key: org.orgKey });
  expectStatus(res, 200);
  return res.body.response.messages as Array<{
    role: string;
    content: string;
    status: string;
    cancelled?: boolean;
  }>;
};
const queueOf = async (org: TestOrg, chatId: number) => {
  const res = await call(t, 'GET', `/api/v2/chats/${chatId}/queue`, { key: org.orgKey });
  expectStatus(res, 200);
  return res.body.response.queued as Array<{
    message_id: number;
    content: string;
    position: number;
    created_at: string;
  }>;
};
const names = (read: SseRead) => read.events.map((e) => e.event);
const textOf = (read: SseRead) =>
  read.events
    .filter((e) => e.event === 'content')
    .map((e) => e.data.content)
    .join('');

describe('if_busy', () => {
  it('anything but reject, enqueue or interrupt (or a non-string) is 400', async () => {
    const org = await orgWithFakeModel();
    const chatId = await newChat(org);
    for (const ifBusy of ['later', 'REJECT', '', 5, true, null, ['enqueue'], { policy: 'enqueue' }]) {
      const res = await send(org, chatId, { content: 'Hi', if_busy: ifBusy });
      expectV2Error(res, 400);
      expect(res.body.response.message).toMatch(/if_busy/);
    }
    expect(await history(org, chatId)).toEqual([]);
  });

  it('reject (the default) answers 409 with the running turn and its stream url', async () => {
    const org = await orgWithFakeModel();
    echoReplies();
    const chatId = await newChat(org);
    const { done: slow } = await startSlowTurn(org, chatId);
    for (const body of [{ content: 'Hello?' }, { content: 'Hello?', if_busy: 'reject' }]) {
      const res = await send(org, chatId, body);
      expectV2Error(res, 409, 'turn_in_progress');
      expect(res.body.response.running_turn).toEqual({
        id: expect.any(Number),
        stream_url: `/api/v2/chats/${chatId}/stream`,
      });
    }
    // Streamed, the error event carries the same code and running turn.
    for (const ifBusy of [undefined, 'reject']) {
      const refused = await streamSend(org, chatId, { content: 'Hello?', if_busy: ifBusy }).done;
      expect(refused.events).toEqual([
        {
          id: '1',
          event: 'error',
          data: busyEventData(chatId),
        },
      ]);
    }
    // The stream URL reattaches to that turn.
    const reattached = await readSse(`${t.baseUrl}/api/v2/chats/${chatId}/stream`, { key: org.orgKey });
    expect(textOf(reattached)).toBe(SLOW_REPLY);
    expect(textOf(await slow)).toBe(SLOW_REPLY);
    expect(await queueOf(org, chatId)).toEqual([]);
  });

  it('enqueue on a free chat runs at once, as reject does (no queued event)', async () => {
    const org = await orgWithFakeModel();
    echoReplies();
    const chatId = await newChat(org);
    const streamed = await streamSend(org, chatId, { content: 'First', if_busy: 'enqueue' }).done;
    expect(names(streamed)[0]).toBe('content');
    expect(names(streamed).at(-1)).toBe('done');
    expect(textOf(streamed)).toBe('Echo: First');
    const blocking = await send(org, chatId, { content: 'Second', if_busy: 'enqueue' });
    expectStatus(blocking, 200);
    expect(blocking.body.response.message.content).toBe('Echo: Second');
    const interrupt = await send(org, chatId, { content: 'Third', if_busy: 'interrupt' });
    expectStatus(interrupt, 200);
    expect(interrupt.body.response.message.content).toBe('Echo: Third');
  });

  it('three enqueued messages run in arrival order: queued first, then their own turn; history alternates', async () => {
    const org = await orgWithFakeModel();
    echoReplies();
    const chatId = await newChat(org);
    const { done: slow } = await startSlowTurn(org, chatId);
    const streams: Promise<SseRead>[] = [];
    for (const content of ['one', 'two', 'three']) {
      const queued = streamSend(org, chatId, { content, if_busy: 'enqueue' });
      await queued.ready;
      streams.push(queued.done);
    }
    // Waiting messages are not history; they are listed in the queue, next first.
    expect((await history(org, chatId)).map((m) => m.content)).toEqual(['slow story']);
    const waiting = await queueOf(org, chatId);
    expect(waiting.map((q) => [q.content, q.position])).toEqual([
      ['one', 1],
      ['two', 2],
      ['three', 3],
    ]);
    expect(waiting[0].created_at).toMatch(/^\d{4}-\d{2}-\d{2}T/);

    expect(textOf(await slow)).toBe(SLOW_REPLY);
    const reads = await Promise.all(streams);
    reads.forEach((read, i) => {
      expect(read.status).toBe(200);
      expect(read.events[0]).toMatchObject({
        event: 'queued',
        data: { message_id: waiting[i].message_id, position: i + 1 },
      });
      expect(names(read).slice(1, 2)).toEqual(['content']);
      expect(names(read).at(-1)).toBe('done');
      const content = ['one', 'two', 'three'][i];
      expect(textOf(read)).toBe(`Echo: ${content}`);
      expect(read.events.at(-1)!.data.message.content).toBe(`Echo: ${content}`);
    });
    const shown = await history(org, chatId);
    expect(shown.map((m) => [m.role, m.content])).toEqual([
      ['user', 'slow story'],
      ['assistant', SLOW_REPLY],
      ['user', 'one'],
      ['assistant', 'Echo: one'],
      ['user', 'two'],
      ['assistant', 'Echo: two'],
      ['user', 'three'],
      ['assistant', 'Echo: three'],
    ]);
    // Each turn's model saw the earlier ones: they ran one after the other.
    const requests = server.chatRequests();
    expect(requests.map(lastUserText)).toEqual(['slow story', 'one', 'two', 'three']);
    expect(await queueOf(org, chatId)).toEqual([]);
  });

  it('a blocking enqueue waits for its own reply, also accepted by another process', async () => {
    const org = await orgWithFakeModel();
    echoReplies();
    const chatId = await newChat(org);
    const { done: slow } = await startSlowTurn(org, chatId);
    const [here, there] = await Promise.all([
      send(org, chatId, { content: 'here', if_busy: 'enqueue' }),
      sleep(300).then(() => send(org, chatId, { content: 'there', if_busy: 'enqueue' }, second.api)),
    ]);
    expectStatus(here, 200);
    expect(here.body.response.message).toMatchObject({ role: 'assistant', content: 'Echo: here' });
    expectStatus(there, 200);
    expect(there.body.response.message).toMatchObject({ role: 'assistant', content: 'Echo: there' });
    await slow;
    expect((await history(org, chatId)).map((m) => m.content)).toEqual([
      'slow story',
      SLOW_REPLY,
      'here',
      'Echo: here',
      'there',
      'Echo: there',
    ]);
  });

  it('at most 10 wait per chat (409 queue_full); removal answers 204 and its waiting clients get 409 dequeued', async () => {
    const org = await orgWithFakeModel();
    echoReplies();
    const chatId = await newChat(org);
    const { done: slow } = await startSlowTurn(org, chatId);
    // A streamed waiter and a blocking waiter, then eight more that disconnect once queued.
    const streamed = streamSend(org, chatId, { content: 'm1', if_busy: 'enqueue' });
    await streamed.ready;
    const blocking = send(org, chatId, { content: 'm2', if_busy: 'enqueue' });
    await expect.poll(async () => (await queueOf(org, chatId)).length).toBe(2);
    for (let i = 3; i <= 10; i++) {
      const read = await streamSend(
        org,
        chatId,
        { content: `m${i}`, if_busy: 'enqueue' },
        { until: (e) => e.length > 0 },
      ).done;
      expect(read.events[0]).toMatchObject({ event: 'queued', data: { position: i } });
    }
    const full = await send(org, chatId, { content: 'm11', if_busy: 'enqueue' });
    expectV2Error(full, 409, 'queue_full');
    const fullStream = await streamSend(org, chatId, { content: 'm11', if_busy: 'enqueue' }).done;
    expect(fullStream.events).toEqual([
      {
        id: '1',
        event: 'error',
        data: { message: expect.stringMatching(/10 messages/), code: 409, error: 'queue_full' },
      },
    ]);
    const waiting = await queueOf(org, chatId);
    expect(waiting.map((q) => q.content)).toEqual(Array.from({ length: 10 }, (_, i) => `m${i + 1}`));

    const remove = (id: number) =>
      call(t, 'DELETE', `/api/v2/chats/${chatId}/queue/${id}`, { key: org.orgKey });
    expectStatus(await remove(waiting[0].message_id), 204);
    // Removed from the other process too.
    const removed = await call(
      second.api,
      'DELETE',
      `/api/v2/chats/${chatId}/queue/${waiting[1].message_id}`,
      {
        key: org.orgKey,
      },
    );
    expectStatus(removed, 204);
    const streamedRead = await streamed.done;
    expect(streamedRead.events.map((e) => e.event)).toEqual(['queued', 'error']);
    expect(streamedRead.events[1].data).toEqual({
      message: expect.any(String),
      code: 409,
      error: 'dequeued',
    });
    expectV2Error(await blocking, 409, 'dequeued');
    expectV2Error(await remove(waiting[0].message_id), 404);
    expectV2Error(await remove(999_999), 404);
    expect((await queueOf(org, chatId)).map((q) => [q.content, q.position])).toEqual(
      Array.from({ length: 8 }, (_, i) => [`m${i + 3}`, i + 1]),
    );
    // Another key's chat and queue are not found.
    const other = await createOrg(t);
    expectV2Error(await call(t, 'GET', `/api/v2/chats/${chatId}/queue`, { key: other.orgKey }), 404);
    expectV2Error(
      await call(t, 'DELETE', `/api/v2/chats/${chatId}/queue/${waiting[2].message_id}`, {
        key: other.orgKey,
      }),
      404,
    );
    expectV2Error(await call(t, 'DELETE', `/api/v2/chats/${chatId}/queue/abc`, { key: org.orgKey }), 400);

    // The rest run in order once the slow turn ended.
    await slow;
    await expect
      .poll(async () => (await history(org, chatId)).length, { timeout: 20_000, interval: 200 })
      .toBe(18);
    const contents = (await history(org, chatId)).map((m) => m.content);
    expect(contents.slice(2)).toEqual(
      Array.from({ length: 8 }, (_, i) => [`m${i + 3}`, `Echo: m${i + 3}`]).flat(),
    );
  });

  it('interrupt cancels the running turn (partial reply kept) and runs ahead of the queue', async () => {
    const org = await orgWithFakeModel();
    echoReplies();
    const chatId = await newChat(org);
    const { done: slow } = await startSlowTurn(org, chatId);
    const queued = streamSend(org, chatId, { content: 'waiting', if_busy: 'enqueue' });
    await queued.ready;
    // From the other process: the turn runs in the first one.
    const urgent = await send(org, chatId, { content: 'urgent', if_busy: 'interrupt' }, second.api);
    expectStatus(urgent, 200);
    expect(urgent.body.response.message.content).toBe('Echo: urgent');
    const cut = await slow;
    expect(names(cut).at(-1)).toBe('done');
    const partial = cut.events.at(-1)!.data.message;
    expect(partial.cancelled).toBe(true);
    expect(SLOW_REPLY.startsWith(partial.content)).toBe(true);
    expect(partial.content.length).toBeLessThan(SLOW_REPLY.length);
    const waited = await queued.done;
    expect(names(waited)[0]).toBe('queued');
    expect(textOf(waited)).toBe('Echo: waiting');
    const shown = await history(org, chatId);
    expect(shown.map((m) => m.content)).toEqual([
      'slow story',
      partial.content,
      'urgent',
      'Echo: urgent',
      'waiting',
      'Echo: waiting',
    ]);
    expect(shown[1]).toMatchObject({ status: 'cancelled', cancelled: true });

    // Streamed interrupt: no queued event, the new turn's events.
    const { done: slow2 } = await startSlowTurn(org, chatId);
    const streamedUrgent = await streamSend(org, chatId, { content: 'urgent again', if_busy: 'interrupt' })
      .done;
    expect(names(streamedUrgent)[0]).toBe('content');
    expect(textOf(streamedUrgent)).toBe('Echo: urgent again');
    expect((await slow2).events.at(-1)!.data.message.cancelled).toBe(true);
  });

  it('a blocking enqueue answers 504 at the reply timeout (queue time included); its message still runs', async () => {
    const org = await orgWithFakeModel();
    echoReplies();
    const chatId = await newChat(org);
    const { done: slow } = await startSlowTurn(org, chatId);
    const impatient = await startSecondProcess(t, { config: { ...t.deps.config, replyTimeoutMs: 1000 } });
    try {
      const res = await send(org, chatId, { content: 'patience', if_busy: 'enqueue' }, impatient.api);
      expectV2Error(res, 504, 'reply_timeout');
    } finally {
      await impatient.close();
    }
    await slow;
    await expect
      .poll(async () => (await history(org, chatId)).map((m) => m.content), { timeout: 10_000 })
      .toEqual(['slow story', SLOW_REPLY, 'patience', 'Echo: patience']);
  });

  it('Idempotency-Key on a streamed enqueue: a repeat while queued is 409; once started it reattaches to its turn', async () => {
    const org = await orgWithFakeModel();
    echoReplies();
    const chatId = await newChat(org);
    const { done: slow } = await startSlowTurn(org, chatId);
    const headers = { 'idempotency-key': `queue-${chatId}` };
    const body = { content: 'once only', stream: true, if_busy: 'enqueue' };
    const url = `${t.baseUrl}/api/v2/chats/${chatId}/messages`;
    const ready = signal();
    const first = readSse(url, {
      key: org.orgKey,
      body,
      headers,
      onProgress: (events) => {
        if (events.length > 0) ready.resolve();
      },
    });
    await ready.promise;
    const repeat = await readSse(url, { key: org.orgKey, body, headers });
    expect(repeat.status).toBe(409);
    expect(repeat.body.response.error).toBe('idempotency_request_in_progress');
    await slow;
    const read = await first;
    expect(textOf(read)).toBe('Echo: once only');
    const again = await readSse(url, { key: org.orgKey, body, headers });
    expect(again.status).toBe(200);
    expect(textOf(again)).toBe('Echo: once only');
    expect(names(again).at(-1)).toBe('done');
    expect((await history(org, chatId)).map((m) => m.content)).toEqual([
      'slow story',
      SLOW_REPLY,
      'once only',
      'Echo: once only',
    ]);
  });

  it('a key revoked while its message waits: the message does not run (403 for its client)', async () => {
    const org = await orgWithFakeModel();
    echoReplies();
    const created = await call(t, 'POST', '/api/v1/api_keys', {
      key: org.orgKey,
      body: { kind: 'organization' },
    });
    expectStatus(created, 201);
    const keyed: TestOrg = { ...org, orgKey: created.body.key };
    const chatId = await newChat(keyed);
    const { done: slow } = await startSlowTurn(keyed, chatId);
    const waiting = send(keyed, chatId, { content: 'after revocation', if_busy: 'enqueue' });
    await expect.poll(async () => (await queueOf(keyed, chatId)).length).toBe(1);
    expectStatus(
      await call(t, 'DELETE', `/api/v1/api_keys/${created.body.api_key.id}`, { key: org.orgKey }),
      200,
    );
    await slow;
    expectV2Error(await waiting, 403, 'invalid_api_key');
    expect(server.chatRequests().map(lastUserText)).toEqual(['slow story']);
  });

  it('a process that stops answers its waiting clients 503; their messages stay queued and run on another', async () => {
    const org = await orgWithFakeModel();
    echoReplies();
    const chatId = await newChat(org);
    const { done: slow } = await startSlowTurn(org, chatId);
    const third = await startSecondProcess(t);
    const blocking = send(org, chatId, { content: 'outlives its process', if_busy: 'enqueue' }, third.api);
    await expect.poll(async () => (await queueOf(org, chatId)).length).toBe(1);
    await third.close();
    expectV2Error(await blocking, 503, 'shutting_down');
    expect((await queueOf(org, chatId)).map((q) => q.content)).toEqual(['outlives its process']);
    await slow;
    await expect
      .poll(async () => (await history(org, chatId)).map((m) => m.content), { timeout: 10_000 })
      .toEqual(['slow story', SLOW_REPLY, 'outlives its process', 'Echo: outlives its process']);
  });

  it('credits are checked when the queued turn starts (402); archiving drops the queue (404 for its waiting clients)', async () => {
    const org = await orgWithFakeModel();
    echoReplies();
    const chatId = await newChat(org);
    const { done: slow } = await startSlowTurn(org, chatId);
    const broke = send(org, chatId, { content: 'no money', if_busy: 'enqueue' });
    await expect.poll(async () => (await queueOf(org, chatId)).length).toBe(1);
    await t.deps.database.db
      .update(organizations)
      .set({ creditBalance: 0 })
      .where(eq(organizations.id, org.organizationId));
    await slow;
    expectV2Error(await broke, 402, 'insufficient_credits');
    expect((await history(org, chatId)).map((m) => m.content)).toEqual(['slow story', SLOW_REPLY]);
    await t.deps.database.db
      .update(organizations)
      .set({ creditBalance: 1000 })
      .where(eq(organizations.id, org.organizationId));

    const { done: slow2 } = await startSlowTurn(org, chatId);
    const blocking = send(org, chatId, { content: 'to drop', if_busy: 'enqueue' });
    const streamed = streamSend(org, chatId, { content: 'to drop too', if_busy: 'enqueue' });
    await streamed.ready;
    await expect.poll(async () => (await queueOf(org, chatId)).length).toBe(2);
    expectStatus(await call(t, 'DELETE', `/api/v2/chats/${chatId}`, { key: org.orgKey }), 204);
    expectV2Error(await blocking, 404, 'chat_not_found');
    const read = await streamed.done;
    expect(read.events.map((e) => e.event)).toEqual(['queued', 'error']);
    expect(read.events[1].data).toMatchObject({ code: 404, error: 'chat_not_found' });
    await slow2;
    const rows = await t.deps.database.db
      .select({ status: chatQueuedMessages.status })
      .from(chatQueuedMessages)
      .where(eq(chatQueuedMessages.chatId, chatId));
    expect(rows.map((r) => r.status).sort()).toEqual(['dropped', 'dropped', 'failed']);
  });
});
