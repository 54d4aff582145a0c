/**
 * Keys are cached in memory by every process (src/core/principal-cache.ts); a revoked key, a
 * removed user or a deactivated organization must still stop working within 1 s on every process.
 * Two apps on one database (on PostgreSQL each with its own pool and LISTEN connection).
 */
import { sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PRINCIPALS_CHANNEL, PrincipalCache } from '../src/core/principal-cache.js';
import { Notifier } from '../src/streams/notifier.js';
import { buildTestApp, call, createMember, createOrg, expectStatus, type TestApp } from './helpers/app.js';
import { backend } from './helpers/database.js';
import { type SecondProcess, sleep, startSecondProcess } from './streams-support.js';

let t: TestApp;
let second: SecondProcess;

beforeAll(async () => {
  t = await buildTestApp();
  second = await startSecondProcess(t);
});
afterAll(async () => {
  await second?.close();
  await t?.close();
});

/** Calls `GET /api/v1/projects` with `key` on both apps until each refuses it; ms until each did. */
async function refusedWithin(key: string, limitMs: number): Promise<number[]> {
  const started = performance.now();
  const apps = [t, second.api];
  const took: (number | null)[] = [null, null];
  while (took.some((ms) => ms === null) && performance.now() - started < limitMs + 2000) {
    for (const [i, app] of apps.entries()) {
      if (took[i] !== null) continue;
      const res = await call(app, 'GET', '/api/v1/projects', { key });
      if (res.status === 401) took[i] = performance.now() - started;
    }
    await sleep(20);
  }
  return took.map((ms) => ms ?? Number.POSITIVE_INFINITY);
}

/** Both apps accept the key, several times, so each has it cached. */
async function warm(key: string) {
  for (let i = 0; i < 3; i++)
    for (const app of [t, second.api]) expectStatus(await call(app, 'GET', '/api/v1/projects', { key }), 200);
}

describe('the principal cache', () => {
  it('a key revoked on one process is refused by every process within 1 s', async () => {
    const org = await createOrg(t);
    const member = await createMember(t, org);
    await warm(member.key);
    const keys = await call(t, 'GET', '/api/v1/api_keys', { key: org.orgKey });
    const id = keys.body.api_keys.find((k: any) => k.user_id === member.userId && !k.revoked_at).id;
    expectStatus(await call(t, 'DELETE', `/api/v1/api_keys/${id}`, { key: org.orgKey }), 200);
    // The process that revoked it refuses it on the very next request.
    expect((await call(t, 'GET', '/api/v1/projects', { key: member.key })).status).toBe(401);
    const took = await refusedWithin(member.key, 1000);
    for (const ms of took) expect(ms).toBeLessThan(1000);
    // The organization's other keys keep working.
    expectStatus(await call(second.api, 'GET', '/api/v1/projects', { key: org.orgKey }), 200);
  });

  it('an organization deactivated on one process: its keys are refused everywhere within 1 s', async () => {
    const org = await createOrg(t);
    await warm(org.orgKey);
    await warm(org.adminKey);
    expectStatus(
      await call(second.api, 'DELETE', `/api/v1/admin/organizations/${org.organizationId}`, {
        key: t.boot.super_admin_key,
      }),
      200,
    );
    for (const key of [org.orgKey, org.adminKey]) {
      const took = await refusedWithin(key, 1000);
      for (const ms of took) expect(ms).toBeLessThan(1000);
    }
  });

  it('a key revoked outside the service (SQL) is refused everywhere within 1 s; the change is announced', async () => {
    const org = await createOrg(t);
    const member = await createMember(t, org);
    await warm(member.key);
    const notifier = new Notifier(t.deps.database, t.app.log);
    const notices: string[] = [];
    await notifier.listen(PRINCIPALS_CHANNEL, (payload) => notices.push(payload));
    try {
      await t.deps.database.db.execute(
        sql`update api_keys set revoked_at = now() where user_id = ${member.userId} and revoked_at is null`,
      );
      const took = await refusedWithin(member.key, 1000);
      for (const ms of took) expect(ms).toBeLessThan(1000);
      await sleep(50);
      expect(notices).toContain('api_keys');
      // Bookkeeping writes (last use, credits) are not announced: they change no principal.
      notices.length = 0;
      await t.deps.database.db.execute(
        sql`update organizations set credit_balance = credit_balance + 1 where id = ${org.organizationId}`,
      );
      await t.deps.database.db.execute(
        sql`update api_keys set last_used_at = now() where user_id = ${member.userId}`,
      );
      await sleep(100);
      expect(notices).toEqual([]);
    } finally {
      await notifier.close();
    }
  });
});

describe('trust while listening', () => {
  /** A cache wired to its own notifier as src/http/auth.ts wires it. */
  async function listeningCache() {
    const notifier = new Notifier(t.deps.database, t.app.log);
    const cache = new PrincipalCache<string>(t.deps.database.db);
    notifier.onListening(PRINCIPALS_CHANNEL, (live) => cache.setListening(live));
    await notifier.listen(PRINCIPALS_CHANNEL, () => cache.clear());
    return { notifier, cache };
  }

  it('entries outlive 1 s while the LISTEN is live', async () => {
    const { notifier, cache } = await listeningCache();
    try {
      expect(cache.isListening()).toBe(true);
      let reads = 0;
      const load = async () => {
        reads += 1;
        return 'row';
      };
      expect(await cache.resolve('k', load)).toBe('row');
      await sleep(1200);
      expect(await cache.resolve('k', load)).toBe('row');
      expect(reads).toBe(1);
    } finally {
      cache.close();
      await notifier.close();
    }
  });

  it('a key revoked by plain SQL is dropped at once although trusted for 60 s', async () => {
    const org = await createOrg(t);
    const member = await createMember(t, org);
    await warm(member.key);
    // Long enough that the 1 s expiry of the cache cannot be what drops the key.
    await sleep(1100);
    await warm(member.key);
    await t.deps.database.db.execute(
      sql`update api_keys set revoked_at = now() where user_id = ${member.userId} and revoked_at is null`,
    );
    const took = await refusedWithin(member.key, 500);
    for (const ms of took) expect(ms).toBeLessThan(500);
  });

  it.runIf(backend === 'postgres')(
    'losing the LISTEN connection drops every entry and falls back to 1 s; so does regaining it',
    async () => {
      const { notifier, cache } = await listeningCache();
      try {
        cache.resolve('k', async () => 'row');
        await sleep(10);
        expect(cache.get('k')).toBe('row');
        const pid = (notifier as unknown as { client: { processID: number } }).client.processID;
        await t.deps.database.query('select pg_terminate_backend($1)', [pid]);
        const deadline = performance.now() + 2000;
        while (cache.isListening() && performance.now() < deadline) await sleep(10);
        expect(cache.isListening()).toBe(false);
        expect(cache.get('k')).toBeUndefined();
        // While not listening, the 1 s bound applies again.
        let reads = 0;
        cache.resolve('k', async () => {
          reads += 1;
          return 'row';
        });
        await sleep(10);
        expect(cache.get('k')).toBe('row');
        // Reconnected (retried after 1 s): listening again, and what was cached meanwhile is gone.
        const back = performance.now() + 5000;
        while (!cache.isListening() && performance.now() < back) await sleep(20);
        expect(cache.isListening()).toBe(true);
        expect(cache.get('k')).toBeUndefined();
        expect(reads).toBe(1);
      } finally {
        cache.close();
        await notifier.close();
      }
    },
  );
});

describe('PrincipalCache loads', () => {
  it('without a live LISTEN an entry is trusted 1 s; setListening drops everything', async () => {
    const cache = new PrincipalCache<string>({}, 100, 60_000);
    await cache.resolve('k', async () => 'row');
    await sleep(150);
    expect(cache.get('k')).toBeUndefined();
    cache.setListening(true);
    await cache.resolve('k', async () => 'row');
    await sleep(150);
    expect(cache.get('k')).toBe('row');
    cache.setListening(false);
    expect(cache.get('k')).toBeUndefined();
    cache.close();
  });

  /** A load the test finishes by hand, counting how many were started. */
  function loads() {
    const started: ((value: string | null) => void)[] = [];
    return {
      started,
      load: () => new Promise<string | null>((resolve) => started.push(resolve)),
    };
  }

  it('concurrent misses of one key share one read, and the result is cached', async () => {
    const cache = new PrincipalCache<string>({});
    const { started, load } = loads();
    const waiting = Array.from({ length: 50 }, () => cache.resolve('k', load));
    expect(started).toHaveLength(1);
    started[0]('row');
    expect(await Promise.all(waiting)).toEqual(Array(50).fill('row'));
    expect(await cache.resolve('k', load)).toBe('row');
    expect(started).toHaveLength(1);
    cache.close();
  });

  it('a miss after a change does not join a read begun before it, and that read is not cached', async () => {
    const cache = new PrincipalCache<string>({});
    const { started, load } = loads();
    const before = cache.resolve('k', load);
    cache.clear();
    const after = cache.resolve('k', load);
    expect(started).toHaveLength(2);
    started[0]('stale');
    started[1]('fresh');
    expect(await before).toBe('stale');
    expect(await after).toBe('fresh');
    expect(await cache.resolve('k', load)).toBe('fresh');
    expect(started).toHaveLength(2);
    cache.close();
  });

  it('an unknown key (null) and a failed read are not cached', async () => {
    const cache = new PrincipalCache<string>({});
    const { started, load } = loads();
    const first = cache.resolve('k', load);
    started[0](null);
    expect(await first).toBeNull();
    const failing = cache.resolve('k', () => Promise.reject(new Error('down')));
    await expect(failing).rejects.toThrow('down');
    const third = cache.resolve('k', load);
    expect(started).toHaveLength(2);
    started[1]('row');
    expect(await third).toBe('row');
    cache.close();
  });
});
