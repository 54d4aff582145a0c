/**
 * Real child processes of the service (`src/main.ts`, `src/cli.ts worker`) on a database the test
 * shares with them, for tests of what survives a process: restarts, kills, several workers.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { PGlite } from '@electric-sql/pglite';
import { vector } from '@electric-sql/pglite-pgvector';
import { inject } from 'vitest';
import { type Database, openDatabase } from '../../src/db/client.js';
import { TEST_SECRET } from './app.js';
import { backend, createTestDatabase } from './database.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

export interface Proc {
  child: ChildProcess;
  lines: string[];
  exited: Promise<number | null>;
  waitForLine(match: (line: string) => boolean, timeoutMs?: number): Promise<string>;
}

export function startProcess(script: string, args: string[], env: Record<string, string>): Proc {
  const child = spawn(process.execPath, ['--import', 'tsx', script, ...args], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const lines: string[] = [];
  const listeners = new Set<() => void>();
  let buffered = '';
  const onData = (chunk: Buffer) => {
    buffered += chunk.toString('utf8');
    const parts = buffered.split('\n');
    buffered = parts.pop() ?? '';
    lines.push(...parts);
    for (const listener of [...listeners]) listener();
  };
  child.stdout?.on('data', onData);
  child.stderr?.on('data', onData);
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return {
    child,
    lines,
    exited,
    waitForLine(match, timeoutMs = 30_000) {
      return new Promise((resolve, reject) => {
        const check = () => {
          const line = lines.find(match);
          if (line === undefined) return;
          listeners.delete(check);
          clearTimeout(timer);
          resolve(line);
        };
        const timer = setTimeout(() => {
          listeners.delete(check);
          reject(new Error(`no matching line in time; output:\n${lines.join('\n')}`));
        }, timeoutMs);
        listeners.add(check);
        check();
      });
    },
  };
}

export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** The database the processes share: a PGlite DATA_DIR, or a PostgreSQL database of this test. */
export async function sharedDatabase() {
  if (backend === 'postgres') {
    const testDb = await createTestDatabase();
    return {
      env: { DATABASE_URL: testDb.url! } as Record<string, string>,
      open: async () => testDb.database,
      release: async (_db: Database) => {},
      drop: () => testDb.drop(),
    };
  }
  // The run's migrated template, unpacked into a directory a child process can open.
  const dir = mkdtempSync(path.join(os.tmpdir(), 'scriptorium-proc-'));
  const template = new PGlite(dir, {
    loadDataDir: new Blob([readFileSync(inject('pgliteTemplate'))]),
    extensions: { vector },
  });
  await template.waitReady;
  await template.close();
  return {
    env: { DATA_DIR: dir } as Record<string, string>,
    open: () => openDatabase({ databaseUrl: null, dataDir: dir }),
    // PGlite serves one process: the test closes it before a child opens the directory.
    release: (db: Database) => db.close(),
    drop: async () => rmSync(dir, { recursive: true, force: true }),
  };
}

export const baseEnv = (extra: Record<string, string>) => ({
  SECRET_KEY: TEST_SECRET,
  OUTBOUND_ALLOW_PRIVATE: 'true',
  WEBHOOK_RETRY_BASE_MS: '100',
  RATE_LIMIT_PER_MINUTE: '100000',
  LOG_LEVEL: 'info',
  ...extra,
});
