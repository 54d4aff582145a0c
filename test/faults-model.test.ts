/**
 * Faults of the model behind a real server process: a stream that breaks, a model that never
 * answers, one that stalls mid-reply, one that is slow but alive. Each time the client hears about
 * it, the chat is kept and its lock is released, so the next message is answered.
 */

import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { BootstrapResult } from '../src/modules/bootstrap/service.js';
import { busyEventData } from './helpers/app.js';
import { type FakeModelServer, startFakeModelServer } from './helpers/fake-model-server.js';
import {
  bootstrapService,
  fakeModelEnv,
  killAllProcesses,
  postStream,
  projectDatabase,
  request,
  type ServerProcess,
  type ServiceDatabase,
  serviceEnv,
  startServer,
  waitUntil,
} from './helpers/server-process.js';

// The model may be silent 2 s; a non-streaming client waits 4 s. A slow model that keeps
// talking outlives the client's wait (504) without tripping the idle limit.
const IDLE_MS = 2000;
const REPLY_TIMEOUT_MS = 4000;

describe('faults of the model (real server process)', () => {
  let fake: FakeModelServer;
  let db: ServiceDatabase;
  let boot: BootstrapResult;
  let server: ServerProcess;

  beforeAll(async () => {
    fake = await startFakeModelServer();
    db = await projectDatabase();
    const env = serviceEnv({
      ...db.env,
      ...fakeModelEnv(fake.baseUrl),
      MODEL_IDLE_TIMEOUT_MS: String(IDLE_MS),
      REPLY_TIMEOUT_MS: String(REPLY_TIMEOUT_MS),
    });
    boot = await bootstrapService(env);
    server = await startServer(env, { name: 'model-faults' });
  });
  afterAll(async () => {
    await killAllProcesses();
    await fake?.close();
    await db?.drop();
  });
  afterEach(() => {
    fake.reset();
    // The server must have survived every fault.
    expect(server.running, server.tail()).toBe(true);
  });

  const api = (method: string, path: string, body?: unknown) =>
    request(server.baseUrl, method, path, { key: boot.organization_key, body });

  async function newChat(): Promise<number> {
    const res = await api('POST', '/api/v2/chats', { project_id: boot.project_id });
    expect(res.status, JSON.stringify(res.body)).toBe(201);
    return res.body.response.chat.id;
  }

  async function history(chatId: number) {
    const res = await api('GET', `/api/v2/chats/${chatId}/messages`);
    expect(res.status).toBe(200);
    return res.body.response.messages as Array<{ role: string; content: string; status: string }>;
  }

  /** The lock is free: a message is answered at once (the fake echoes it). */
  async function expectAnswered(chatId: number, content: string) {
    const res = await api('POST', `/api/v2/chats/${chatId}/messages`, { content });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body.response.message).toMatchObject({ role: 'assistant', content: `Echo: ${content}` });
  }

  it('a stream that breaks mid-reply: content, then an error event; the chat is kept and answers the next message', async () => {
    const chatId = await newChat();
    fake.enqueue({ chunks: ['Once', ' upon', ' a', ' time'], chunkDelayMs: 20, failAfterChunks: 2 });
    const streamed = await postStream(
      server.baseUrl,
      `/api/v2/chats/${chatId}/messages`,
      boot.organization_key,
      {
        content: 'Tell me a story',
        stream: true,
      },
    );
    expect(streamed.status).toBe(200);
    expect(streamed.contentType).toContain('text/event-stream');
    expect(streamed.ended).toBe('end');
    const names = streamed.events.map((e) => e.event);
    expect(names.at(-1)).toBe('error');
    expect(names).not.toContain('done');
    expect(
      streamed.events
        .filter((e) => e.event === 'content')
        .map((e) => e.data.content)
        .join(''),
    ).toBe('Once upon');
    expect(streamed.events.at(-1)!.data).toEqual({
      message: expect.any(String),
      code: 500,
      error: 'model_error',
    });

    expect((await api('GET', `/api/v2/chats/${chatId}`)).status).toBe(200);
    // The failed turn shows in history as failed, with the reply so far; the next message is answered.
    const failed = (await history(chatId)).map((m) => [m.role, m.content, m.status]);
    expect(failed).toEqual([
      ['user', 'Tell me a story', 'failed'],
      ['assistant', 'Once upon', 'failed'],
    ]);
    await expectAnswered(chatId, 'Try again');
    expect((await history(chatId)).slice(2).map((m) => m.content)).toEqual(['Try again', 'Echo: Try again']);
  });

  it('the first reply of a new chat breaking: the error names the chat, which then takes messages', async () => {
    fake.enqueue({ chunks: ['Half', ' a', ' reply'], failAfterChunks: 1 });
    const streamed = await postStream(server.baseUrl, '/api/v2/chats', boot.organization_key, {
      project_id: boot.project_id,
      content: 'Hello there',
      stream: true,
    });
    const last = streamed.events.at(-1)!;
    expect(last.event).toBe('error');
    expect(last.data).toMatchObject({ code: 500, chat: { id: expect.any(Number) } });
    const chatId = last.data.chat.id as number;
    expect((await api('GET', `/api/v2/chats/${chatId}`)).status).toBe(200);
    await expectAnswered(chatId, 'Second try');

    // Non-streaming, the same break is a 500 in the v2 error shape, with the chat's id.
    fake.enqueue({ chunks: ['Broken'], failAfterChunks: 0 });
    const created = await api('POST', '/api/v2/chats', { project_id: boot.project_id, content: 'Again' });
    expect(created.status).toBe(500);
    expect(created.body).toMatchObject({
      status: 'error',
      response: {
        code: 500,
        error: expect.any(String),
        message: expect.any(String),
        chat_id: expect.any(Number),
      },
    });
    await expectAnswered(created.body.response.chat_id, 'Third try');
  });

  it('a model that never answers: the turn fails at the idle limit (500), and the lock is released', async () => {
    const chatId = await newChat();
    fake.enqueue({ hang: true });
    const started = Date.now();
    const res = await api('POST', `/api/v2/chats/${chatId}/messages`, { content: 'Are you there?' });
    const elapsed = Date.now() - started;
    expect(res.status, JSON.stringify(res.body)).toBe(500);
    expect(res.body.response.message).toMatch(/did not respond/);
    expect(elapsed).toBeGreaterThanOrEqual(IDLE_MS - 100);
    expect(elapsed).toBeLessThan(REPLY_TIMEOUT_MS);
    await expectAnswered(chatId, 'Now?');
  });

  it('a model that stalls mid-stream: the content so far, then an error event at the idle limit', async () => {
    const chatId = await newChat();
    // The second part would come a minute later; the idle limit ends the turn long before.
    fake.enqueue({ chunks: ['Thinking', ' hard'], chunkDelayMs: 60_000 });
    const started = Date.now();
    const streamed = await postStream(
      server.baseUrl,
      `/api/v2/chats/${chatId}/messages`,
      boot.organization_key,
      {
        content: 'A hard question',
        stream: true,
      },
    );
    expect(Date.now() - started).toBeLessThan(REPLY_TIMEOUT_MS);
    expect(streamed.events.map((e) => e.event)).toEqual(['content', 'error']);
    expect(streamed.events[0].data).toEqual({ content: 'Thinking' });
    expect(streamed.events[1].data).toEqual({
      message: expect.stringMatching(/did not respond/),
      code: 500,
      error: 'model_timeout',
    });
    await expectAnswered(chatId, 'Simpler one');
  });

  it('a slow model that keeps talking: 504 at REPLY_TIMEOUT_MS, 409 meanwhile, the reply lands in history', async () => {
    const chatId = await newChat();
    const words = Array.from({ length: 20 }, (_, i) => ` w${i}`);
    // A part every 300 ms: about 6.5 s in all, longer than the client's wait. (The finish and usage
    // parts yield no stream part, so the last silence is three delays long: still under the limit.)
    fake.enqueue({ chunks: words, chunkDelayMs: 300 });
    const started = Date.now();
    const res = await api('POST', `/api/v2/chats/${chatId}/messages`, { content: 'Write at length' });
    const elapsed = Date.now() - started;
    expect(res.status, JSON.stringify(res.body)).toBe(504);
    expect(res.body.response).toMatchObject({ code: 504, error: 'reply_timeout' });
    expect(elapsed).toBeGreaterThanOrEqual(REPLY_TIMEOUT_MS - 100);
    expect(elapsed).toBeLessThan(REPLY_TIMEOUT_MS + 2000);

    // The turn goes on: another message is refused, streamed or not.
    const busy = await api('POST', `/api/v2/chats/${chatId}/messages`, { content: 'Hurry up' });
    expect(busy.status).toBe(409);
    expect(busy.body.response.code).toBe(409);
    const busyStream = await postStream(
      server.baseUrl,
      `/api/v2/chats/${chatId}/messages`,
      boot.organization_key,
      {
        content: 'Hurry up',
        stream: true,
      },
    );
    expect(busyStream.events).toEqual([
      {
        event: 'error',
        data: busyEventData(),
      },
    ]);

    await waitUntil(async () => (await history(chatId)).length === 2, {
      timeoutMs: 15_000,
      intervalMs: 250,
      what: 'the slow reply in history',
    });
    expect((await history(chatId))[1]).toMatchObject({ role: 'assistant', content: words.join('') });
    await expectAnswered(chatId, 'Thanks');
    expect((await api('GET', '/ready')).status).toBe(200);
  });
});
