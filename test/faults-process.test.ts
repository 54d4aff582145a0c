/**
 * A server process that dies mid-turn (SIGKILL) or is asked to stop (SIGTERM) with streams open.
 * A killed process's turn keeps its chat for at most TURN_LEASE_MS, then is marked failed; a
 * stopped process finishes its streams within the grace period, cancels what is left and exits 0.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { BootstrapResult } from '../src/modules/bootstrap/service.js';
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
  type SseEvent,
  serviceEnv,
  startServer,
  waitUntil,
} from './helpers/server-process.js';
import { readSse } from './helpers/sse.js';

const postgres = process.env.TEST_BACKEND === 'postgres';
const LEASE_MS = 3000;

describe('faults of the server process (real processes)', () => {
  let fake: FakeModelServer;
  let db: ServiceDatabase;
  let boot: BootstrapResult;
  let env: Record<string, string>;

  beforeAll(async () => {
    fake = await startFakeModelServer();
    db = await projectDatabase();
    env = serviceEnv({ ...db.env, ...fakeModelEnv(fake.baseUrl) });
    boot = await bootstrapService(env);
  });
  afterEach(async () => {
    await killAllProcesses();
    fake.reset();
  });
  afterAll(async () => {
    await killAllProcesses();
    await fake?.close();
    await db?.drop();
  });

  const api = (server: ServerProcess, method: string, path: string, body?: unknown) =>
    request(server.baseUrl, method, path, { key: boot.organization_key, body });

  async function newChat(server: ServerProcess): Promise<number> {
    const res = await api(server, 'POST', '/api/v2/chats', { project_id: boot.project_id });
    expect(res.status, JSON.stringify(res.body)).toBe(201);
    return res.body.response.chat.id;
  }

  async function history(server: ServerProcess, chatId: number) {
    const res = await api(server, 'GET', `/api/v2/chats/${chatId}/messages`);
    expect(res.status).toBe(200);
    return (res.body.response.messages as Array<{ content: string }>).map((m) => m.content);
  }

  async function statuses(server: ServerProcess, chatId: number) {
    const res = await api(server, 'GET', `/api/v2/chats/${chatId}/messages`);
    expect(res.status).toBe(200);
    return (res.body.response.messages as Array<{ content: string; status: string }>).map((m) => [
      m.content,
      m.status,
    ]);
  }

  const words = (n: number, tag: string) => Array.from({ length: n }, (_, i) => ` ${tag}${i}`);
  const contentOf = (events: SseEvent[]) =>
    events
      .filter((e) => e.event === 'content')
      .map((e) => e.data.content)
      .join('');

  it('SIGKILL mid-turn: the chat is locked until the lease runs out, then the turn is marked failed and the next message works', async () => {
    const turnEnv = { ...env, TURN_LEASE_MS: String(LEASE_MS) };
    const first = await startServer(turnEnv, { name: 'doomed' });
    // On PostgreSQL a second process is already serving; PGlite serves one process, so it restarts.
    const second = postgres ? await startServer(turnEnv, { name: 'survivor' }) : null;
    const chatId = await newChat(first);

    fake.enqueue({ chunks: words(40, 'w'), chunkDelayMs: 200 });
    let killedAt = 0;
    const streamed = await postStream(
      first.baseUrl,
      `/api/v2/chats/${chatId}/messages`,
      boot.organization_key,
      { content: 'Write a long answer', stream: true },
      {
        onEvent: (event) => {
          if (event.event === 'content' && killedAt === 0) {
            killedAt = Date.now();
            first.child.kill('SIGKILL');
          }
        },
      },
    );
    expect(killedAt).toBeGreaterThan(0);
    expect((await first.exited).signal).toBe('SIGKILL');
    // The stream broke off: no done, no error event from a dead process.
    expect(streamed.ended).toBe('error');
    expect(streamed.events.map((e) => e.event)).not.toContain('done');

    const survivor = second ?? (await startServer(turnEnv, { name: 'restarted' }));
    if (postgres) {
      // The dead process's lease still holds the chat.
      const busy = await api(survivor, 'POST', `/api/v2/chats/${chatId}/messages`, { content: 'Hello?' });
      expect(busy.status, JSON.stringify(busy.body)).toBe(409);
      expect(Date.now() - killedAt).toBeLessThan(LEASE_MS);
    }
    let answer: Awaited<ReturnType<typeof api>> | undefined;
    await waitUntil(
      async () => {
        answer = await api(survivor, 'POST', `/api/v2/chats/${chatId}/messages`, { content: 'Hello?' });
        if (answer.status === 409) return false;
        expect(answer.status, JSON.stringify(answer.body)).toBe(200);
        return true;
      },
      { timeoutMs: LEASE_MS + 10_000, intervalMs: 250, what: 'the lease of the killed turn to run out' },
    );
    // Renewed every third of the lease: the chat was free at most a lease (plus polling) after the kill.
    if (postgres) expect(Date.now() - killedAt).toBeLessThan(LEASE_MS + 3000);
    expect(answer!.body.response.message.content).toBe('Echo: Hello?');
    // The interrupted turn shows in history as failed, its reply as far as it was streamed and stored.
    const shown = await statuses(survivor, chatId);
    expect(shown.map(([, status]) => status)).toEqual(['failed', 'failed', 'completed', 'completed']);
    expect(shown[0][0]).toBe('Write a long answer');
    expect(words(40, 'w').join('').startsWith(shown[1][0])).toBe(true);
    expect(shown.slice(2).map(([content]) => content)).toEqual(['Hello?', 'Echo: Hello?']);

    if (!postgres) expect(await survivor.stop()).toBe(0);
    const turns = await db.query<{ status: string }>(
      'select status from chat_turns where chat_id = $1 order by id',
      [chatId],
    );
    expect(turns.map((t) => t.status)).toEqual(['expired', 'completed']);
    const messages = await db.query<{ role: string; status: string; error: string | null }>(
      'select role, status, error from chat_messages where chat_id = $1 order by id',
      [chatId],
    );
    expect(messages).toEqual([
      { role: 'user', status: 'failed', error: expect.stringMatching(/interrupted/) },
      { role: 'assistant', status: 'failed', error: expect.stringMatching(/interrupted/) },
      { role: 'user', status: 'completed', error: null },
      { role: 'assistant', status: 'completed', error: null },
    ]);
  }, 90_000);

  /** A turn streaming on a process that is SIGKILLed after its third word; resolves after the kill. */
  async function killMidTurn(doomed: ServerProcess, chatId: number) {
    fake.enqueue({ chunks: words(60, 'd'), chunkDelayMs: 150 });
    let seen = 0;
    const streamed = await postStream(
      doomed.baseUrl,
      `/api/v2/chats/${chatId}/messages`,
      boot.organization_key,
      { content: 'Tell me everything', stream: true },
      {
        onEvent: (event) => {
          if (event.event === 'content' && ++seen === 3) doomed.child.kill('SIGKILL');
        },
      },
    );
    await doomed.exited;
    expect(streamed.ended).toBe('error');
    return Date.now();
  }

  it('a dead turn ends its readers: GET /stream replays the stored events, then an error event once the lease ran out', async () => {
    const turnEnv = { ...env, TURN_LEASE_MS: String(LEASE_MS) };
    const doomed = await startServer(turnEnv, { name: 'doomed-reader' });
    const reader = postgres ? await startServer(turnEnv, { name: 'reader' }) : null;
    const chatId = await newChat(doomed);
    const killedAt = await killMidTurn(doomed, chatId);
    // PGlite: the restarted process knows a turn left running by its predecessor is dead.
    const server = reader ?? (await startServer(turnEnv, { name: 'restarted-reader' }));

    const attachedAt = Date.now();
    const read = await readSse(`${server.baseUrl}/api/v2/chats/${chatId}/stream`, {
      key: boot.organization_key,
      timeoutMs: 20_000,
    });
    const endedAfter = Date.now() - killedAt;
    const waited = Date.now() - attachedAt;
    expect(read.status).toBe(200);
    expect(read.ended).toBe('end');
    const names = read.events.map((e) => e.event);
    expect(names.at(-1)).toBe('error');
    expect(names.slice(0, -1).every((name) => name === 'content')).toBe(true);
    expect(names.length).toBeGreaterThan(1);
    expect(read.events.at(-1)!.data).toEqual({
      message: expect.stringMatching(/turn was interrupted/i),
      code: 500,
    });
    // The replayed events keep their ids; the error repeats the last one (nothing was missed).
    expect(read.events.map((e) => Number(e.id))).toEqual([
      ...read.events.slice(0, -1).map((_, i) => i + 1),
      read.events.length - 1,
    ]);
    // PostgreSQL: once the lease ran out (renewed every third of it), not when the stream's
    // liveness lapses (60 s). PGlite: at once, the turn was left by the previous process.
    if (postgres) expect(endedAfter).toBeLessThan(LEASE_MS + 4000);
    else expect(waited).toBeLessThan(3000);

    // A reader attaching later gets the same, at once.
    const again = await readSse(`${server.baseUrl}/api/v2/chats/${chatId}/stream`, {
      key: boot.organization_key,
      timeoutMs: 5000,
    });
    expect(again.events.at(-1)?.event).toBe('error');
  }, 90_000);

  it('POST /cancel on a turn whose process died answers at once with the partial reply, and frees the chat', async () => {
    // The default lease: the dead turn would hold its chat for a minute.
    const doomed = await startServer(env, { name: 'doomed-cancel' });
    const other = postgres ? await startServer(env, { name: 'canceller' }) : null;
    const chatId = await newChat(doomed);
    await killMidTurn(doomed, chatId);
    const server = other ?? (await startServer(env, { name: 'restarted-canceller' }));

    const started = Date.now();
    const cancelled = await api(server, 'POST', `/api/v2/chats/${chatId}/cancel`);
    const took = Date.now() - started;
    expect(cancelled.status, JSON.stringify(cancelled.body)).toBe(200);
    // PostgreSQL: 3 s for the turn's process to answer; PGlite: known dead at once.
    expect(took).toBeLessThan(postgres ? 6000 : 2000);
    const message = cancelled.body.response.message;
    expect(message).toMatchObject({ role: 'assistant', status: 'cancelled', cancelled: true });
    // What was streamed before the kill (at least the three words the client saw, stored by then or not).
    expect(words(60, 'd').join('').startsWith(message.content)).toBe(true);

    // The stream ends with done carrying it; the chat takes a message at once.
    const read = await readSse(`${server.baseUrl}/api/v2/chats/${chatId}/stream`, {
      key: boot.organization_key,
      timeoutMs: 5000,
    });
    expect(read.events.at(-1)).toMatchObject({
      event: 'done',
      data: { message: { id: message.id, cancelled: true } },
    });
    const next = await api(server, 'POST', `/api/v2/chats/${chatId}/messages`, { content: 'Again' });
    expect(next.status, JSON.stringify(next.body)).toBe(200);
    expect(await statuses(server, chatId)).toEqual([
      ['Tell me everything', 'completed'],
      [message.content, 'cancelled'],
      ['Again', 'completed'],
      ['Echo: Again', 'completed'],
    ]);
  }, 90_000);

  it('SIGTERM with open streams: they finish within the grace period, the one too long is cancelled, the process exits 0', async () => {
    // Turns get the grace period less 3 s to finish: 5 s. The default lease (60 s) stays, so a
    // chat left locked after the shutdown would show as a 409 below.
    const server = await startServer(
      { ...env, SHUTDOWN_GRACE_MS: '8000', LOG_LEVEL: 'info' },
      { name: 'stopping' },
    );
    const short = [await newChat(server), await newChat(server), await newChat(server)];
    const long = await newChat(server);

    // The fake answers in arrival order: three replies of about 2 s, then one of 20 s.
    const shortReplies = short.map((_, i) => words(10, `s${i}-`));
    const streams: Array<ReturnType<typeof postStream>> = [];
    const started: Array<Promise<void>> = [];
    const chats = [...short, long];
    for (const [i, chatId] of chats.entries()) {
      fake.enqueue({ chunks: i < short.length ? shortReplies[i] : words(100, 'l'), chunkDelayMs: 200 });
      let firstContent!: () => void;
      started.push(new Promise<void>((resolve) => (firstContent = resolve)));
      streams.push(
        postStream(
          server.baseUrl,
          `/api/v2/chats/${chatId}/messages`,
          boot.organization_key,
          { content: `Stream ${i}`, stream: true },
          { onEvent: (e) => e.event === 'content' && firstContent() },
        ),
      );
      // One at a time, so the fake's replies go to the chats in order.
      await fake.waitForRequests(i + 1, 10_000);
    }
    await Promise.all(started);

    const termAt = Date.now();
    server.child.kill('SIGTERM');
    await server.waitForLine((line) => line.includes('shutting down'), 5000);
    // New work is refused while the process drains (503, or no connection once it stopped listening).
    const refused = await api(server, 'GET', '/api/v2/chats').catch((err: Error) => err);
    if (!(refused instanceof Error)) {
      expect(refused.status).toBe(503);
      expect(refused.body).toMatchObject({
        status: 'error',
        response: { code: 503, error: 'shutting_down' },
      });
    }

    const results = await Promise.all(streams);
    const exit = await server.exited;
    const exitedAfter = Date.now() - termAt;
    expect(exit).toEqual({ code: 0, signal: null });
    expect(exitedAfter).toBeLessThan(8000);

    for (const [i, result] of results.slice(0, short.length).entries()) {
      expect(result.ended).toBe('end');
      expect(result.events.at(-1)?.event).toBe('done');
      expect(contentOf(result.events)).toBe(shortReplies[i].join(''));
      expect(result.events.at(-1)?.data.message.content).toBe(shortReplies[i].join(''));
    }
    const cancelled = results[short.length];
    expect(cancelled.ended).toBe('end');
    expect(cancelled.events.at(-1)).toEqual({
      event: 'error',
      data: { message: expect.stringMatching(/shut down/), code: 500, error: 'turn_cancelled' },
    });
    expect(contentOf(cancelled.events).length).toBeGreaterThan(0);

    // A new process: the finished replies are in history, the cancelled chat takes a message at once.
    const next = await startServer(env, { name: 'after-stop' });
    for (const [i, chatId] of short.entries()) {
      expect(await history(next, chatId)).toEqual([`Stream ${i}`, shortReplies[i].join('')]);
    }
    // The cancelled turn shows as failed, with the reply as far as it got.
    const stopped = await statuses(next, long);
    expect(stopped.map(([, status]) => status)).toEqual(['failed', 'failed']);
    expect(stopped[1][0]).toBe(contentOf(cancelled.events));
    const after = await api(next, 'POST', `/api/v2/chats/${long}/messages`, { content: 'Still there?' });
    expect(after.status, JSON.stringify(after.body)).toBe(200);
    expect(await next.stop()).toBe(0);
  }, 90_000);
});
