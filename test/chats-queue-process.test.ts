/**
 * A queued message (`if_busy: "enqueue"`) survives the process that accepted it being killed: it is
 * in the database, and another process (PostgreSQL: the one still serving; PGlite: the restarted
 * one) runs it once the chat is free.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { BootstrapResult } from '../src/modules/bootstrap/service.js';
import {
  type FakeModelServer,
  type RecordedRequest,
  startFakeModelServer,
} from './helpers/fake-model-server.js';
import {
  bootstrapService,
  fakeModelEnv,
  killAllProcesses,
  projectDatabase,
  request,
  type ServerProcess,
  type ServiceDatabase,
  serviceEnv,
  startServer,
  waitUntil,
} from './helpers/server-process.js';
import { type IdEvent, readSse } from './helpers/sse.js';

const postgres = process.env.TEST_BACKEND === 'postgres';
const LEASE_MS = 3000;
const SLOW = Array.from({ length: 60 }, (_, i) => `s${i} `);

describe('a queued message outlives the process that accepted it (real processes)', () => {
  let fake: FakeModelServer;
  let db: ServiceDatabase;
  let boot: BootstrapResult;
  let env: Record<string, string>;

  beforeAll(async () => {
    fake = await startFakeModelServer();
    db = await projectDatabase();
    env = serviceEnv({ ...db.env, ...fakeModelEnv(fake.baseUrl), TURN_LEASE_MS: String(LEASE_MS) });
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

  const lastUserText = (req: RecordedRequest): string =>
    (req.body?.messages ?? []).filter((m: { role: string }) => m.role === 'user').at(-1)?.content;

  /** A streamed POST that resolves once `until` holds (then disconnects, or the process died). */
  const streamUntil = (
    server: ServerProcess,
    chatId: number,
    body: unknown,
    until: (e: IdEvent[]) => boolean,
  ) =>
    readSse(`${server.baseUrl}/api/v2/chats/${chatId}/messages`, { key: boot.organization_key, body, until });

  it('SIGKILL of the accepting process: the queued message still runs, once, in order', async () => {
    fake.setResponder((req) => {
      const text = lastUserText(req);
      if (text === 'slow story') return { chunks: SLOW, chunkDelayMs: 150 };
      return { text: `Echo: ${text}`, chunkDelayMs: 5 };
    });
    const doomed = await startServer(env, { name: 'doomed' });
    // PostgreSQL: a second process serves meanwhile and runs the slow turn; PGlite: one process, restarted.
    const survivor = postgres ? await startServer(env, { name: 'survivor' }) : null;
    const turnServer = survivor ?? doomed;
    const created = await api(turnServer, 'POST', '/api/v2/chats', { project_id: boot.project_id });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const chatId = created.body.response.chat.id as number;

    // The slow turn runs on (PostgreSQL) the survivor or (PGlite) the doomed process.
    let started!: () => void;
    const streaming = new Promise<void>((resolve) => {
      started = resolve;
    });
    const slow = readSse(`${turnServer.baseUrl}/api/v2/chats/${chatId}/messages`, {
      key: boot.organization_key,
      body: { content: 'slow story', stream: true },
      timeoutMs: 60_000,
      onProgress: (events) => {
        if (events.some((e) => e.event === 'content')) started();
      },
    });
    await streaming;

    // Two messages queued on the doomed process; it dies while they wait.
    for (const [content, position] of [
      ['first queued', 1],
      ['second queued', 2],
    ] as const) {
      const queued = await streamUntil(
        doomed,
        chatId,
        { content, stream: true, if_busy: 'enqueue' },
        (events) => events.some((e) => e.event === 'queued'),
      );
      expect(queued.events[0]).toMatchObject({ event: 'queued', data: { position } });
    }
    doomed.child.kill('SIGKILL');
    await doomed.exited;

    const runner = survivor ?? (await startServer(env, { name: 'restarted' }));
    if (!postgres) await slow.catch(() => null);
    await waitUntil(
      async () => {
        const res = await api(runner, 'GET', `/api/v2/chats/${chatId}/messages`);
        return res.status === 200 && res.body.response.messages.length === 6;
      },
      {
        timeoutMs: 30_000 + LEASE_MS,
        intervalMs: 250,
        what: 'the queued messages to run on another process',
      },
    );
    const res = await api(runner, 'GET', `/api/v2/chats/${chatId}/messages`);
    const shown = (res.body.response.messages as Array<{ content: string; status: string }>).map((m) => [
      m.content,
      m.status,
    ]);
    if (postgres) {
      // The slow turn lived on the survivor: it completed, then the queue ran there.
      expect(shown[0]).toEqual(['slow story', 'completed']);
      expect(shown[1]).toEqual([SLOW.join(''), 'completed']);
    } else {
      // The slow turn died with its process: failed once its lease ran out, then the queue ran.
      expect(shown[0]).toEqual(['slow story', 'failed']);
      expect(shown[1][1]).toBe('failed');
    }
    expect(shown.slice(2)).toEqual([
      ['first queued', 'completed'],
      ['Echo: first queued', 'completed'],
      ['second queued', 'completed'],
      ['Echo: second queued', 'completed'],
    ]);
    expect((await api(runner, 'GET', `/api/v2/chats/${chatId}/queue`)).body.response.queued).toEqual([]);
    // Each ran exactly once.
    expect(
      fake
        .chatRequests()
        .map(lastUserText)
        .filter((t) => t.endsWith('queued')),
    ).toEqual(['first queued', 'second queued']);
    if (postgres) await slow;
  }, 120_000);
});
