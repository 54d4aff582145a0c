/**
 * Real server processes (`src/main.ts`, `src/cli.ts`) for the fault and multi-process tests: spawned
 * with their own environment, waited for on `/ready`, and always killed at the end (every child is
 * tracked; `killAllProcesses` in `afterAll`, and SIGKILL when the test process itself exits).
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chownSync, existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import pg from 'pg';
import type { BootstrapResult } from '../../src/modules/bootstrap/service.js';
import { TEST_SECRET } from './app.js';
import { readSse } from './sse.js';

export const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const run = promisify(execFile);

// Variables of the service a test process may carry (CI exports REDIS_URL): a child gets only its own.
const SERVICE_VARIABLES = [
  'PORT',
  'HOST',
  'DATABASE_URL',
  'DATA_DIR',
  'REDIS_URL',
  'PUBLIC_BASE_URL',
  'REPLY_TIMEOUT_MS',
  'RATE_LIMIT_PER_MINUTE',
  'DEFAULT_ORG_CREDITS',
  'OUTBOUND_ALLOW_PRIVATE',
  'MODEL_BASE_URL_ALLOW',
  'LLM_PROVIDER',
  'LLM_BASE_URL',
  'LLM_API_KEY',
  'LLM_MODEL',
  'SECRET_KEY',
  'WEBHOOK_RETRY_BASE_MS',
  'UPLOAD_MAX_BYTES',
  'SHUTDOWN_GRACE_MS',
  'TURN_LEASE_MS',
  'MODEL_IDLE_TIMEOUT_MS',
  'DOCUMENT_MAX_DECOMPRESSED_MB',
  'DOCUMENT_MAX_ELEMENTS',
  'DOCUMENT_MAX_PAGES',
  'DOCUMENT_MAX_CHARS',
  'DOCUMENT_EXTRACT_TIMEOUT_MS',
  'DOCUMENT_EXTRACT_MEMORY_MB',
  'LOG_LEVEL',
  'CORS_ORIGINS',
];

function childEnv(env: Record<string, string>): NodeJS.ProcessEnv {
  const base: NodeJS.ProcessEnv = { ...process.env };
  for (const name of SERVICE_VARIABLES) delete base[name];
  delete base.NODE_OPTIONS;
  return { ...base, ...env };
}

/** What every child gets unless a test says otherwise; `extra` adds or overrides. */
export function serviceEnv(extra: Record<string, string> = {}): Record<string, string> {
  return {
    SECRET_KEY: TEST_SECRET,
    OUTBOUND_ALLOW_PRIVATE: 'true',
    WEBHOOK_RETRY_BASE_MS: '100',
    RATE_LIMIT_PER_MINUTE: '100000',
    LOG_LEVEL: 'warn',
    ...extra,
  };
}

/** The service's environment for a fake OpenAI-protocol model server (the bootstrap org's default model). */
export function fakeModelEnv(baseUrl: string): Record<string, string> {
  return { LLM_PROVIDER: 'openai-compatible', LLM_BASE_URL: baseUrl, LLM_MODEL: 'fake-model' };
}

// ---------------------------------------------------------------- processes

const live = new Set<ChildProcess>();
/** Children that lead a process group (npm): killed with their group. */
const groups = new Set<ChildProcess>();
const killHard = (child: ChildProcess) => {
  if (groups.has(child) && child.pid !== undefined) {
    try {
      process.kill(-child.pid, 'SIGKILL');
      return;
    } catch {
      // The group is gone already: fall through to the child itself.
    }
  }
  child.kill('SIGKILL');
};
/** What is left of the process groups (a node process that outlived npm included). */
const killGroups = () => {
  for (const child of groups) {
    try {
      if (child.pid !== undefined) process.kill(-child.pid, 'SIGKILL');
    } catch {
      // Nothing left in that group.
    }
  }
  groups.clear();
};
process.once('exit', () => {
  for (const child of live) killHard(child);
  killGroups();
});

export interface ServiceProcess {
  name: string;
  child: ChildProcess;
  /** Output lines (stdout and stderr), the last 5,000. */
  lines: string[];
  /** Settles when the process exited: its exit code, or the signal that ended it. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  readonly running: boolean;
  waitForLine(match: (line: string) => boolean, timeoutMs?: number): Promise<string>;
  /** The last lines of output, for assertion messages. */
  tail(n?: number): string;
  /** SIGKILL and wait for the exit. */
  kill(): Promise<void>;
}

export function spawnService(
  name: string,
  script: string,
  args: string[],
  env: Record<string, string>,
): ServiceProcess {
  return track(
    name,
    spawn(process.execPath, ['--import', 'tsx', script, ...args], {
      cwd: ROOT,
      env: childEnv(env),
      stdio: ['ignore', 'pipe', 'pipe'],
    }),
  );
}

/**
 * `npm start` as an operator (or a container whose PID 1 it is) runs it. `child` is npm itself:
 * signals go to npm, as they would in production. npm leads its own process group, so the
 * clean-up kills the whole group (npm and the node process under it).
 */
export function spawnNpmStart(name: string, env: Record<string, string>): ServiceProcess {
  const child = spawn('npm', ['start', '--silent'], {
    cwd: ROOT,
    env: childEnv(env),
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  groups.add(child);
  return track(name, child);
}

function track(name: string, child: ChildProcess): ServiceProcess {
  live.add(child);
  const lines: string[] = [];
  const listeners = new Set<() => void>();
  let partial = '';
  const onData = (chunk: Buffer) => {
    partial += chunk.toString('utf8');
    const parts = partial.split('\n');
    partial = parts.pop() ?? '';
    lines.push(...parts);
    if (lines.length > 5000) lines.splice(0, lines.length - 5000);
    for (const listener of [...listeners]) listener();
  };
  child.stdout?.on('data', onData);
  child.stderr?.on('data', onData);
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.once('exit', (code, signal) => {
      live.delete(child);
      for (const listener of [...listeners]) listener();
      resolve({ code, signal });
    });
  });
  const proc: ServiceProcess = {
    name,
    child,
    lines,
    exited,
    get running() {
      return child.exitCode === null && child.signalCode === null;
    },
    tail: (n = 40) => `--- last output of ${name} ---\n${lines.slice(-n).join('\n')}`,
    waitForLine(match, timeoutMs = 30_000) {
      return new Promise((resolve, reject) => {
        const check = () => {
          const line = lines.find(match);
          if (line !== undefined) {
            done();
            resolve(line);
          } else if (!proc.running) {
            done();
            reject(new Error(`${name} exited before the expected line\n${proc.tail()}`));
          }
        };
        const timer = setTimeout(() => {
          done();
          reject(new Error(`${name}: no matching line within ${timeoutMs} ms\n${proc.tail()}`));
        }, timeoutMs);
        const done = () => {
          clearTimeout(timer);
          listeners.delete(check);
        };
        listeners.add(check);
        check();
      });
    },
    async kill() {
      if (proc.running) killHard(child);
      await exited;
    },
  };
  return proc;
}

/** SIGKILLs every child still running (for `afterAll`, and after a failed test). */
export async function killAllProcesses(): Promise<void> {
  const waits = [...live].map(
    (child) =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null || child.signalCode !== null) return resolve();
        child.once('exit', () => resolve());
        killHard(child);
      }),
  );
  await Promise.all(waits);
  killGroups();
}

export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

export interface ServerProcess extends ServiceProcess {
  port: number;
  baseUrl: string;
  /** SIGTERM, then the exit code (SIGKILL and a rejection after `timeoutMs`). */
  stop(timeoutMs?: number): Promise<number | null>;
}

/** `src/main.ts` on a free port, resolved once `/ready` answers 200. */
export async function startServer(
  env: Record<string, string>,
  options: { name?: string; readyTimeoutMs?: number; port?: number } = {},
): Promise<ServerProcess> {
  const port = options.port ?? (await freePort());
  const name = options.name ?? `server:${port}`;
  const proc = spawnService(name, 'src/main.ts', [], { ...env, PORT: String(port), HOST: '127.0.0.1' });
  const baseUrl = `http://127.0.0.1:${port}`;
  const server: ServerProcess = Object.assign(proc, {
    port,
    baseUrl,
    async stop(timeoutMs = 30_000) {
      if (!proc.running) return (await proc.exited).code;
      proc.child.kill('SIGTERM');
      let timer: NodeJS.Timeout | undefined;
      const outcome = await Promise.race([
        proc.exited,
        new Promise<'timeout'>((resolve) => {
          timer = setTimeout(() => resolve('timeout'), timeoutMs);
        }),
      ]);
      clearTimeout(timer);
      if (outcome === 'timeout') {
        await proc.kill();
        throw new Error(`${name} did not exit within ${timeoutMs} ms of SIGTERM\n${proc.tail()}`);
      }
      return outcome.code;
    },
  });
  try {
    await waitUntil(
      async () => {
        if (!proc.running) throw new Error(`${name} exited while starting\n${proc.tail()}`);
        const res = await fetch(`${baseUrl}/ready`, { signal: AbortSignal.timeout(2000) }).catch(() => null);
        return res?.status === 200;
      },
      { timeoutMs: options.readyTimeoutMs ?? 60_000, intervalMs: 100, what: `${name} /ready` },
    );
  } catch (err) {
    await proc.kill();
    throw err;
  }
  return server;
}

/** A CLI command (`src/cli.ts`) to its end. */
export async function runCli(
  args: string[],
  env: Record<string, string>,
  timeoutMs = 60_000,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run(process.execPath, ['--import', 'tsx', 'src/cli.ts', ...args], {
      cwd: ROOT,
      env: childEnv(env),
      timeout: timeoutMs,
      killSignal: 'SIGKILL',
    });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string; killed?: boolean };
    return {
      code: typeof e.code === 'number' ? e.code : null,
      stdout: e.stdout ?? '',
      stderr: e.stderr ?? '',
    };
  }
}

/** `cli bootstrap --json` on an empty database: the organization, project and keys. */
export async function bootstrapService(env: Record<string, string>): Promise<BootstrapResult> {
  const result = await runCli(['bootstrap', '--json'], env);
  if (result.code !== 0) throw new Error(`bootstrap failed (${result.code}): ${result.stderr}`);
  return JSON.parse(result.stdout.trim()) as BootstrapResult;
}

// ---------------------------------------------------------------- databases

export interface ServiceDatabase {
  env: Record<string, string>;
  /** postgres only: the database's URL. */
  url: string | null;
  /** Runs SQL against the database (PGlite: only while no process holds DATA_DIR). */
  query<T = Record<string, any>>(text: string, params?: unknown[]): Promise<T[]>;
  drop(): Promise<void>;
}

/** An empty database of its own on the TEST_DATABASE_URL server (the service migrates it). */
export async function freshPostgresDatabase(
  baseUrl = process.env.TEST_DATABASE_URL!,
): Promise<ServiceDatabase> {
  const name = `scriptorium_proc_${randomBytes(4).toString('hex')}`;
  await adminQuery(baseUrl, `CREATE DATABASE ${name}`);
  const u = new URL(baseUrl);
  u.pathname = `/${name}`;
  const url = u.toString();
  const pool = new pg.Pool({ connectionString: url, max: 2 });
  pool.on('error', () => {});
  return {
    env: { DATABASE_URL: url },
    url,
    async query(text, params) {
      return (await pool.query(text, params as unknown[])).rows;
    },
    async drop() {
      await pool.end().catch(() => {});
      await adminQuery(baseUrl, `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    },
  };
}

async function adminQuery(baseUrl: string, text: string) {
  const client = new pg.Client({ connectionString: baseUrl });
  await client.connect();
  try {
    await client.query(text);
  } finally {
    await client.end();
  }
}

/** An empty PGlite DATA_DIR; `query` opens it only while no server holds it. */
export function freshPgliteDirectory(): ServiceDatabase {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'scriptorium-proc-'));
  return {
    env: { DATA_DIR: dir },
    url: null,
    async query(text, params) {
      const { PGlite } = await import('@electric-sql/pglite');
      const { vector } = await import('@electric-sql/pglite-pgvector');
      const client = new PGlite(dir, { extensions: { vector } });
      try {
        return (await client.query(text, params as any[])).rows as any[];
      } finally {
        await client.close();
      }
    },
    async drop() {
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** The database of this vitest project: PostgreSQL when the project is `postgres`, else PGlite. */
export function projectDatabase(): Promise<ServiceDatabase> {
  return process.env.TEST_BACKEND === 'postgres'
    ? freshPostgresDatabase()
    : Promise.resolve(freshPgliteDirectory());
}

// ---------------------------------------------------------------- a private PostgreSQL cluster

const PG_BIN = '/usr/lib/postgresql/15/bin';

/** initdb and pg_ctl exist, and there is a `postgres` user to run them as (they refuse root). */
export function privatePostgresAvailable(): boolean {
  if (!existsSync(path.join(PG_BIN, 'initdb')) || !existsSync(path.join(PG_BIN, 'pg_ctl'))) return false;
  if (process.getuid?.() !== 0) return true;
  return existsSync('/usr/sbin/runuser') && readFileSync('/etc/passwd', 'utf8').includes('\npostgres:');
}

export interface PrivatePostgres {
  port: number;
  /** URL of a database on this cluster. */
  url(database?: string): string;
  start(): Promise<void>;
  /** pg_ctl stop: `fast` (a clean shutdown) or `immediate` (a crash; recovery on start). */
  stop(mode?: 'fast' | 'immediate'): Promise<void>;
  /** Stops and removes the cluster. */
  destroy(): Promise<void>;
}

/**
 * A PostgreSQL cluster of the test's own on a free port, so a test may stop and restart it without
 * touching the machine's shared server.
 */
export async function startPrivatePostgres(): Promise<PrivatePostgres> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'scriptorium-pg-'));
  const asRoot = process.getuid?.() === 0;
  if (asRoot) {
    const { stdout } = await run('id', ['-u', 'postgres']);
    const { stdout: gid } = await run('id', ['-g', 'postgres']);
    chownSync(dir, Number(stdout.trim()), Number(gid.trim()));
  }
  const data = path.join(dir, 'data');
  const port = await freePort();
  const pgRun = (bin: string, args: string[], timeout = 60_000) =>
    asRoot
      ? run('runuser', ['-u', 'postgres', '--', path.join(PG_BIN, bin), ...args], { timeout })
      : run(path.join(PG_BIN, bin), args, { timeout });
  await pgRun('initdb', ['-D', data, '-A', 'trust', '-U', 'postgres', '--no-sync', '-E', 'UTF8']);
  const options = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200`;
  const cluster: PrivatePostgres = {
    port,
    url: (database = 'postgres') => `postgres://postgres@127.0.0.1:${port}/${database}`,
    async start() {
      await pgRun('pg_ctl', [
        '-D',
        data,
        '-o',
        options,
        '-l',
        path.join(dir, 'log'),
        '-w',
        '-t',
        '60',
        'start',
      ]);
    },
    async stop(mode = 'fast') {
      await pgRun('pg_ctl', ['-D', data, '-m', mode, '-w', '-t', '60', 'stop']);
    },
    async destroy() {
      await pgRun('pg_ctl', ['-D', data, '-m', 'immediate', '-w', 'stop']).catch(() => {});
      rmSync(dir, { recursive: true, force: true });
    },
  };
  await cluster.start();
  return cluster;
}

// ---------------------------------------------------------------- HTTP

export interface HttpResult {
  status: number;
  headers: Headers;
  body: any;
}

/** A JSON request with a bearer key and a deadline: a request that hangs fails the test. */
export async function request(
  baseUrl: string,
  method: string,
  urlPath: string,
  options: { key?: string; body?: unknown; timeoutMs?: number } = {},
): Promise<HttpResult> {
  const res = await fetch(`${baseUrl}${urlPath}`, {
    method,
    headers: {
      ...(options.key ? { authorization: `Bearer ${options.key}` } : {}),
      ...(options.body === undefined ? {} : { 'content-type': 'application/json' }),
    },
    body: options.body === undefined ? undefined : JSON.stringify(options.body),
    signal: AbortSignal.timeout(options.timeoutMs ?? 15_000),
  });
  const text = await res.text();
  let body: unknown = text;
  if ((res.headers.get('content-type') ?? '').includes('json') && text) body = JSON.parse(text);
  return { status: res.status, headers: res.headers, body };
}

export interface SseEvent {
  event: string;
  data: any;
}

/**
 * A streaming POST read to its end (`readSse`). `onEvent` sees each event as it arrives (e.g. to
 * kill the server after the first `content`); `ended` is `error` when the connection broke.
 */
export async function postStream(
  baseUrl: string,
  urlPath: string,
  key: string,
  body: unknown,
  options: { timeoutMs?: number; onEvent?: (event: SseEvent) => void } = {},
): Promise<{ status: number; contentType: string; events: SseEvent[]; ended: 'end' | 'error' }> {
  let seen = 0;
  const read = await readSse(`${baseUrl}${urlPath}`, {
    key,
    body,
    timeoutMs: options.timeoutMs,
    onProgress: (events) => {
      for (; seen < events.length; seen++)
        options.onEvent?.({ event: events[seen].event, data: events[seen].data });
    },
  });
  return {
    status: read.status,
    contentType: read.headers.get('content-type') ?? '',
    events: read.events.map(({ event, data }) => ({ event, data })),
    ended: read.ended === 'dropped' ? 'error' : 'end',
  };
}

/** Polls until `check` returns true; rejects after `timeoutMs`. */
export async function waitUntil(
  check: () => Promise<boolean> | boolean,
  options: { timeoutMs: number; intervalMs?: number; what: string },
): Promise<number> {
  const started = Date.now();
  for (;;) {
    if (await check()) return Date.now() - started;
    if (Date.now() - started > options.timeoutMs)
      throw new Error(`timed out after ${options.timeoutMs} ms waiting for ${options.what}`);
    await sleep(options.intervalMs ?? 100);
  }
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
