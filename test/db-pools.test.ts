/**
 * How a process's PostgreSQL connections are split (src/db/client.ts): `turn_open` gets a pool of
 * its own, taken from the pool size, so a process never opens more than `poolSize` pooled
 * connections (docs/operations.md counts on it). The turn pool is 8 of the default 20
 * (docs/decisions.md, "The turn pool: 8 connections").
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
    [20, 8, 12],
    [10, 4, 6],
    [5, 2, 3],
  ])('pool size %i: %i connections start turns, %i serve the rest', async (poolSize, turns, rest) => {
    const database = await openDatabase({ databaseUrl: test.url!, dataDir: os.tmpdir(), poolSize });
    try {
      expect(database.turnPool?.options.max).toBe(turns);
      expect(database.pool?.options.max).toBe(rest);
      // Both pools work, and at most poolSize connections open between them.
      const [{ rows }] = await Promise.all([
        database.turnPool!.query('select 1 as one'),
        database.query('select 1 as one'),
      ]);
      expect(rows).toEqual([{ one: 1 }]);
      expect(database.pool!.totalCount + database.turnPool!.totalCount).toBeLessThanOrEqual(poolSize);
    } finally {
      await database.close();
    }
  });
});
