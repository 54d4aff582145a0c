import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { vector } from '@electric-sql/pglite-pgvector';
import pg from 'pg';
import type { TestProject } from 'vitest/node';
import { migrateDatabase, openDatabase } from '../src/db/client.js';

declare module 'vitest' {
  export interface ProvidedContext {
    pgliteTemplate: string;
    postgresTemplate: string;
    testScratchDir: string;
  }
}

/** Migrates one template per run; each test app then clones it instead of migrating again. */
export default async function setup(project: TestProject) {
  // Every test app's DATA_DIR goes under one directory per run, removed at the end.
  const scratch = mkdtempSync(path.join(os.tmpdir(), 'scriptorium-run-'));
  project.provide('testScratchDir', scratch);
  const removeScratch = () => rmSync(scratch, { recursive: true, force: true });
  const backend = project.name;
  if (backend === 'postgres') {
    const teardown = await setupPostgres(project);
    return async () => {
      await teardown();
      removeScratch();
    };
  }
  if (!process.env.TEST_DATABASE_URL) {
    console.log(
      '\n[notice] TEST_DATABASE_URL is not set: the PostgreSQL backend is skipped; PGlite runs every test.\n',
    );
  }
  const dir = mkdtempSync(path.join(os.tmpdir(), 'scriptorium-template-'));
  const client = new PGlite({ extensions: { vector } });
  const database = await openDatabase({ databaseUrl: null, dataDir: dir, pglite: client });
  await migrateDatabase(database);
  const dump = await client.dumpDataDir('none');
  const file = path.join(dir, 'template.tar');
  writeFileSync(file, Buffer.from(await dump.arrayBuffer()));
  await database.close();
  project.provide('pgliteTemplate', file);
  return () => {
    rmSync(dir, { recursive: true, force: true });
    removeScratch();
  };
}

export function adminUrl(url: string, database = 'postgres') {
  const u = new URL(url);
  u.pathname = `/${database}`;
  return u.toString();
}

async function setupPostgres(project: TestProject) {
  const url = process.env.TEST_DATABASE_URL!;
  const name = `scriptorium_tpl_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  await admin.end();
  const database = await openDatabase({
    databaseUrl: adminUrl(url, name),
    dataDir: os.tmpdir(),
    poolSize: 2,
  });
  await migrateDatabase(database);
  await database.close();
  project.provide('postgresTemplate', name);
  return async () => {
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    const { rows } = await client.query<{ datname: string }>(
      `SELECT datname FROM pg_database WHERE datname = $1 OR datname LIKE $2`,
      [name, `${name}_%`],
    );
    for (const row of rows) await client.query(`DROP DATABASE IF EXISTS ${row.datname} WITH (FORCE)`);
    await client.end();
  };
}
