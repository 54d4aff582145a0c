/**
 * What the pinned benchmarks share (bench/closed-loop.ts, bench/rates.ts): pinning, a database of
 * the run's own (PostgreSQL or PGlite), the fake model, the service's environment, bootstrap,
 * starting and stopping the service, and the CPU PostgreSQL spends for the run's database.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import pg from 'pg';
import { treeCpuMs } from './proc-stats.js';

export const ROOT = path.resolve(import.meta.dirname, '..');
export const ADMIN_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
export type Backend = 'postgres' | 'pglite';

/** `taskset -c CORE` before a command, unless pinning is off. */
export const pinned = (pin: boolean, core: number, command: string, args: string[]): [string, string[]] =>
  pin ? ['taskset', ['-c', String(core), command, ...args]] : [command, args];

/** Pins every thread of this process (V8's and libuv's, not only the main one) to core 0. */
export function pinSelf(pin: boolean) {
  if (!pin) return;
  if (os.cpus().length < 2) throw new Error('pinning needs 2 cores; run with --no-pin on a 1-core machine');
  const result = spawnSync('taskset', ['-a', '-pc', '0', String(process.pid)], { encoding: 'utf8' });
  if (result.status !== 0) throw new Error(`taskset failed: ${result.stderr || result.error}`);
}

/** One statement on the administration database (a connection of its own). */
export async function adminQuery<T = Record<string, unknown>>(
  text: string,
  values?: unknown[],
): Promise<T[]> {
  const client = new pg.Client({ connectionString: ADMIN_URL });
  await client.connect();
  try {
    return (await client.query(text, values)).rows as T[];
  } finally {
    await client.end();
  }
}

export interface BenchDatabase {
  env: Record<string, string>;
  /** The PostgreSQL database's name (null on PGlite). */
  name: string | null;
  cleanup(): Promise<void>;
}

/** A fresh database for the run (`<prefix>_<random>` on PostgreSQL) and a data directory. */
export async function prepareDatabase(backend: Backend, prefix: string): Promise<BenchDatabase> {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), `${prefix.replace(/_/g, '-')}-`));
  const removeDir = () => rmSync(dataDir, { recursive: true, force: true });
  if (backend === 'pglite')
    return { env: { DATA_DIR: dataDir }, name: null, cleanup: async () => removeDir() };
  const name = `${prefix}_${randomBytes(4).toString('hex')}`;
  await adminQuery(`CREATE DATABASE ${name}`);
  const url = new URL(ADMIN_URL);
  url.pathname = `/${name}`;
  return {
    env: { DATA_DIR: dataDir, DATABASE_URL: url.toString() },
    name,
    cleanup: async () => {
      await adminQuery(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      removeDir();
    },
  };
}

/** bench/fake-model.ts on core 0; resolves with its port. */
export async function startFakeModel(
  pin: boolean,
  model: { tokens: number; ttftMs: number; delayMs: number },
): Promise<{ child: ChildProcess; port: number }> {
  const [command, args] = pinned(pin, 0, process.execPath, [
    '--import',
    'tsx',
    'bench/fake-model.ts',
    '--tokens',
    String(model.tokens),
    '--ttft',
    String(model.ttftMs),
    '--delay',
    String(model.delayMs),
  ]);
  const child = spawn(command, args, { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] });
  const lines = createInterface({ input: child.stdout! });
  const port = await new Promise<number>((resolve, reject) => {
    lines.once('line', (line) => resolve(JSON.parse(line).port));
    child.once('exit', (code) => reject(new Error(`fake model exited (${code})`)));
  });
  return { child, port };
}

/**
 * A free port for the service, below Linux's ephemeral range (32768 and up): a random port there
 * could be taken by one of the run's own outgoing connections before the service listened, and
 * two runs failed so ("the port is in use").
 */
export async function freeServicePort(): Promise<number> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const port = 20000 + Math.floor(Math.random() * 12000);
    const free = await new Promise<boolean>((resolve) => {
      const probe = net.createServer();
      probe.once('error', () => resolve(false));
      probe.listen(port, '127.0.0.1', () => probe.close(() => resolve(true)));
    });
    if (free) return port;
  }
  throw new Error('no free port between 20000 and 32000 for the service');
}

export function serviceEnv(
  dbEnv: Record<string, string>,
  modelPort: number,
  port: number,
): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env };
  // The service's database and cache are only the ones made for this run.
  delete env.DATABASE_URL;
  delete env.REDIS_URL;
  return {
    ...env,
    ...dbEnv,
    PORT: String(port),
    HOST: '127.0.0.1',
    LLM_PROVIDER: 'openai-compatible',
    LLM_BASE_URL: `http://127.0.0.1:${modelPort}/v1`,
    LLM_MODEL: 'bench',
    OUTBOUND_ALLOW_PRIVATE: 'true',
    RATE_LIMIT_PER_MINUTE: '1000000000',
    // Thousands of replies per run: the default 1,000 credits would run out (402) mid-run.
    DEFAULT_ORG_CREDITS: '1000000000',
    SECRET_KEY: 'bench-secret-key-0123456789',
    LOG_LEVEL: 'warn',
  };
}

/** `cli bootstrap` on the run's database: the organization key and the default project. */
export function bootstrap(env: NodeJS.ProcessEnv): { organization_key: string; project_id: number } {
  const result = spawnSync('npm', ['run', '--silent', 'cli', '--', 'bootstrap', '--json'], {
    cwd: ROOT,
    env,
    encoding: 'utf8',
  });
  if (result.status !== 0) throw new Error(`bootstrap failed: ${result.stderr}`);
  return JSON.parse(result.stdout);
}

/**
 * The service's node arguments exactly as `npm start` runs them: package.json's `start` script is
 * `node scripts/build-dist.mjs --if-stale && exec node <flags> <entry>`; this runs the same build
 * check and returns `<flags> <entry>`, so a bench measures the V8 flags and the compiled entry that
 * operators run. `BENCH_START_ARGS` (node arguments, space-separated, e.g. `--import tsx
 * src/main.ts`) replaces them (after the same build check), to compare start commands in
 * alternating runs.
 */
export function startArgs(): string[] {
  const start: string = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')).scripts.start;
  const match = /^(.*)&& exec node (.+)$/.exec(start);
  if (!match) throw new Error(`package.json's start script is not "... && exec node ARGS": ${start}`);
  const build = spawnSync('sh', ['-c', match[1]], { cwd: ROOT, stdio: ['ignore', 'inherit', 'inherit'] });
  if (build.status !== 0) throw new Error(`${match[1]} failed (${build.status})`);
  const override = process.env.BENCH_START_ARGS?.trim();
  return (override || match[2].trim()).split(/\s+/);
}

/** The service on core 1, once `/ready` answers. */
export async function startService(
  pin: boolean,
  env: NodeJS.ProcessEnv,
  profileDir: string | null,
): Promise<ChildProcess> {
  // Node's own file names (CPU.<date>.<time>.<pid>.<thread>.<seq>.cpuprofile): one per thread that
  // runs JavaScript (under tsx also its module-loader thread); a fixed name would overwrite.
  const nodeArgs = profileDir ? ['--cpu-prof', `--cpu-prof-dir=${profileDir}`] : [];
  const [command, args] = pinned(pin, 1, process.execPath, [...nodeArgs, ...startArgs()]);
  const child = spawn(command, args, { cwd: ROOT, env, stdio: ['ignore', 'inherit', 'inherit'] });
  const base = `http://127.0.0.1:${env.PORT}`;
  for (let i = 0; i < 600; i++) {
    if (child.exitCode !== null) throw new Error(`service exited while starting (${child.exitCode})`);
    try {
      if ((await fetch(`${base}/ready`)).ok) return child;
    } catch {}
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  child.kill('SIGKILL');
  throw new Error('service did not become ready within 60 s');
}

export async function stopChild(child: ChildProcess, signal: NodeJS.Signals = 'SIGTERM') {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill(signal);
  const timer = setTimeout(() => child.kill('SIGKILL'), 40_000);
  await exited;
  clearTimeout(timer);
}

export interface DatabaseSample {
  /** CPU (utime+stime from /proc, ms) of each backend connected to the run's database. */
  backendCpuMs: Map<number, number>;
  /** Transactions of the run's database (`xact_commit + xact_rollback` of pg_stat_database). */
  transactions: number;
}

/**
 * What PostgreSQL spends on the run's database: the CPU of its backends (pids from
 * pg_stat_activity) and its transactions (each autocommit statement is one). null on PGlite.
 * Backends flush their statistics at most once a second, and within a second of going idle:
 * sample a second or more after the load stops (`databaseDelta` waits).
 */
export async function sampleDatabase(name: string | null): Promise<DatabaseSample | null> {
  if (!name) return null;
  const [backends, [stats]] = await Promise.all([
    adminQuery<{ pid: number }>('select pid from pg_stat_activity where datname = $1', [name]),
    adminQuery<{ transactions: string }>(
      'select xact_commit + xact_rollback as transactions from pg_stat_database where datname = $1',
      [name],
    ),
  ]);
  return {
    backendCpuMs: new Map(backends.map((b) => [b.pid, treeCpuMs([b.pid])])),
    transactions: Number(stats?.transactions ?? 0),
  };
}

/** Backend CPU and transactions between two samples (a backend gone by `after` is not counted). */
export function databaseDelta(
  before: DatabaseSample | null,
  after: DatabaseSample | null,
): { backendCpuMs: number; transactions: number } | null {
  if (!before || !after) return null;
  let cpu = 0;
  for (const [pid, ms] of after.backendCpuMs) cpu += ms - (before.backendCpuMs.get(pid) ?? 0);
  return { backendCpuMs: cpu, transactions: after.transactions - before.transactions };
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
