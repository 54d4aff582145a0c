/**
 * How a process's PostgreSQL connections are split (src/db/client.ts): a streamed turn's statements
 * get pipelined connections of their own, taken from the pool size, so a process never opens more
 * than `poolSize` connections besides its LISTEN one (docs/operations.md counts on it): 4 of the
 * default 20 (docs/decisions.md, "Turn statements on pipelined connections").
 */
import os from 'node:os';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openDatabase } from '../src/db/client.js';
import { backend, createTestDatabase, type TestDatabase } from './helpers/database.js';

describe.skipIf(backend !== 'postgres')('connection pools (PostgreSQL)', () => {
  let test: TestDatabase;

  beforeAll(async () => {
    test = await createTestDatabase();
  });
  afterAll(async () => {
    await test.drop();
  });

  it.each([
    [20, 4, 16],
    [10, 4, 6],
    [5, 2, 3],
  ])(
    'pool size %i: %i pipelined connections for turns, %i in the pool for the rest',
    async (poolSize, turns, rest) => {
      const database = await openDatabase({ databaseUrl: test.url!, dataDir: os.tmpdir(), poolSize });
      try {
        expect(database.pipelined?.size).toBe(turns);
        expect(database.pool?.options.max).toBe(rest);
        // Both pools work, and at most poolSize connections open between them.
        const [{ rows }] = await Promise.all([
          database.pipelined!.query({ text: 'select 1 as one' }),
          database.query('select 1 as one'),
        ]);
        expect(rows).toEqual([{ one: 1 }]);
        expect(database.pool!.totalCount + database.pipelined!.openCount).toBeLessThanOrEqual(poolSize);
      } finally {
        await database.close();
      }
    },
  );

  it('pool size 2: no pipelined connections; turn statements run on the pool', async () => {
    const database = await openDatabase({ databaseUrl: test.url!, dataDir: os.tmpdir(), poolSize: 2 });
    try {
      expect(database.pipelined).toBeNull();
      expect(database.pool?.options.max).toBe(2);
      const { rows } = await database.pipelinedQuery('pools_one', 'select 1 as one', []);
      expect(rows).toEqual([{ one: 1 }]);
    } finally {
      await database.close();
    }
  });
});
