/**
 * What an idle service spends in the background (issue 14, session 5): starts the service as
 * bench/closed-loop.ts does (fresh database, `cli bootstrap`, the node arguments of `npm start`),
 * waits `--settle` seconds after /ready, then counts over `--seconds`:
 *   - CPU ms of the service's process tree (utime + stime from /proc),
 *   - on PostgreSQL: transactions of its database (`xact_commit + xact_rollback` of
 *     pg_stat_database; each statement outside a transaction is one) and the CPU ms of the
 *     PostgreSQL backends serving it (their /proc stat), connections opened (`sessions`).
 *
 *   npx tsx bench/idle.ts [--backend postgres|pglite] [--seconds 60] [--settle 5] [--profile DIR]
 *
 * DATABASE_URL (default postgres://postgres@127.0.0.1:5432/postgres) is the admin connection
 * used to create and drop the run's database.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { startArgs } from './harness.js';
import { CLK_TCK, processTree, treeCpuMs, treeRssMb } from './proc-stats.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const arg = (name: string, fallback: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && process.argv[i + 1] ? process.argv[i + 1] : fallback;
};
const BACKEND = arg('backend', 'postgres');
const SECONDS = Number(arg('seconds', '60'));
const SETTLE = Number(arg('settle', '5'));
const PROFILE = arg('profile', '');
const ADMIN_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';

async function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const server = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

async function withAdmin<T>(url: string, run: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return await run(client);
  } finally {
    await client.end();
  }
}

function ticksOf(pid: number): number {
  try {
    const text = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
    return Number(fields[11]) + Number(fields[12]);
  } catch {
    return 0;
  }
}

/** CPU ms per thread name of a process (`/proc/<pid>/task/<tid>/stat`), e.g. V8 workers, libuv pool. */
function threadMs(pid: number): Map<string, number> {
  const byName = new Map<string, number>();
  let tids: string[] = [];
  try {
    tids = readdirSync(`/proc/${pid}/task`);
  } catch {
    return byName;
  }
  for (const tid of tids) {
    try {
      const text = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
      const name = text.slice(text.indexOf('(') + 1, text.lastIndexOf(')'));
      const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
      const ms = ((Number(fields[11]) + Number(fields[12])) * 1000) / CLK_TCK;
      byName.set(name, (byName.get(name) ?? 0) + ms);
    } catch {}
  }
  return byName;
}

const dataDir = mkdtempSync(path.join(os.tmpdir(), 'scriptorium-idle-'));
const dbName = `scriptorium_idle_${randomBytes(4).toString('hex')}`;
const dbUrl = new URL(ADMIN_URL);
dbUrl.pathname = `/${dbName}`;
let child: ChildProcess | null = null;

async function main() {
  const port = await freePort();
  const env: NodeJS.ProcessEnv = { ...process.env, DATA_DIR: dataDir };
  delete env.DATABASE_URL;
  delete env.REDIS_URL;
  Object.assign(env, {
    PORT: String(port),
    HOST: '127.0.0.1',
    LLM_PROVIDER: 'openai-compatible',
    LLM_BASE_URL: 'http://127.0.0.1:9/v1',
    LLM_MODEL: 'bench',
    OUTBOUND_ALLOW_PRIVATE: 'true',
    SECRET_KEY: 'bench-secret-key-0123456789',
    LOG_LEVEL: 'warn',
  });
  if (BACKEND === 'postgres') {
    await withAdmin(ADMIN_URL, (c) => c.query(`CREATE DATABASE ${dbName}`));
    env.DATABASE_URL = dbUrl.toString();
  }
  const boot = spawnSync('npm', ['run', '--silent', 'cli', '--', 'bootstrap', '--json'], {
    cwd: ROOT,
    env,
    encoding: 'utf8',
  });
  if (boot.status !== 0) throw new Error(`bootstrap failed: ${boot.stderr}`);

  const nodeArgs = PROFILE ? ['--cpu-prof', `--cpu-prof-dir=${path.resolve(PROFILE)}`] : [];
  const args = [...nodeArgs, ...startArgs()];
  const spawned = performance.now();
  child = spawn(process.execPath, args, {
    cwd: ROOT,
    env,
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  // Start-up: from spawn to the first 200 of /ready (polled every 20 ms), and the CPU it took.
  for (let i = 0; ; i++) {
    if (i > 3000) throw new Error('service not ready');
    try {
      if ((await fetch(`http://127.0.0.1:${port}/ready`)).ok) break;
    } catch {}
    await new Promise((r) => setTimeout(r, 20));
  }
  const readyMs = performance.now() - spawned;
  const startupCpuMs = treeCpuMs(processTree(child.pid!));
  await new Promise((r) => setTimeout(r, SETTLE * 1000));

  // One connection held for the run, so reading the counters opens no session of the database.
  const stats = BACKEND === 'postgres' ? new pg.Client({ connectionString: ADMIN_URL }) : null;
  await stats?.connect();
  const read = async () => {
    if (!stats) return null;
    // The statistics snapshot of this connection's transaction would be frozen: a fresh one each read.
    await stats.query('select pg_stat_clear_snapshot()');
    const { rows } = await stats.query(
      `select xact_commit + xact_rollback as xacts, sessions,
         (select array_agg(pid) from pg_stat_activity where datname = $1) as pids
       from pg_stat_database where datname = $1`,
      [dbName],
    );
    const row = rows[0];
    const pids: number[] = row.pids ?? [];
    return { xacts: Number(row.xacts), sessions: Number(row.sessions), pids };
  };

  const tree = processTree(child.pid!);
  const before = await read();
  const backendTicks0 = new Map((before?.pids ?? []).map((pid) => [pid, ticksOf(pid)]));
  const threads0 = threadMs(child.pid!);
  const cpu0 = treeCpuMs(tree);
  const t0 = performance.now();
  const us0 = Number(process.hrtime.bigint() / 1000n);
  await new Promise((r) => setTimeout(r, SECONDS * 1000));
  const cpu1 = treeCpuMs(processTree(child.pid!));
  const us1 = Number(process.hrtime.bigint() / 1000n);
  const threads: Record<string, number> = {};
  for (const [name, ms] of threadMs(child.pid!)) {
    const delta = ms - (threads0.get(name) ?? 0);
    if (delta > 0) threads[name] = delta;
  }
  const seconds = (performance.now() - t0) / 1000;
  const after = await read();
  await stats?.end();

  const result: Record<string, unknown> = {
    backend: BACKEND,
    start_args: args.join(' '),
    ready_ms: Math.round(readyMs),
    startup_cpu_ms: startupCpuMs,
    rss_mb: Math.round(treeRssMb(processTree(child.pid!))),
    seconds: Number(seconds.toFixed(1)),
    service_cpu_ms: cpu1 - cpu0,
    service_cpu_ms_per_s: Number(((cpu1 - cpu0) / seconds).toFixed(2)),
    threads_cpu_ms: threads,
    load: os
      .loadavg()
      .map((l) => l.toFixed(2))
      .join(' '),
  };
  if (before && after) {
    let backendMs = 0;
    for (const pid of after.pids) {
      const start = backendTicks0.get(pid) ?? 0;
      backendMs += ((ticksOf(pid) - start) * 1000) / CLK_TCK;
    }
    result.transactions = after.xacts - before.xacts;
    result.transactions_per_s = Number(((after.xacts - before.xacts) / seconds).toFixed(2));
    result.sessions_opened = after.sessions - before.sessions;
    result.backend_cpu_ms = backendMs;
    result.backend_cpu_ms_per_s = Number((backendMs / seconds).toFixed(2));
  }
  console.log(JSON.stringify(result));
  if (PROFILE) {
    // The measured phase, for bench/profile-summary.ts to keep only its samples (start-up excluded).
    mkdirSync(PROFILE, { recursive: true });
    const window = { concurrency: 0, window_monotonic_us: [us0, us1], replies: 0, cpu_ms_per_reply: null };
    writeFileSync(path.join(PROFILE, 'windows.json'), `${JSON.stringify([window])}\n`);
  }
}

async function cleanup() {
  if (child && child.exitCode === null) {
    const exited = new Promise((r) => child!.once('exit', r));
    child.kill('SIGTERM');
    await Promise.race([exited, new Promise((r) => setTimeout(r, 10_000))]);
    if (child.exitCode === null) child.kill('SIGKILL');
  }
  if (BACKEND === 'postgres') {
    await withAdmin(ADMIN_URL, (c) => c.query(`DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`)).catch(
      () => {},
    );
  }
  rmSync(dataDir, { recursive: true, force: true });
}

try {
  await main();
} finally {
  await cleanup();
}
