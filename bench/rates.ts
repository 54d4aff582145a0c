/**
 * `npm run bench -- --rates`: issue 14's plain request rates. The service (a child process, on a
 * fresh PostgreSQL database or PGlite) is pinned to core 1 (`taskset -c 1`); this process, which
 * runs autocannon with 50 connections, and the fake model pin themselves to core 0. Measured, one
 * endpoint after the other: `GET /api/v2/chats/:id/messages` of a 10-message chat and
 * `POST /api/v2/chats` without content. For each: req/s, latency, non-2xx, and the service tree's
 * CPU per request (utime+stime from /proc during the measured run ÷ requests). See bench/README.md.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { parseArgs } from 'node:util';
import autocannon from 'autocannon';
import pg from 'pg';
import { processTree, treeCpuMs } from './proc-stats.js';

const ROOT = path.resolve(import.meta.dirname, '..');

const { values: opts } = parseArgs({
  options: {
    rates: { type: 'boolean', default: true },
    backend: { type: 'string', default: 'postgres' },
    endpoints: { type: 'string', default: 'history,create' },
    connections: { type: 'string', default: '50' },
    warmup: { type: 'string', default: '2' },
    duration: { type: 'string', default: '10' },
    repeat: { type: 'string', default: '1' },
    profile: { type: 'boolean', default: false },
    'no-pin': { type: 'boolean', default: false },
    'json-only': { type: 'boolean', default: false },
  },
});

if (opts.backend !== 'postgres' && opts.backend !== 'pglite') {
  console.error(`--backend must be postgres or pglite, got "${opts.backend}"`);
  process.exit(2);
}
const BACKEND = opts.backend as 'postgres' | 'pglite';
const ENDPOINTS = opts.endpoints!.split(',');
const CONNECTIONS = Number(opts.connections);
const WARMUP_S = Number(opts.warmup);
const DURATION_S = Number(opts.duration);
const REPEAT = Number(opts.repeat);
const PIN = !opts['no-pin'];
const ADMIN_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const PROFILE_DIR = path.join(ROOT, 'bench', 'profiles');
const RESULTS_DIR = path.join(ROOT, 'bench', 'results');

const log = (...args: unknown[]) => {
  if (!opts['json-only']) console.error(...args);
};
const round = (n: number, digits = 1) => Math.round(n * 10 ** digits) / 10 ** digits;
const monotonicUs = () => Number(process.hrtime.bigint() / 1000n);

const pinned = (core: number, command: string, args: string[]): [string, string[]] =>
  PIN ? ['taskset', ['-c', String(core), command, ...args]] : [command, args];

function pinSelf() {
  if (!PIN) return;
  if (os.cpus().length < 2) throw new Error('pinning needs 2 cores; run with --no-pin on a 1-core machine');
  // -a: every thread of this process (autocannon's sockets, V8's and libuv's threads).
  const result = spawnSync('taskset', ['-a', '-pc', '0', String(process.pid)], { encoding: 'utf8' });
  if (result.status !== 0) throw new Error(`taskset failed: ${result.stderr || result.error}`);
}

async function adminQuery(text: string) {
  const client = new pg.Client({ connectionString: ADMIN_URL });
  await client.connect();
  try {
    await client.query(text);
  } finally {
    await client.end();
  }
}

async function prepareDatabase(): Promise<{ env: Record<string, string>; cleanup(): Promise<void> }> {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'scriptorium-rates-'));
  const removeDir = () => rmSync(dataDir, { recursive: true, force: true });
  if (BACKEND === 'pglite') return { env: { DATA_DIR: dataDir }, cleanup: async () => removeDir() };
  const name = `scriptorium_rates_${randomBytes(4).toString('hex')}`;
  await adminQuery(`CREATE DATABASE ${name}`);
  const url = new URL(ADMIN_URL);
  url.pathname = `/${name}`;
  return {
    env: { DATA_DIR: dataDir, DATABASE_URL: url.toString() },
    cleanup: async () => {
      await adminQuery(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      removeDir();
    },
  };
}

async function startFakeModel(): Promise<{ child: ChildProcess; port: number }> {
  // Short, quick replies: the model only has to fill the chat that history reads.
  const [command, args] = pinned(0, process.execPath, [
    '--import',
    'tsx',
    'bench/fake-model.ts',
    '--tokens',
    '20',
    '--ttft',
    '0',
    '--delay',
    '0',
  ]);
  const child = spawn(command, args, { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] });
  const lines = createInterface({ input: child.stdout! });
  const port = await new Promise<number>((resolve, reject) => {
    lines.once('line', (line) => resolve(JSON.parse(line).port));
    child.once('exit', (code) => reject(new Error(`fake model exited (${code})`)));
  });
  return { child, port };
}

function serviceEnv(dbEnv: Record<string, string>, modelPort: number, port: number): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env };
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
    DEFAULT_ORG_CREDITS: '1000000000',
    SECRET_KEY: 'bench-secret-key-0123456789',
    LOG_LEVEL: 'warn',
  };
}

async function startService(env: NodeJS.ProcessEnv, profileDir: string | null): Promise<ChildProcess> {
  const nodeArgs = profileDir ? ['--cpu-prof', `--cpu-prof-dir=${profileDir}`] : [];
  const [command, args] = pinned(1, process.execPath, [...nodeArgs, '--import', 'tsx', 'src/main.ts']);
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

async function stopChild(child: ChildProcess) {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 40_000);
  await exited;
  clearTimeout(timer);
}

async function api(base: string, key: string, method: string, url: string, body?: unknown) {
  const response = await fetch(`${base}${url}`, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body ? { 'content-type': 'application/json' } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await response.text();
  if (!response.ok) throw new Error(`${method} ${url} -> ${response.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

interface Target {
  name: string;
  method: 'GET' | 'POST';
  path: string;
  body?: string;
}

interface RateFigures {
  endpoint: string;
  connections: number;
  requests: number;
  requests_per_second: number;
  latency_ms: { p50: number; p99: number };
  non_2xx: number;
  errors: number;
  cpu_ms_per_request: number;
  /** The service tree's CPU during the run, % of one core: how much of core 1 it actually got. */
  service_cpu_percent: number;
  generator_cpu_percent: number;
  window_monotonic_us: [number, number];
}

function cannon(base: string, key: string, target: Target, seconds: number) {
  return autocannon({
    url: `${base}${target.path}`,
    method: target.method,
    body: target.body,
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    connections: CONNECTIONS,
    duration: seconds,
  });
}

async function measure(base: string, key: string, target: Target, servicePid: number): Promise<RateFigures> {
  if (WARMUP_S > 0) await cannon(base, key, target, WARMUP_S);
  const tree = processTree(servicePid);
  const cpuBefore = treeCpuMs(tree);
  const ownBefore = process.cpuUsage();
  const start = monotonicUs();
  const result = await cannon(base, key, target, DURATION_S);
  const end = monotonicUs();
  const cpuMs = treeCpuMs(processTree(servicePid)) - cpuBefore;
  const own = process.cpuUsage(ownBefore);
  const seconds = (end - start) / 1e6;
  const requests = result.requests.total;
  return {
    endpoint: target.name,
    connections: CONNECTIONS,
    requests,
    requests_per_second: round(result.requests.average),
    latency_ms: { p50: result.latency.p50, p99: result.latency.p99 },
    non_2xx: result.non2xx,
    errors: result.errors,
    cpu_ms_per_request: requests > 0 ? round(cpuMs / requests, 3) : Number.NaN,
    service_cpu_percent: round(cpuMs / 10 / seconds),
    generator_cpu_percent: round((own.user + own.system) / 1e4 / seconds),
    window_monotonic_us: [start, end],
  };
}

function table(rows: RateFigures[]): string {
  const out = [
    '| endpoint | connections | req/s | p50 / p99 ms | non-2xx / errors | CPU-ms/request | service CPU % | generator CPU % |',
    '|---|---|---|---|---|---|---|---|',
  ];
  for (const r of rows)
    out.push(
      `| ${r.endpoint} | ${r.connections} | ${r.requests_per_second} | ${r.latency_ms.p50} / ${r.latency_ms.p99} | ${r.non_2xx} / ${r.errors} | ${r.cpu_ms_per_request} | ${r.service_cpu_percent} | ${r.generator_cpu_percent} |`,
    );
  return out.join('\n');
}

async function main() {
  pinSelf();
  const loadBefore = os.loadavg();
  const fake = await startFakeModel();
  const db = await prepareDatabase();
  const port = 20000 + Math.floor(Math.random() * 20000);
  const env = serviceEnv(db.env, fake.port, port);
  const stamp = new Date().toISOString().replace(/[:.]/g, '-');
  const profileDir = opts.profile ? path.join(PROFILE_DIR, `rates-${BACKEND}-${stamp}`) : null;
  let service: ChildProcess | null = null;
  try {
    const boot = spawnSync('npm', ['run', '--silent', 'cli', '--', 'bootstrap', '--json'], {
      cwd: ROOT,
      env,
      encoding: 'utf8',
    });
    if (boot.status !== 0) throw new Error(`bootstrap failed: ${boot.stderr}`);
    const keys = JSON.parse(boot.stdout) as { organization_key: string; project_id: number };
    const key = keys.organization_key;
    service = await startService(env, profileDir);
    const base = `http://127.0.0.1:${port}`;
    // A 10-message chat: the first exchange, then four more.
    const chat = (
      await api(base, key, 'POST', '/api/v2/chats', { project_id: keys.project_id, content: 'Hi there' })
    ).response.chat;
    for (let i = 0; i < 4; i++)
      await api(base, key, 'POST', `/api/v2/chats/${chat.id}/messages`, { content: `Message ${i}` });
    const history = await api(base, key, 'GET', `/api/v2/chats/${chat.id}/messages`);
    if (history.response.messages.length !== 10)
      throw new Error(`expected 10 messages, got ${history.response.messages.length}`);
    const all: Record<string, Target> = {
      history: {
        name: 'GET /api/v2/chats/:id/messages',
        method: 'GET',
        path: `/api/v2/chats/${chat.id}/messages`,
      },
      create: {
        name: 'POST /api/v2/chats (no content)',
        method: 'POST',
        path: '/api/v2/chats',
        body: JSON.stringify({ project_id: keys.project_id }),
      },
      list: { name: 'GET /api/v2/chats', method: 'GET', path: '/api/v2/chats' },
      // The floor: Fastify, its hooks and Node's HTTP without authentication or a query.
      health: { name: 'GET /health', method: 'GET', path: '/health' },
    };
    const runs: RateFigures[] = [];
    for (let r = 0; r < REPEAT; r++)
      for (const name of ENDPOINTS) {
        const target = all[name];
        if (!target) throw new Error(`unknown endpoint "${name}" (history, create, list, health)`);
        log(`${target.name}: ${WARMUP_S} s warm-up, ${DURATION_S} s measured...`);
        const figures = await measure(base, key, target, service.pid!);
        runs.push(figures);
        log(table([figures]));
      }
    const results = {
      method: 'plain rates (issue 14)',
      date: new Date().toISOString(),
      machine: { cpus: os.cpus().length, model: os.cpus()[0]?.model, node: process.version },
      backend: BACKEND,
      pinned: PIN,
      load_average: {
        before: loadBefore.map((n) => round(n, 2)),
        after: os.loadavg().map((n) => round(n, 2)),
      },
      command: `npm run bench -- ${process.argv.slice(2).join(' ')}`,
      runs,
    };
    mkdirSync(RESULTS_DIR, { recursive: true });
    const json = `${JSON.stringify(results, null, 2)}\n`;
    writeFileSync(path.join(RESULTS_DIR, `rates-${BACKEND}-${stamp}.json`), json);
    writeFileSync(path.join(RESULTS_DIR, `latest-rates-${BACKEND}.json`), json);
    if (profileDir) {
      // bench/profile-summary.ts reads "replies": here, requests.
      const windows = runs.map((r) => ({
        concurrency: r.connections,
        endpoint: r.endpoint,
        window_monotonic_us: r.window_monotonic_us,
        replies: r.requests,
        cpu_ms_per_reply: r.cpu_ms_per_request,
      }));
      mkdirSync(profileDir, { recursive: true });
      writeFileSync(path.join(profileDir, 'windows.json'), `${JSON.stringify(windows)}\n`);
    }
    if (opts['json-only']) console.log(json);
    else {
      console.log(
        `\nPlain rates, ${BACKEND}, ${CONNECTIONS} connections, ${WARMUP_S} s warm-up, ${DURATION_S} s measured, service ${PIN ? 'pinned to core 1' : 'not pinned'}; load average before ${results.load_average.before.join(' ')}, after ${results.load_average.after.join(' ')}\n`,
      );
      console.log(table(runs));
    }
  } finally {
    if (service) await stopChild(service);
    await stopChild(fake.child);
    await db.cleanup();
    if (profileDir) {
      const relative = path.relative(ROOT, profileDir);
      log(`profiles: ${relative}/\nsummary: npx tsx bench/profile-summary.ts ${relative}`);
    }
  }
}

await main();
