/**
 * `npm run bench -- --rates`: issue 14's plain request rates. The service (a child process, on a
 * fresh PostgreSQL database or PGlite) is pinned to core 1 (`taskset -c 1`); this process, which
 * runs autocannon with 50 connections, and the fake model pin themselves to core 0. Measured, one
 * endpoint after the other: `GET /api/v2/chats/:id/messages` of a 10-message chat and
 * `POST /api/v2/chats` without content. For each: req/s, latency, non-2xx, and the service tree's
 * CPU per request (utime+stime from /proc during the measured run ÷ requests), and on PostgreSQL the
 * CPU of the run database's backends and its transactions per request. See bench/README.md.
 */
import type { ChildProcess } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import autocannon from 'autocannon';
import {
  bootstrap,
  databaseDelta,
  freeServicePort,
  pinSelf,
  prepareDatabase,
  ROOT,
  sampleDatabase,
  serviceEnv,
  sleep,
  startFakeModel,
  startService,
  stopChild,
} from './harness.js';
import { backendOption, numberOption } from './options.js';
import { processTree, treeCpuMs } from './proc-stats.js';

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

const BACKEND = backendOption(opts.backend);
const ENDPOINTS = opts.endpoints!.split(',');
const CONNECTIONS = numberOption('--connections', opts.connections!, { min: 1, integer: true });
const WARMUP_S = numberOption('--warmup', opts.warmup!);
const DURATION_S = numberOption('--duration', opts.duration!, { min: 1 });
const REPEAT = numberOption('--repeat', opts.repeat!, { min: 1, integer: true });
const PIN = !opts['no-pin'];
const PROFILE_DIR = path.join(ROOT, 'bench', 'profiles');
const RESULTS_DIR = path.join(ROOT, 'bench', 'results');

const log = (...args: unknown[]) => {
  if (!opts['json-only']) console.error(...args);
};
const round = (n: number, digits = 1) => Math.round(n * 10 ** digits) / 10 ** digits;
const monotonicUs = () => Number(process.hrtime.bigint() / 1000n);

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
  /**
   * PostgreSQL (null on PGlite): CPU of the run database's backends per request and as % of one
   * core, and transactions per request (an autocommit statement is one; the service's background
   * polling, about 14 a second, is included).
   */
  postgres_cpu_ms_per_request: number | null;
  postgres_cpu_percent: number | null;
  transactions_per_request: number | null;
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

async function measure(
  base: string,
  key: string,
  target: Target,
  servicePid: number,
  databaseName: string | null,
): Promise<RateFigures> {
  if (WARMUP_S > 0) await cannon(base, key, target, WARMUP_S);
  // PostgreSQL's statistics of the warm-up reach pg_stat_database within a second of it.
  if (databaseName) await sleep(1200);
  const databaseBefore = await sampleDatabase(databaseName);
  const tree = processTree(servicePid);
  const cpuBefore = treeCpuMs(tree);
  const ownBefore = process.cpuUsage();
  const start = monotonicUs();
  const result = await cannon(base, key, target, DURATION_S);
  const end = monotonicUs();
  const cpuMs = treeCpuMs(processTree(servicePid)) - cpuBefore;
  const own = process.cpuUsage(ownBefore);
  if (databaseName) await sleep(1200);
  const database = databaseDelta(databaseBefore, await sampleDatabase(databaseName));
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
    postgres_cpu_ms_per_request: database && requests > 0 ? round(database.backendCpuMs / requests, 3) : null,
    postgres_cpu_percent: database ? round(database.backendCpuMs / 10 / seconds) : null,
    transactions_per_request: database && requests > 0 ? round(database.transactions / requests, 2) : null,
    window_monotonic_us: [start, end],
  };
}

function table(rows: RateFigures[]): string {
  const out = [
    '| endpoint | connections | req/s | p50 / p99 ms | non-2xx / errors | CPU-ms/request | service CPU % | generator CPU % | PostgreSQL CPU-ms/request | PostgreSQL CPU % | transactions/request |',
    '|---|---|---|---|---|---|---|---|---|---|---|',
  ];
  for (const r of rows)
    out.push(
      `| ${r.endpoint} | ${r.connections} | ${r.requests_per_second} | ${r.latency_ms.p50} / ${r.latency_ms.p99} | ${r.non_2xx} / ${r.errors} | ${r.cpu_ms_per_request} | ${r.service_cpu_percent} | ${r.generator_cpu_percent} | ${r.postgres_cpu_ms_per_request ?? '–'} | ${r.postgres_cpu_percent ?? '–'} | ${r.transactions_per_request ?? '–'} |`,
    );
  return out.join('\n');
}

async function main() {
  pinSelf(PIN);
  const loadBefore = os.loadavg();
  // Short, quick replies: the model only has to fill the chat that history reads.
  const fake = await startFakeModel(PIN, { tokens: 20, ttftMs: 0, delayMs: 0 });
  const db = await prepareDatabase(BACKEND, 'scriptorium_rates');
  const port = await freeServicePort();
  const env = serviceEnv(db.env, fake.port, port);
  const stamp = new Date().toISOString().replace(/[:.]/g, '-');
  const profileDir = opts.profile ? path.join(PROFILE_DIR, `rates-${BACKEND}-${stamp}`) : null;
  let service: ChildProcess | null = null;
  try {
    const keys = bootstrap(env);
    const key = keys.organization_key;
    service = await startService(PIN, env, profileDir);
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
        const figures = await measure(base, key, target, service.pid!, db.name);
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
