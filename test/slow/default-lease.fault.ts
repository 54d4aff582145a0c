/**
 * `npm run test:faults`: a process killed mid-turn with the production lease (60 s, renewed every
 * 20 s). Its chat answers 409 for 40 to 60 s, then takes messages again. On PostgreSQL (with
 * TEST_DATABASE_URL) a second process is serving throughout; on PGlite the process restarts.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { BootstrapResult } from '../../src/modules/bootstrap/service.js';
import { type FakeModelServer, startFakeModelServer } from '../helpers/fake-model-server.js';
import {
  bootstrapService,
  fakeModelEnv,
  freshPgliteDirectory,
  freshPostgresDatabase,
  killAllProcesses,
  postStream,
  request,
  type ServiceDatabase,
  serviceEnv,
  sleep,
  startServer,
} from '../helpers/server-process.js';

const postgres = Boolean(process.env.TEST_DATABASE_URL);
const LEASE_MS = 60_000;
const RENEW_MS = LEASE_MS / 3;

describe(`the default turn lease after SIGKILL (${postgres ? 'PostgreSQL, two processes' : 'PGlite, restart'})`, () => {
  let fake: FakeModelServer;
  let db: ServiceDatabase;
  let boot: BootstrapResult;
  let env: Record<string, string>;

  beforeAll(async () => {
    fake = await startFakeModelServer();
    db = postgres ? await freshPostgresDatabase() : freshPgliteDirectory();
    // No TURN_LEASE_MS: the default is what is measured.
    env = serviceEnv({ ...db.env, ...fakeModelEnv(fake.baseUrl) });
    boot = await bootstrapService(env);
  });
  afterAll(async () => {
    await killAllProcesses();
    await fake?.close();
    await db?.drop();
  });

  it('the chat is locked until the lease runs out (40 to 60 s), then answers', async () => {
    const doomed = await startServer(env, { name: 'doomed' });
    const other = postgres ? await startServer(env, { name: 'other' }) : null;
    const chat = await request(doomed.baseUrl, 'POST', '/api/v2/chats', {
      key: boot.organization_key,
      body: { project_id: boot.project_id },
    });
    expect(chat.status).toBe(201);
    const path = `/api/v2/chats/${chat.body.response.chat.id}/messages`;

    fake.enqueue({ chunks: Array.from({ length: 100 }, (_, i) => ` part${i}`), chunkDelayMs: 500 });
    let killedAt = 0;
    await postStream(
      doomed.baseUrl,
      path,
      boot.organization_key,
      { content: 'A long one', stream: true },
      {
        onEvent: (event) => {
          if (event.event !== 'content' || killedAt) return;
          killedAt = Date.now();
          doomed.child.kill('SIGKILL');
        },
      },
    );
    expect((await doomed.exited).signal).toBe('SIGKILL');
    const survivor = other ?? (await startServer(env, { name: 'restarted' }));

    const tries: Array<{ after: number; status: number }> = [];
    while (Date.now() - killedAt < LEASE_MS + 15_000) {
      const res = await request(survivor.baseUrl, 'POST', path, {
        key: boot.organization_key,
        body: { content: 'Anyone?' },
      });
      tries.push({ after: Date.now() - killedAt, status: res.status });
      if (res.status !== 409) break;
      await sleep(2000);
    }
    const last = tries.at(-1)!;
    expect(last.status, JSON.stringify(tries)).toBe(200);
    expect(tries.slice(0, -1).every((t) => t.status === 409)).toBe(true);
    // The lease had between two and three renewal periods left when the process died.
    expect(last.after).toBeGreaterThanOrEqual(LEASE_MS - RENEW_MS);
    expect(last.after).toBeLessThan(LEASE_MS + 5000);
    expect(await survivor.stop()).toBe(0);
  }, 150_000);
});
