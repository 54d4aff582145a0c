/**
 * The turn's connections in pipeline mode (src/db/pipelined-pool.ts): statements share a few
 * connections without waiting for each other's answers, each one its own transaction.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PipelinedPool } from '../src/db/pipelined-pool.js';
import { shapedQuery } from '../src/db/shaped-query.js';
import { backend, createTestDatabase, type TestDatabase } from './helpers/database.js';

describe.skipIf(backend !== 'postgres')('pipelined pool (PostgreSQL)', () => {
  let test: TestDatabase;
  const pools: PipelinedPool[] = [];
  const poolOf = (size: number) => {
    const pool = new PipelinedPool({ connectionString: test.url! }, size);
    pools.push(pool);
    return pool;
  };

  beforeAll(async () => {
    test = await createTestDatabase();
  });
  afterAll(async () => {
    await Promise.all(pools.map((pool) => pool.end()));
    await test.drop();
  });

  it('runs many statements at once on its few connections, each answered with its own rows', async () => {
    const pool = poolOf(2);
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        pool.query<{ n: number; pid: number }>({
          text: 'select $1::int as n, pg_backend_pid() as pid',
          values: [i],
        }),
      ),
    );
    expect(results.map((r) => r.rows[0]!.n)).toEqual(Array.from({ length: 20 }, (_, i) => i));
    expect(new Set(results.map((r) => r.rows[0]!.pid)).size).toBe(2);
    expect(pool.openCount).toBe(2);
    expect(pool.queueDepth).toBe(0);
  });

  it('sends each statement to the connection with the fewest unanswered: its queue depth is theirs', async () => {
    const pool = poolOf(2);
    const sleeps = [0, 1, 2].map(() => pool.query({ text: 'select pg_sleep(0.1)' }));
    // Three on two connections: two on one, one on the other; a fourth would follow one.
    expect(pool.queueDepth).toBe(1);
    await Promise.all(sleeps);
    expect(pool.queueDepth).toBe(0);
  });

  it('sends a statement without waiting for the one before it to be answered', async () => {
    const pool = poolOf(1);
    await pool.query({ text: 'select 1' }); // the connection is open: both are written at once
    const at = (r: pg.QueryResult<{ at: string }>) => Date.parse(r.rows[0]!.at);
    const first = pool.query<{ at: string }>({ text: 'select pg_sleep(0.3), clock_timestamp()::text as at' });
    expect(pool.queueDepth).toBe(1);
    const second = pool.query<{ at: string }>({ text: 'select clock_timestamp()::text as at' });
    expect(pool.queueDepth).toBe(2);
    // This process reads nothing for 0.8 s. Sent only once the first was answered (and read), the
    // second would run at least 0.5 s after the first; already on the wire, it runs right after it.
    const until = Date.now() + 800;
    while (Date.now() < until);
    const [a, b] = await Promise.all([first, second]);
    expect(at(b) - at(a)).toBeLessThan(250);
    expect(pool.queueDepth).toBe(0);
  });

  it('fails a failing statement alone: the ones around it on the same connection succeed', async () => {
    const pool = poolOf(1);
    const [before, failed, after] = await Promise.allSettled([
      pool.query({ text: "insert into organizations (name) values ('pipelined') returning id" }),
      pool.query({ text: 'select 1 / 0 as boom' }),
      pool.query<{ n: number }>({
        text: "select count(*)::int as n from organizations where name = 'pipelined'",
      }),
    ]);
    expect(before.status).toBe('fulfilled');
    expect(failed.status).toBe('rejected');
    expect((failed as PromiseRejectedResult).reason.message).toMatch(/division by zero/);
    // Committed by itself: the failure after it rolled nothing back.
    expect(after.status).toBe('fulfilled');
    expect((after as PromiseFulfilledResult<pg.QueryResult<{ n: number }>>).value.rows).toEqual([{ n: 1 }]);
  });

  it('builds rows with ShapedQuery, as the turn does', async () => {
    const pool = poolOf(1);
    const { rows } = await shapedQuery<{ id: number; name: string }>(pool, {
      name: 'pipelined_shaped',
      text: 'select $1::int8 as id, $2::text as name',
      values: [7, 'seven'],
    });
    expect(rows).toEqual([{ id: 7, name: 'seven' }]);
    // A named statement is parsed once per connection: the second use sends no Parse and still works.
    const again = await shapedQuery<{ id: number }>(pool, {
      name: 'pipelined_shaped',
      text: 'select $1::int8 as id, $2::text as name',
      values: [8, 'eight'],
    });
    expect(again.rows).toEqual([{ id: 8, name: 'eight' }]);
  });

  it('opens a connection again after its server process ended', async () => {
    const pool = poolOf(1);
    const { rows } = await pool.query<{ pid: number }>({ text: 'select pg_backend_pid() as pid' });
    const pid = rows[0]!.pid;
    const admin = new pg.Client({ connectionString: test.url! });
    await admin.connect();
    try {
      await admin.query('select pg_terminate_backend($1)', [pid]);
    } finally {
      await admin.end();
    }
    // The statement sent on the broken connection fails (or, if the break was seen first, runs on a
    // new one); the next runs on a new connection.
    await pool.query({ text: 'select 1' }).catch(() => undefined);
    const next = await pool.query<{ pid: number }>({ text: 'select pg_backend_pid() as pid' });
    expect(next.rows[0]!.pid).not.toBe(pid);
  });

  it('refuses statements once ended', async () => {
    const pool = poolOf(1);
    await pool.query({ text: 'select 1' });
    await pool.end();
    await expect(pool.query({ text: 'select 1' })).rejects.toThrow(/closed/);
    expect(pool.openCount).toBe(0);
  });
});
