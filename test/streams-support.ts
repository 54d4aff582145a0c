/** Shared set-up of the stream tests: a second "process" on the same database. */
import os from 'node:os';
import type { FastifyInstance } from 'fastify';
import { type Database, openDatabase } from '../src/db/client.js';
import { startSibling } from './chats-support.js';
import type { TestApp } from './helpers/app.js';
import { backend } from './helpers/database.js';
import type { IdEvent } from './helpers/sse.js';

export const idsOf = (events: IdEvent[]) => events.map((e) => Number(e.id));
export const range = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => from + i);

export interface SecondProcess {
  app: FastifyInstance;
  baseUrl: string;
  api: TestApp;
  close(): Promise<void>;
}

/**
 * Another app on the same database, standing in for a second process: on PostgreSQL with its own
 * connection pool (and its own LISTEN connection); on PGlite sharing the one embedded instance.
 * Either way it has its own stream hub and turn runner, so it knows nothing of the first app's
 * streams except what is in the database.
 */
export async function startSecondProcess(
  t: TestApp,
  deps: Parameters<typeof startSibling>[1] = {},
): Promise<SecondProcess> {
  let own: Database | null = null;
  if (backend === 'postgres') {
    own = await openDatabase({ databaseUrl: t.testDb.url, dataDir: os.tmpdir(), poolSize: 4 });
  }
  const sibling = await startSibling(t, { database: own ?? t.deps.database, ...deps });
  return {
    ...sibling,
    async close() {
      await sibling.app.close();
      await own?.close();
    },
  };
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A promise and the function that resolves it. */
export function signal(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}
