import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import os from 'node:os';
import { PGlite } from '@electric-sql/pglite';
import { vector } from '@electric-sql/pglite-pgvector';
import pg from 'pg';
import { inject } from 'vitest';
import { type Database, openDatabase } from '../../src/db/client.js';
import { adminUrl } from '../global-setup.js';

export type Backend = 'pglite' | 'postgres';
export const backend = (process.env.TEST_BACKEND ?? 'pglite') as Backend;

export interface TestDatabase {
  database: Database;
  /** postgres only: the URL of this test's own database, for a second process or app. */
  url: string | null;
  drop(): Promise<void>;
}

/** A migrated database of its own for one test app, cloned from the run's template. */
export async function createTestDatabase(): Promise<TestDatabase> {
  if (backend === 'postgres') {
    const base = process.env.TEST_DATABASE_URL!;
    const template = inject('postgresTemplate');
    const name = `${template}_${randomBytes(4).toString('hex')}`;
    const admin = new pg.Client({ connectionString: base });
    await admin.connect();
    await admin.query(`CREATE DATABASE ${name} TEMPLATE ${template}`);
    await admin.end();
    const url = adminUrl(base, name);
    const database = await openDatabase({ databaseUrl: url, dataDir: os.tmpdir(), poolSize: 10 });
    return {
      database,
      url,
      async drop() {
        await database.close();
        const client = new pg.Client({ connectionString: base });
        await client.connect();
        await client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
        await client.end();
      },
    };
  }
  const blob = new Blob([readFileSync(inject('pgliteTemplate'))]);
  const client = new PGlite({ loadDataDir: blob, extensions: { vector } });
  const database = await openDatabase({ databaseUrl: null, dataDir: os.tmpdir(), pglite: client });
  return { database, url: null, drop: () => database.close() };
}
