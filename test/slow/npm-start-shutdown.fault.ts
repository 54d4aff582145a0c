/**
 * `npm run test:faults`: SIGTERM to `npm start` (what a container runtime sends to PID 1) while a
 * streamed reply has about 15 s to go. The signal reaches the service, the stream finishes with its
 * whole reply, and npm exits 0 with the service gone: no AVV_ERR_READY_TIMEOUT after 10 s of drain,
 * no node process left serving. PGlite always; PostgreSQL too with TEST_DATABASE_URL.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type FakeModelServer, startFakeModelServer } from '../helpers/fake-model-server.js';
import {
  fakeModelEnv,
  freePort,
  freshPgliteDirectory,
  freshPostgresDatabase,
  killAllProcesses,
  postStream,
  request,
  type ServiceDatabase,
  serviceEnv,
  spawnNpmStart,
  waitUntil,
} from '../helpers/server-process.js';

const backends = ['pglite', ...(process.env.TEST_DATABASE_URL ? ['postgres'] : [])] as const;
const CHUNKS = 75;
const CHUNK_DELAY_MS = 200;

describe.each(backends)('SIGTERM to npm start with a 15 s drain (%s)', (backend) => {
  let fake: FakeModelServer;
  let db: ServiceDatabase;

  beforeAll(async () => {
    fake = await startFakeModelServer();
    db = backend === 'postgres' ? await freshPostgresDatabase() : freshPgliteDirectory();
  });
  afterAll(async () => {
    await killAllProcesses();
    await fake?.close();
    await db?.drop();
  });

  it('the stream finishes, everything closes, npm exits 0', async () => {
    const port = await freePort();
    const baseUrl = `http://127.0.0.1:${port}`;
    // An empty database: npm start bootstraps it and logs the keys once (LOG_LEVEL info).
    const npm = spawnNpmStart(
      `npm start (${backend})`,
      serviceEnv({
        ...db.env,
        ...fakeModelEnv(fake.baseUrl),
        PORT: String(port),
        HOST: '127.0.0.1',
        LOG_LEVEL: 'info',
      }),
    );
    const keysLine = await npm.waitForLine((line) => line.includes('"bootstrap"'), 90_000);
    const keys = JSON.parse(keysLine).bootstrap as { organization_key: string; project_id: number };
    await waitUntil(async () => (await fetch(`${baseUrl}/ready`).catch(() => null))?.status === 200, {
      timeoutMs: 60_000,
      what: '/ready',
    });

    const created = await request(baseUrl, 'POST', '/api/v2/chats', {
      key: keys.organization_key,
      body: { project_id: keys.project_id },
    });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const chatId = created.body.response.chat.id;

    const chunks = Array.from({ length: CHUNKS }, (_, i) => ` word${i}`);
    fake.enqueue({ chunks, chunkDelayMs: CHUNK_DELAY_MS });
    let termAt = 0;
    const streamed = await postStream(
      baseUrl,
      `/api/v2/chats/${chatId}/messages`,
      keys.organization_key,
      { content: 'A long answer, please', stream: true },
      {
        timeoutMs: 60_000,
        onEvent: (event) => {
          if (event.event === 'content' && termAt === 0) {
            termAt = Date.now();
            // To npm only, as a container runtime signals PID 1.
            npm.child.kill('SIGTERM');
          }
        },
      },
    );
    const streamEndedAfter = Date.now() - termAt;
    expect(termAt).toBeGreaterThan(0);
    expect(streamed.ended).toBe('end');
    expect(streamed.events.at(-1)?.event, JSON.stringify(streamed.events.at(-1))).toBe('done');
    expect(streamed.events.at(-1)?.data.message.content).toBe(chunks.join(''));
    // The drain outlasted the plugin timeout that used to fail the shutdown.
    expect(streamEndedAfter).toBeGreaterThan(12_000);

    const exit = await npm.exited;
    expect(exit, npm.tail()).toEqual({ code: 0, signal: null });
    expect(npm.lines.join('\n')).not.toMatch(/AVV_ERR_READY_TIMEOUT/);
    expect(npm.lines.some((line) => line.includes('"shut down"'))).toBe(true);
    // The service itself is gone (not an orphan still serving).
    const after = await fetch(`${baseUrl}/health`).catch((err: Error) => err);
    expect(after).toBeInstanceOf(Error);
  });
});
