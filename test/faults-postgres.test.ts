/**
 * PostgreSQL restarted (cleanly, then crashed) under load, behind two real server processes. The
 * database is a private cluster of this test, never the machine's shared server. While it is down
 * `/ready` answers 503 and requests fail at once with an error body; afterwards everything works
 * again, and every chat a client was told was created is still there.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { BootstrapResult } from '../src/modules/bootstrap/service.js';
import { type FakeModelServer, startFakeModelServer } from './helpers/fake-model-server.js';
import {
  bootstrapService,
  fakeModelEnv,
  killAllProcesses,
  type PrivatePostgres,
  postStream,
  privatePostgresAvailable,
  request,
  type ServerProcess,
  serviceEnv,
  sleep,
  startPrivatePostgres,
  startServer,
  waitUntil,
} from './helpers/server-process.js';

const REQUEST_TIMEOUT_MS = 10_000;

interface Outcome {
  startedAt: number;
  ms: number;
  /** An HTTP status, or how the request failed without one. */
  status: number | 'network' | 'timeout';
  body: any;
}

/** Clients creating chats (with a reply) and reading them back, round robin over the servers. */
function startLoad(servers: ServerProcess[], key: string, projectId: number, clients: number) {
  const outcomes: Outcome[] = [];
  /** Chats whose creation was answered 201: their reply must survive. */
  const committed: Array<{ chatId: number; content: string }> = [];
  /** Chats named in an error body (created, reply failed): they must exist. */
  const kept: number[] = [];
  let running = true;
  let turn = 0;
  const attempt = async (fn: () => Promise<{ status: number; body: any }>) => {
    const startedAt = Date.now();
    try {
      const res = await fn();
      outcomes.push({ startedAt, ms: Date.now() - startedAt, status: res.status, body: res.body });
      return res;
    } catch (err) {
      const status = (err as Error).name === 'TimeoutError' ? 'timeout' : 'network';
      outcomes.push({ startedAt, ms: Date.now() - startedAt, status, body: String(err) });
      return null;
    }
  };
  const client = async (c: number) => {
    for (let n = 0; running; n++) {
      const server = servers[turn++ % servers.length];
      const content = `client ${c} message ${n}`;
      const created = await attempt(() =>
        request(server.baseUrl, 'POST', '/api/v2/chats', {
          key,
          body: { project_id: projectId, content },
          timeoutMs: REQUEST_TIMEOUT_MS,
        }),
      );
      if (created?.status === 201) {
        const chatId = created.body.response.chat.id as number;
        committed.push({ chatId, content });
        await attempt(() =>
          request(servers[turn++ % servers.length].baseUrl, 'GET', `/api/v2/chats/${chatId}`, {
            key,
            timeoutMs: REQUEST_TIMEOUT_MS,
          }),
        );
      } else if (typeof created?.body?.response?.chat_id === 'number') {
        kept.push(created.body.response.chat_id);
      }
      await sleep(20);
    }
  };
  const done = Promise.all(Array.from({ length: clients }, (_, c) => client(c)));
  return {
    outcomes,
    committed,
    kept,
    async stop() {
      running = false;
      await done;
    },
  };
}

describe.runIf(privatePostgresAvailable() && process.env.TEST_BACKEND !== 'postgres')(
  'PostgreSQL restarted under load (private cluster, two server processes)',
  () => {
    let cluster: PrivatePostgres;
    let fake: FakeModelServer;
    let boot: BootstrapResult;
    let servers: ServerProcess[];

    beforeAll(async () => {
      cluster = await startPrivatePostgres();
      const admin = await import('pg').then(
        (pg) => new pg.default.Client({ connectionString: cluster.url() }),
      );
      await admin.connect();
      await admin.query('CREATE DATABASE scriptorium');
      await admin.end();
      fake = await startFakeModelServer();
      const env = serviceEnv({ DATABASE_URL: cluster.url('scriptorium'), ...fakeModelEnv(fake.baseUrl) });
      boot = await bootstrapService(env);
      servers = await Promise.all([startServer(env, { name: 'pg-a' }), startServer(env, { name: 'pg-b' })]);
    });
    afterAll(async () => {
      await killAllProcesses();
      await fake?.close();
      await cluster?.destroy();
    });

    const readiness = async () =>
      Promise.all(
        servers.map(async (s) => {
          // A crashed process (an unhandled driver error) would otherwise show only as a refused connection.
          if (!s.running) throw new Error(`${s.name} exited\n${s.tail(60)}`);
          return (await request(s.baseUrl, 'GET', '/ready', { timeoutMs: 5000 })).status;
        }),
      );

    /** Stops the cluster, checks the outage is visible and clean, restarts it, waits for recovery. */
    async function outage(mode: 'fast' | 'immediate', load: ReturnType<typeof startLoad>) {
      const stopAt = Date.now();
      await cluster.stop(mode);
      const downAt = Date.now();
      await waitUntil(async () => (await readiness()).every((s) => s === 503), {
        timeoutMs: 10_000,
        intervalMs: 100,
        what: '/ready to answer 503 on both servers',
      });
      await sleep(2000);
      const failedWhileDown = load.outcomes.filter(
        (o) => o.startedAt > downAt + 500 && o.status !== 200 && o.status !== 201,
      );
      expect(failedWhileDown.length, 'requests during the outage fail').toBeGreaterThan(0);
      await cluster.start();
      const waited = await waitUntil(async () => (await readiness()).every((s) => s === 200), {
        timeoutMs: 15_000,
        intervalMs: 100,
        what: '/ready to answer 200 again on both servers',
      });
      const upAt = Date.now();
      // Let the load run on the recovered database.
      await sleep(2500);
      return { stopAt, upAt, recoveredInMs: waited };
    }

    it('/ready goes 503 and back; requests fail cleanly, recover, and nothing committed is lost', async () => {
      const load = startLoad(servers, boot.organization_key, boot.project_id, 6);
      try {
        await sleep(1500);
        expect(load.committed.length, 'the load runs before the first outage').toBeGreaterThan(0);
        const restart = await outage('fast', load);
        const crash = await outage('immediate', load);
        const loadStopAt = Date.now();
        await load.stop();
        // No request hung or lost its connection: each got an answer, at once.
        const broken = load.outcomes.filter((o) => typeof o.status !== 'number');
        expect(broken, JSON.stringify(broken.slice(0, 3))).toEqual([]);
        expect(Math.max(...load.outcomes.map((o) => o.ms))).toBeLessThan(5000);
        // Failures are 5xx with the chat API's error body.
        for (const failed of load.outcomes.filter((o) => o.status !== 200 && o.status !== 201)) {
          expect([500, 503]).toContain(failed.status);
          expect(failed.body).toMatchObject({
            status: 'error',
            response: { code: failed.status, error: expect.any(String), message: expect.any(String) },
          });
          // The database's queries and address stay in the log.
          expect(failed.body.response.message).not.toMatch(
            /Failed query|ECONNREFUSED|127\.0\.0\.1|select |insert /i,
          );
        }
        // From a second after recovery until the next outage, everything succeeds again.
        for (const [{ upAt }, until] of [
          [restart, crash.stopAt],
          [crash, loadStopAt],
        ] as const) {
          const after = load.outcomes.filter((o) => o.startedAt > upAt + 1000 && o.startedAt + o.ms < until);
          expect(after.length).toBeGreaterThan(0);
          expect(after.filter((o) => o.status !== 200 && o.status !== 201)).toEqual([]);
        }
        expect(servers.every((s) => s.running)).toBe(true);

        // Every chat a client was told exists has its reply; chats named in error bodies exist.
        for (const { chatId, content } of load.committed) {
          const res = await request(servers[chatId % 2].baseUrl, 'GET', `/api/v2/chats/${chatId}/messages`, {
            key: boot.organization_key,
          });
          expect(res.status).toBe(200);
          expect(res.body.response.messages.map((m: { content: string }) => m.content)).toEqual([
            content,
            `Echo: ${content}`,
          ]);
        }
        for (const chatId of load.kept) {
          const res = await request(servers[0].baseUrl, 'GET', `/api/v2/chats/${chatId}`, {
            key: boot.organization_key,
          });
          expect(res.status).toBe(200);
        }
      } finally {
        await load.stop();
      }
    }, 90_000);

    it('a turn that failed while the database was down frees its chat within 2 s of recovery, and history shows it failed', async () => {
      const [server] = servers;
      const key = boot.organization_key;
      const created = await request(server.baseUrl, 'POST', '/api/v2/chats', {
        key,
        body: { project_id: boot.project_id },
      });
      expect(created.status, JSON.stringify(created.body)).toBe(201);
      const chatId = created.body.response.chat.id as number;

      // Three seconds of reply; the database stops at its first word (the model is not affected).
      const chunks = Array.from({ length: 30 }, (_, i) => ` part${i}`);
      fake.enqueue({ chunks, chunkDelayMs: 100 });
      let stopped: Promise<void> | null = null;
      const streamed = await postStream(
        server.baseUrl,
        `/api/v2/chats/${chatId}/messages`,
        key,
        { content: 'Tell me a story', stream: true },
        {
          onEvent: (event) => {
            if (event.event === 'content' && !stopped) stopped = cluster.stop('fast');
          },
        },
      );
      await stopped;
      // Every word reached the client; the reply could not be saved: an error event, not a hang.
      expect(streamed.ended).toBe('end');
      expect(
        streamed.events
          .filter((e) => e.event === 'content')
          .map((e) => e.data.content)
          .join(''),
      ).toBe(chunks.join(''));
      expect(streamed.events.at(-1)).toEqual({
        event: 'error',
        data: {
          message: expect.stringMatching(/database is unavailable/),
          code: 500,
          error: 'database_unavailable',
        },
      });

      await sleep(1500);
      await cluster.start();
      await waitUntil(async () => (await readiness()).every((s) => s === 200), {
        timeoutMs: 15_000,
        intervalMs: 50,
        what: '/ready to answer 200 again',
      });
      const upAt = Date.now();
      // The process knew its turn was over: the chat takes a message at once, not after the lease (60 s).
      let answer: Awaited<ReturnType<typeof request>> | undefined;
      await waitUntil(
        async () => {
          answer = await request(server.baseUrl, 'POST', `/api/v2/chats/${chatId}/messages`, {
            key,
            body: { content: 'Are you back?' },
          });
          return answer.status !== 409 && answer.status !== 500;
        },
        { timeoutMs: 2000, intervalMs: 100, what: 'the chat to take messages again' },
      );
      expect(Date.now() - upAt).toBeLessThan(2000);
      expect(answer!.status, JSON.stringify(answer!.body)).toBe(200);

      const history = await request(servers[1].baseUrl, 'GET', `/api/v2/chats/${chatId}/messages`, { key });
      expect(history.status).toBe(200);
      expect(
        history.body.response.messages.map((m: any) => ({
          role: m.role,
          content: m.content,
          status: m.status,
        })),
      ).toEqual([
        { role: 'user', content: 'Tell me a story', status: 'failed' },
        // The reply as far as it got (here all of it: only saving it failed).
        { role: 'assistant', content: chunks.join(''), status: 'failed' },
        { role: 'user', content: 'Are you back?', status: 'completed' },
        { role: 'assistant', content: 'Echo: Are you back?', status: 'completed' },
      ]);
      expect(history.body.response.pagination.total_count).toBe(4);

      const pg = await import('pg');
      const client = new pg.default.Client({ connectionString: cluster.url('scriptorium') });
      await client.connect();
      try {
        const turns = await client.query('select status from chat_turns where chat_id = $1 order by id', [
          chatId,
        ]);
        // Recorded by its own process as failed, not retired later as "its process stopped".
        expect(turns.rows.map((t) => t.status)).toEqual(['failed', 'completed']);
        const failed = await client.query(
          "select error from chat_messages where chat_id = $1 and status = 'failed'",
          [chatId],
        );
        for (const row of failed.rows) expect(row.error).toMatch(/database is unavailable/);
      } finally {
        await client.end();
      }
      expect(await Promise.all(servers.map((s) => s.stop()))).toEqual([0, 0]);
    }, 60_000);
  },
);
