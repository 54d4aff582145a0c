import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { shapedQuery } from '../src/db/shaped-query.js';
import { backend, createTestDatabase, type TestDatabase } from './helpers/database.js';

// pg's own Result, whose per-call `addFields` ShapedQuery replaces (src/db/shaped-query.ts).
const { default: Result } = (await import('pg/lib/result.js' as string)) as {
  default: { prototype: { addFields(fields: unknown[]): void } };
};

const MANY_COLUMNS = `select 1::int as id, 9007199254740::int8 as big, 2.5::numeric as amount, 'x'::text as name,
  null::text as missing, true as flag, '{"a":[1]}'::json as doc, '{"b":2}'::jsonb as docb,
  timestamptz '2026-01-02 03:04:05.123456+00' as at, $1::text as echo, 7 as id`;

describe.skipIf(backend !== 'postgres')('shaped queries (PostgreSQL)', () => {
  let test: TestDatabase;
  let pool: pg.Pool;

  beforeAll(async () => {
    test = await createTestDatabase();
    pool = test.database.pool!;
  });
  afterAll(async () => {
    vi.restoreAllMocks();
    await test.drop();
  });

  it('returns the rows pg builds, named or not, on first and later calls, without pg learning the columns', async () => {
    const expected = await pool.query({ text: MANY_COLUMNS, values: ['hello'] });
    const addFields = vi.spyOn(Result.prototype, 'addFields');
    for (let i = 0; i < 3; i++) {
      const unnamed = await shapedQuery(pool, { text: MANY_COLUMNS, values: ['hello'] });
      const named = await shapedQuery(pool, { name: 'shaped_many', text: MANY_COLUMNS, values: ['hello'] });
      for (const result of [unnamed, named]) {
        expect(result.rows).toEqual(expected.rows);
        expect(Object.keys(result.rows[0]!)).toEqual(Object.keys(expected.rows[0]!));
        expect(result.fields.map((f) => f.name)).toEqual(expected.fields.map((f) => f.name));
        expect(result.rowCount).toBe(1);
        expect(result.command).toBe('SELECT');
      }
    }
    expect(addFields).not.toHaveBeenCalled();
    addFields.mockRestore();
    // Types as the service's parsers make them (src/db/client.ts): int8 a number, timestamps text.
    expect(expected.rows[0]).toMatchObject({
      big: 9007199254740,
      amount: 2.5,
      missing: null,
      doc: { a: [1] },
    });
    expect(typeof expected.rows[0].at).toBe('string');
  });

  it('learns a statement again when its result changes, and keeps the results of several statements apart', async () => {
    await pool.query('create table shaped_t (id int primary key, a text)');
    await pool.query(`insert into shaped_t values (1, 'one'), (2, 'two')`);
    const select = 'select * from shaped_t order by id';
    expect((await shapedQuery(pool, { text: select })).rows).toEqual([
      { id: 1, a: 'one' },
      { id: 2, a: 'two' },
    ]);
    await pool.query(`alter table shaped_t add column b int8 default 5`);
    expect((await shapedQuery(pool, { text: select })).rows).toEqual([
      { id: 1, a: 'one', b: 5 },
      { id: 2, a: 'two', b: 5 },
    ]);
    await pool.query('alter table shaped_t drop column a');
    expect((await shapedQuery(pool, { text: select })).rows).toEqual([
      { id: 1, b: 5 },
      { id: 2, b: 5 },
    ]);

    const several = (await shapedQuery(pool, {
      text: `select 1 as x; select 'y' as y, 2 as z`,
    })) as unknown as pg.QueryResult[];
    expect(several.map((r) => r.rows)).toEqual([[{ x: 1 }], [{ y: 'y', z: 2 }]]);
  });

  it('reports a failing statement and leaves the connection usable', async () => {
    await expect(shapedQuery(pool, { text: 'select 1/0 as boom' })).rejects.toThrow(/division by zero/);
    await expect(shapedQuery(pool, { name: 'shaped_bad', text: 'select nope' })).rejects.toThrow(/nope/);
    expect((await test.database.query('select 3 as three')).rows).toEqual([{ three: 3 }]);
    expect(pool.totalCount).toBe(pool.idleCount);
  });
});
