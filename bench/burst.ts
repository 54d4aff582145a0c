/**
 * `npm run bench` (without `--closed-loop`): starts the service in its own process (PGlite, or PostgreSQL when DATABASE_URL
 * is given) against a fake streaming model on loopback, and measures what the service adds.
 * Options: --tokens 200 --ttft 0 --delay 10 --levels 1,10,100,500 --duration 5 --json-only
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import autocannon from 'autocannon';
import { createParser } from 'eventsource-parser';
import pg from 'pg';
import { startFakeModelServer } from '../test/helpers/fake-model-server.js';
import { freeServicePort, startArgs } from './harness.js';
import { numberOption } from './options.js';
import { percentile } from './percentile.js';

const { values: opts } = parseArgs({
  options: {
    tokens: { type: 'string', default: '200' },
    ttft: { type: 'string', default: '0' },
    delay: { type: 'string', default: '10' },
    levels: { type: 'string', default: '1,10,100,500' },
    duration: { type: 'string', default: '5' },
    'json-only': { type: 'boolean', default: false },
  },
});
const TOKENS = numberOption('--tokens', opts.tokens!, { min: 1, integer: true });
const TTFT = numberOption('--ttft', opts.ttft!);
const DELAY = numberOption('--delay', opts.delay!);
const LEVELS = opts
  .levels!.split(',')
  .map((level) => numberOption('--levels', level, { min: 1, integer: true }));
const DURATION = numberOption('--duration', opts.duration!, { min: 1 });
const ROOT = path.resolve(import.meta.dirname, '..');
const CLK_TCK = 100;

const log = (...args: unknown[]) => {
  if (!opts['json-only']) console.error(...args);
};

const round = (n: number, digits = 1) => Math.round(n * 10 ** digits) / 10 ** digits;

function cpuMs(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / CLK_TCK;
}

function rssMb(pid: number): number {
  const match = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return match ? Number(match[1]) / 1024 : 0;
}

interface StreamTiming {
  ttft: number;
  total: number;
  ok: boolean;
}

/** Reads an SSE response; `isContent` picks the events that count as reply text. */
async function timeStream(
  start: number,
  response: Response,
  isContent: (event: string | undefined, data: string) => boolean,
  isEnd: (event: string | undefined, data: string) => boolean,
): Promise<StreamTiming> {
  let ttft = Number.NaN;
  let ok = response.ok;
  let ended = false;
  const parser = createParser({
    onEvent(e) {
      if (Number.isNaN(ttft) && isContent(e.event, e.data)) ttft = performance.now() - start;
      if (e.event === 'error') ok = false;
      if (isEnd(e.event, e.data)) ended = true;
    },
  });
  const decoder = new TextDecoder();
  for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>)
    parser.feed(decoder.decode(chunk, { stream: true }));
  return { ttft, total: performance.now() - start, ok: ok && ended };
}

async function directStream(modelUrl: string): Promise<StreamTiming> {
  const start = performance.now();
  const response = await fetch(`${modelUrl}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      model: 'fake-model',
      stream: true,
      messages: [{ role: 'user', content: 'Hello there' }],
    }),
  });
  return timeStream(
    start,
    response,
    (_e, data) => data !== '[DONE]' && Boolean(JSON.parse(data).choices?.[0]?.delta?.content),
    (_e, data) => data === '[DONE]',
  );
}

async function serviceStream(base: string, key: string, chatId: number): Promise<StreamTiming> {
  const start = performance.now();
  const response = await fetch(`${base}/api/v2/chats/${chatId}/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
    body: JSON.stringify({ content: 'Hello there', stream: true }),
  });
  return timeStream(
    start,
    response,
    (event) => event === 'content',
    (event) => event === 'done',
  );
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

async function prepareDatabase(): Promise<{ env: Record<string, string>; cleanup: () => Promise<void> }> {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'scriptorium-bench-'));
  const url = process.env.DATABASE_URL;
  if (!url) return { env: { DATA_DIR: dataDir }, cleanup: async () => {} };
  const name = `scriptorium_bench_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  await admin.end();
  const u = new URL(url);
  u.pathname = `/${name}`;
  return {
    env: { DATA_DIR: dataDir, DATABASE_URL: u.toString() },
    cleanup: async () => {
      const c = new pg.Client({ connectionString: url });
      await c.connect();
      await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await c.end();
    },
  };
}

async function startService(env: Record<string, string>): Promise<{ child: ChildProcess; base: string }> {
  const port = await freeServicePort();
  const child = spawn(process.execPath, startArgs(), {
    cwd: ROOT,
    env: { ...process.env, ...env, PORT: String(port), LOG_LEVEL: 'warn' },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  const base = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 200; i++) {
    try {
      if ((await fetch(`${base}/ready`)).ok) return { child, base };
    } catch {}
    await new Promise((r) => setTimeout(r, 100));
  }
  child.kill('SIGKILL');
  throw new Error('service did not become ready');
}

async function measureStreaming(base: string, key: string, projectId: number, modelUrl: string, pid: number) {
  // One turn first, unmeasured: the process's first turn pays for compiling code paths, opening
  // pool connections and LISTEN, which is start-up cost, not per-stream overhead.
  const warmChat = (await api(base, key, 'POST', '/api/v2/chats', { project_id: projectId })).response.chat
    .id;
  await directStream(modelUrl);
  await serviceStream(base, key, warmChat);
  const rows = [];
  for (const level of LEVELS) {
    log(`streaming at ${level} concurrent...`);
    const chats: number[] = [];
    for (let i = 0; i < level; i++) {
      chats.push((await api(base, key, 'POST', '/api/v2/chats', { project_id: projectId })).response.chat.id);
    }
    const direct = await Promise.all(Array.from({ length: level }, () => directStream(modelUrl)));
    const rssBefore = rssMb(pid);
    let rssPeak = rssBefore;
    const sampler = setInterval(() => {
      rssPeak = Math.max(rssPeak, rssMb(pid));
    }, 50);
    const cpuBefore = cpuMs(pid);
    const service = await Promise.all(chats.map((id) => serviceStream(base, key, id)));
    const cpu = cpuMs(pid) - cpuBefore;
    clearInterval(sampler);
    const ok = service.filter((s) => s.ok);
    const d = {
      ttft: direct.map((s) => s.ttft),
      total: direct.map((s) => s.total),
    };
    const s = { ttft: ok.map((x) => x.ttft), total: ok.map((x) => x.total) };
    const overhead = (p: number) => round(percentile(s.ttft, p) - percentile(d.ttft, p));
    rows.push({
      concurrency: level,
      errors: service.length - ok.length,
      direct_ttft_ms: {
        p50: round(percentile(d.ttft, 50)),
        p90: round(percentile(d.ttft, 90)),
        p99: round(percentile(d.ttft, 99)),
      },
      service_ttft_ms: {
        p50: round(percentile(s.ttft, 50)),
        p90: round(percentile(s.ttft, 90)),
        p99: round(percentile(s.ttft, 99)),
      },
      ttft_overhead_ms: { p50: overhead(50), p90: overhead(90), p99: overhead(99) },
      direct_total_ms: { p50: round(percentile(d.total, 50)), p99: round(percentile(d.total, 99)) },
      service_total_ms: { p50: round(percentile(s.total, 50)), p99: round(percentile(s.total, 99)) },
      total_ratio_p50: round(percentile(s.total, 50) / percentile(d.total, 50), 3),
      cpu_ms_per_reply: round(cpu / level),
      rss_mb_per_open_stream: round(Math.max(0, rssPeak - rssBefore) / level, 2),
    });
  }
  return rows;
}

async function measureRequests(base: string, key: string, projectId: number) {
  const chat = (await api(base, key, 'POST', '/api/v2/chats', { project_id: projectId, content: 'Hi there' }))
    .response.chat;
  for (let i = 0; i < 4; i++)
    await api(base, key, 'POST', `/api/v2/chats/${chat.id}/messages`, { content: `Message ${i}` });
  const targets: { name: string; method: 'GET' | 'POST'; path: string; body?: string }[] = [
    { name: 'GET /api/v2/chats/:id/messages', method: 'GET', path: `/api/v2/chats/${chat.id}/messages` },
    { name: 'GET /api/v2/chats', method: 'GET', path: '/api/v2/chats' },
    {
      name: 'POST /api/v2/chats (no content)',
      method: 'POST',
      path: '/api/v2/chats',
      body: JSON.stringify({ project_id: projectId }),
    },
  ];
  const artifact = await createArtifact(base, key, projectId).catch((err) => {
    log(`artifact GET skipped: ${err.message}`);
    return null;
  });
  if (artifact) targets.push({ name: 'GET artifact', method: 'GET', path: artifact.path });
  const rows = [];
  for (const target of targets) {
    log(`autocannon ${target.name}...`);
    const result = await autocannon({
      url: `${base}${target.path}`,
      method: target.method,
      body: target.body,
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      connections: 50,
      duration: DURATION,
    });
    rows.push({
      endpoint: target.name,
      connections: 50,
      requests_per_second: round(result.requests.average),
      p50_ms: result.latency.p50,
      p99_ms: result.latency.p99,
      non_2xx: result.non2xx,
      errors: result.errors,
    });
  }
  return { rows, artifact };
}

async function createArtifact(base: string, key: string, projectId: number) {
  const type = (
    await api(base, key, 'POST', '/api/v1/artifact_types', { name: `Bench report ${Date.now()}` })
  ).artifact_type;
  const skill = (
    await api(base, key, 'POST', '/api/v1/skills', {
      name: `Bench skill ${Date.now()}`,
      content: 'Write a short report about {custom.topic}.',
      custom_variables: [{ name: 'topic', description: 'Topic', type: 'string' }],
      artifact_type_ids: [type.id],
    })
  ).skill;
  const made = await api(
    base,
    key,
    'POST',
    `/api/v1/artifact_types/${type.slug}/artifacts?project_id=${projectId}`,
    {
      skill_id: skill.id,
      inputs: [{ name: 'topic', value: 'benchmarks' }],
      name: 'Bench artifact',
    },
  );
  return {
    path: `/api/v1/artifact_types/${type.slug}/artifacts/${made.artifact.id}`,
    slug: type.slug,
    skillId: skill.id,
  };
}

async function measureFireAndForget(
  base: string,
  key: string,
  projectId: number,
  artifact: { slug: string; skillId: number },
) {
  const arrivals = new Map<string, number>();
  const receiver = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => {
      body += c;
    });
    req.on('end', () => {
      const id = JSON.parse(body).event_data?.api_async_create_event_id;
      if (id && !arrivals.has(id)) arrivals.set(id, performance.now());
      res.end('ok');
    });
  });
  await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', () => r()));
  const port = (receiver.address() as AddressInfo).port;
  await api(base, key, 'POST', `/api/v1/projects/${projectId}/webhooks`, {
    url: `http://127.0.0.1:${port}/hook`,
    events: ['artifact_generated'],
  });
  const count = 50;
  const accepted = new Map<string, number>();
  const start = performance.now();
  await Promise.all(
    Array.from({ length: count }, async () => {
      const body = await api(
        base,
        key,
        'POST',
        `/api/v1/artifact_types/${artifact.slug}/artifacts?project_id=${projectId}`,
        {
          skill_id: artifact.skillId,
          inputs: [{ name: 'topic', value: 'queues' }],
          fire_and_forget: true,
        },
      );
      accepted.set(body.api_async_create_event_id, performance.now());
    }),
  );
  const acceptSeconds = (performance.now() - start) / 1000;
  const deadline = Date.now() + 120_000;
  while (arrivals.size < count && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
  receiver.close();
  const delays = [...accepted].filter(([id]) => arrivals.has(id)).map(([id, at]) => arrivals.get(id)! - at);
  return {
    requests: count,
    accepted_per_second: round(count / acceptSeconds),
    delivered: delays.length,
    accept_to_webhook_ms: { p50: round(percentile(delays, 50)), p99: round(percentile(delays, 99)) },
  };
}

function printTables(results: any) {
  const out: string[] = [];
  out.push(
    `\nStreaming: ${TOKENS} tokens, first token after ${TTFT} ms, ${DELAY} ms apart (${results.backend})`,
  );
  out.push(
    '| concurrent | errors | TTFT direct p50/p99 | TTFT service p50/p99 | TTFT overhead p50/p90/p99 | total ratio p50 | CPU ms/reply | RSS MB/stream |',
  );
  out.push('|---|---|---|---|---|---|---|---|');
  for (const r of results.streaming) {
    out.push(
      `| ${r.concurrency} | ${r.errors} | ${r.direct_ttft_ms.p50} / ${r.direct_ttft_ms.p99} | ${r.service_ttft_ms.p50} / ${r.service_ttft_ms.p99} | ${r.ttft_overhead_ms.p50} / ${r.ttft_overhead_ms.p90} / ${r.ttft_overhead_ms.p99} | ${r.total_ratio_p50} | ${r.cpu_ms_per_reply} | ${r.rss_mb_per_open_stream} |`,
    );
  }
  out.push(`\nRequests (${DURATION} s each)`);
  out.push('| endpoint | connections | req/s | p50 ms | p99 ms | non-2xx |');
  out.push('|---|---|---|---|---|---|');
  for (const r of results.requests) {
    out.push(
      `| ${r.endpoint} | ${r.connections} | ${r.requests_per_second} | ${r.p50_ms} | ${r.p99_ms} | ${r.non_2xx} |`,
    );
  }
  if (results.fire_and_forget) {
    const f = results.fire_and_forget;
    out.push('\nFire-and-forget');
    out.push(
      `accepted ${f.accepted_per_second}/s; ${f.delivered}/${f.requests} webhooks; acceptance -> webhook p50 ${f.accept_to_webhook_ms.p50} ms, p99 ${f.accept_to_webhook_ms.p99} ms`,
    );
  }
  console.log(out.join('\n'));
}

async function main() {
  const fake = await startFakeModelServer();
  const chunks = Array.from({ length: TOKENS }, (_, i) => (i === 0 ? 'word' : ' word'));
  fake.setResponder(() => ({
    chunks,
    firstTokenDelayMs: TTFT,
    chunkDelayMs: DELAY,
    usage: { prompt_tokens: 10, completion_tokens: TOKENS },
  }));
  // The fake server records every request; the benchmark does not need them.
  const clear = setInterval(() => fake.requests.splice(0), 1000);
  const db = await prepareDatabase();
  const env = {
    ...db.env,
    LLM_PROVIDER: 'openai-compatible',
    LLM_BASE_URL: fake.baseUrl,
    LLM_MODEL: 'fake-model',
    RATE_LIMIT_PER_MINUTE: '100000000',
    OUTBOUND_ALLOW_PRIVATE: 'true',
    SECRET_KEY: 'bench-secret-key-0123456789',
    WEBHOOK_RETRY_BASE_MS: '1000',
  };
  const boot = spawnSync('npm', ['run', '--silent', 'cli', '--', 'bootstrap', '--json'], {
    cwd: ROOT,
    env: { ...process.env, ...env, LOG_LEVEL: 'warn' },
    encoding: 'utf8',
  });
  if (boot.status !== 0) throw new Error(`bootstrap failed: ${boot.stderr}`);
  const keys = JSON.parse(boot.stdout);
  const { child, base } = await startService(env);
  try {
    const key = keys.organization_key;
    const streaming = await measureStreaming(base, key, keys.project_id, fake.baseUrl, child.pid!);
    const { rows: requests, artifact } = await measureRequests(base, key, keys.project_id);
    const fireAndForget = artifact
      ? await measureFireAndForget(base, key, keys.project_id, artifact).catch((err) => {
          log(`fire-and-forget skipped: ${err.message}`);
          return null;
        })
      : null;
    const results = {
      machine: { cpus: os.cpus().length, model: os.cpus()[0]?.model, node: process.version },
      backend: db.env.DATABASE_URL ? 'postgres' : 'pglite',
      settings: {
        tokens: TOKENS,
        ttft_ms: TTFT,
        inter_token_ms: DELAY,
        levels: LEVELS,
        duration_s: DURATION,
      },
      streaming,
      requests,
      fire_and_forget: fireAndForget,
    };
    mkdirSync(path.join(ROOT, 'bench', 'results'), { recursive: true });
    writeFileSync(
      path.join(ROOT, 'bench', 'results', `latest-${results.backend}.json`),
      `${JSON.stringify(results, null, 2)}\n`,
    );
    if (opts['json-only']) console.log(JSON.stringify(results, null, 2));
    else printTables(results);
  } finally {
    clearInterval(clear);
    child.kill('SIGTERM');
    await new Promise((r) => child.once('exit', r));
    await fake.close();
    await db.cleanup();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
