/**
 * `npm run bench -- --closed-loop`: issue 14's method. A fake OpenAI-compatible model (bench/fake-model.ts)
 * streams 200 tokens 10 ms apart after 50 ms; a closed loop of C workers (bench/load-loop.ts) sends
 * streamed `POST /api/v2/chats/:id/messages`, each worker moving to a fresh chat every 10 messages;
 * the first requests are spread over 1 s, then 3 s of warm-up, then 20 s measured. The same loop runs
 * straight against the fake model ("direct") before each service phase. The service (a child process,
 * on a fresh PostgreSQL database or PGlite) is pinned to core 1; this process and the fake model to
 * core 0. See bench/README.md.
 */
import type { ChildProcess } from 'node:child_process';
import { appendFileSync, mkdirSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import {
  bootstrap,
  type DatabaseSample,
  databaseDelta,
  freeServicePort,
  pinSelf,
  prepareDatabase,
  ROOT,
  sampleDatabase,
  serviceEnv,
  startFakeModel,
  startService,
  stopChild,
} from './harness.js';
import {
  DIRECT_MARKERS,
  type LoopResult,
  type LoopTarget,
  postJson,
  type ReplyTiming,
  runClosedLoop,
  SERVICE_MARKERS,
} from './load-loop.js';
import { backendOption, numberOption } from './options.js';
import { percentile } from './percentile.js';
import { coreBusyPercent, coreTicks, processTree, treeCpuMs, treeRssMb } from './proc-stats.js';

const { values: opts } = parseArgs({
  options: {
    'closed-loop': { type: 'boolean', default: true },
    backend: { type: 'string', default: 'postgres' },
    concurrency: { type: 'string', default: '1,10,100,500' },
    repeat: { type: 'string', default: '1' },
    ramp: { type: 'string', default: '1' },
    warmup: { type: 'string', default: '3' },
    duration: { type: 'string', default: '20' },
    timeout: { type: 'string', default: '60' },
    tokens: { type: 'string', default: '200' },
    ttft: { type: 'string', default: '50' },
    delay: { type: 'string', default: '10' },
    profile: { type: 'boolean', default: false },
    'no-pin': { type: 'boolean', default: false },
    'json-only': { type: 'boolean', default: false },
    timings: { type: 'boolean', default: false },
    'credits-per-1k': { type: 'string', default: '0' },
  },
});

const BACKEND = backendOption(opts.backend);

const LEVELS = opts
  .concurrency!.split(',')
  .map((level) => numberOption('--concurrency', level, { min: 1, integer: true }));
const REPEAT = numberOption('--repeat', opts.repeat!, { min: 1, integer: true });
const SETTINGS = {
  rampMs: numberOption('--ramp', opts.ramp!) * 1000,
  warmupMs: numberOption('--warmup', opts.warmup!) * 1000,
  measureMs: numberOption('--duration', opts.duration!, { min: 1 }) * 1000,
  timeoutMs: numberOption('--timeout', opts.timeout!, { min: 1 }) * 1000,
  chatEvery: 10,
  recordReplies: opts.timings === true,
};
const MODEL = {
  tokens: numberOption('--tokens', opts.tokens!, { min: 1, integer: true }),
  ttftMs: numberOption('--ttft', opts.ttft!),
  delayMs: numberOption('--delay', opts.delay!),
};
/**
 * The model's price in credits per 1,000 input and output tokens. At 0 (the default, as bootstrap
 * leaves it) a turn writes a ledger row and leaves the organization's balance alone; priced, every
 * turn also updates the organization's row, as in a deployment that charges.
 */
const CREDITS_PER_1K = numberOption('--credits-per-1k', opts['credits-per-1k']!);
const PIN = !opts['no-pin'];
/** How long the fake model takes for one reply: no worker can cycle faster. */
const MODEL_REPLY_MS = MODEL.ttftMs + MODEL.tokens * MODEL.delayMs;
/**
 * Direct's mean cycle above the model's reply by more than this share means the generator and the
 * fake model could not keep up on their core: direct queued too, and is no baseline at that level.
 * A free core 0 keeps it within 0.6 % (bench/README.md, Session 21).
 */
const DIRECT_SATURATED_ABOVE = 0.02;
const PROFILE_DIR = path.join(ROOT, 'bench', 'profiles');
const RESULTS_DIR = path.join(ROOT, 'bench', 'results');

const log = (...args: unknown[]) => {
  if (!opts['json-only']) console.error(...args);
};

const round = (n: number, digits = 1) => Math.round(n * 10 ** digits) / 10 ** digits;

function median(values: number[]): number {
  const finite = values.filter(Number.isFinite);
  if (finite.length === 0) return Number.NaN;
  const sorted = [...finite].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

interface PhaseFigures {
  /** p50 and p99 are the issue's; p90, p95 and max show the tail's shape (JSON only). */
  ttft_ms: { p50: number; p99: number; p90: number; p95: number; max: number };
  replies: number;
  requests_per_second: number;
  /**
   * C divided by the workers' mean cycle in the measured phase (`LoopResult.cycleMs`): the rate the
   * loop sustains. `requests_per_second` counts the replies ending in the phase, which depends on
   * where the workers' waves fall against its ends (bench/README.md, "Session 20").
   */
  sustained_requests_per_second: number;
  /** The workers' cycle: one request's sending to their next, a new chat's creation included. */
  cycle_ms: { p50: number; p99: number; mean: number };
  errors: number;
  error_kinds: Record<string, number>;
  drain_ms: number;
  /** Busy % of each core during the measured phase (everything on the machine, not only the bench). */
  core_busy_percent: number[];
  /** This process (the load generator) and the fake model, CPU % of one core during the phase. */
  generator_cpu_percent: number;
  fake_model_cpu_percent: number;
}

interface LevelFigures {
  concurrency: number;
  direct: PhaseFigures;
  service: PhaseFigures & {
    cpu_ms_per_reply: number;
    /** The service tree's CPU during the phase, % of one core: how much of core 1 it actually got. */
    cpu_percent: number;
    /** PostgreSQL's backends for the run's database per reply (not in the service's tree); null on PGlite. */
    postgres_cpu_ms_per_reply: number | null;
    rss_max_mb: number;
    /** The measured phase on CLOCK_MONOTONIC (µs), as in a .cpuprofile: see bench/profile-summary.ts. */
    window_monotonic_us: [number, number];
  };
  plus_ttft_ms: { p50: number; p99: number };
  req_s_ratio: number;
  /** Service over direct, of `sustained_requests_per_second`. */
  sustained_ratio: number;
  /** Direct's cycle was more than `DIRECT_SATURATED_ABOVE` over the model's reply (in any repeat). */
  direct_saturated: boolean;
}

const monotonicUs = () => Number(process.hrtime.bigint() / 1000n);

async function measurePhase(
  target: LoopTarget,
  concurrency: number,
  fakePid: number,
  servicePid: number | null,
  databaseName: string | null = null,
): Promise<{
  figures: PhaseFigures;
  result: LoopResult;
  cpuMs: number;
  /** CPU of the run database's PostgreSQL backends in the measured phase; null on PGlite or direct. */
  postgresCpuMs: number | null;
  rssMaxMb: number;
  window: [number, number];
}> {
  let cores = coreTicks();
  let ownCpu = process.cpuUsage();
  let fakeCpu = treeCpuMs([fakePid]);
  let serviceCpu = 0;
  let tree: number[] = [];
  let rssMax = 0;
  let sampler: NodeJS.Timeout | undefined;
  const window: [number, number] = [0, 0];
  const figures = { cpuMs: 0, corePct: [] as number[], ownPct: 0, fakePct: 0 };
  // PostgreSQL's backends, sampled at the phase's ends (their pids are read with one query: the
  // few milliseconds it takes are nothing against 20 s).
  let databaseBefore: Promise<DatabaseSample | null> = Promise.resolve(null);
  let databaseAfter: Promise<DatabaseSample | null> = Promise.resolve(null);
  const result = await runClosedLoop(
    target,
    { ...SETTINGS, concurrency },
    {
      onMeasureStart() {
        window[0] = monotonicUs();
        cores = coreTicks();
        ownCpu = process.cpuUsage();
        fakeCpu = treeCpuMs([fakePid]);
        databaseBefore = sampleDatabase(databaseName);
        if (servicePid !== null) {
          tree = processTree(servicePid);
          serviceCpu = treeCpuMs(tree);
          rssMax = treeRssMb(tree);
          sampler = setInterval(() => {
            tree = processTree(servicePid);
            rssMax = Math.max(rssMax, treeRssMb(tree));
          }, 500);
        }
      },
      onMeasureEnd() {
        window[1] = monotonicUs();
        databaseAfter = sampleDatabase(databaseName);
        if (servicePid !== null) {
          clearInterval(sampler);
          tree = processTree(servicePid);
          figures.cpuMs = treeCpuMs(tree) - serviceCpu;
          rssMax = Math.max(rssMax, treeRssMb(tree));
        }
        const seconds = (window[1] - window[0]) / 1e6;
        const own = process.cpuUsage(ownCpu);
        figures.ownPct = round((own.user + own.system) / 1e4 / seconds);
        figures.fakePct = round((treeCpuMs([fakePid]) - fakeCpu) / 10 / seconds);
        figures.corePct = coreBusyPercent(cores, coreTicks());
      },
    },
  );
  const seconds = (result.windowEnd - result.windowStart) / 1000;
  const cycleMean = result.cycleMs.reduce((a, b) => a + b, 0) / result.cycleMs.length;
  const database = databaseDelta(await databaseBefore, await databaseAfter);
  return {
    figures: {
      ttft_ms: {
        p50: round(percentile(result.ttftMs, 50)),
        p99: round(percentile(result.ttftMs, 99)),
        p90: round(percentile(result.ttftMs, 90)),
        p95: round(percentile(result.ttftMs, 95)),
        max: round(percentile(result.ttftMs, 100)),
      },
      replies: result.replies,
      requests_per_second: round(result.replies / seconds),
      sustained_requests_per_second: round((concurrency * 1000) / cycleMean),
      cycle_ms: {
        p50: round(percentile(result.cycleMs, 50)),
        p99: round(percentile(result.cycleMs, 99)),
        mean: round(cycleMean),
      },
      errors: Object.values(result.errors).reduce((a, b) => a + b, 0),
      error_kinds: result.errors,
      drain_ms: Math.round(result.drainMs),
      core_busy_percent: figures.corePct,
      generator_cpu_percent: figures.ownPct,
      fake_model_cpu_percent: figures.fakePct,
    },
    result,
    cpuMs: figures.cpuMs,
    postgresCpuMs: database?.backendCpuMs ?? null,
    rssMaxMb: rssMax,
    window,
  };
}

async function measureLevel(
  concurrency: number,
  modelPort: number,
  servicePort: number,
  key: string,
  projectId: number,
  fakePid: number,
  servicePid: number,
  databaseName: string | null,
): Promise<{ figures: LevelFigures; replies: { direct: ReplyTiming[]; service: ReplyTiming[] } }> {
  const direct: LoopTarget = {
    name: 'direct',
    port: modelPort,
    headers: { 'content-type': 'application/json' },
    markers: DIRECT_MARKERS,
    body: JSON.stringify({
      model: 'bench',
      stream: true,
      stream_options: { include_usage: true },
      messages: [{ role: 'user', content: 'Hello there' }],
    }),
    newConversation: async () => '/v1/chat/completions',
  };
  const service: LoopTarget = {
    name: 'service',
    port: servicePort,
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
    markers: SERVICE_MARKERS,
    body: JSON.stringify({ content: 'Hello there', stream: true }),
    newConversation: async (client) => {
      const body = await postJson(
        client,
        servicePort,
        '/api/v2/chats',
        key,
        { project_id: projectId },
        SETTINGS.timeoutMs,
      );
      return `/api/v2/chats/${body.response.chat.id}/messages`;
    },
  };
  log(`C=${concurrency}: direct...`);
  const d = await measurePhase(direct, concurrency, fakePid, null);
  log(`C=${concurrency}: service...`);
  const s = await measurePhase(service, concurrency, fakePid, servicePid, databaseName);
  const figures: LevelFigures = {
    concurrency,
    direct: d.figures,
    service: {
      ...s.figures,
      cpu_ms_per_reply: s.result.replies > 0 ? round(s.cpuMs / s.result.replies) : Number.NaN,
      cpu_percent: round((s.cpuMs / (s.result.windowEnd - s.result.windowStart)) * 100),
      postgres_cpu_ms_per_reply:
        s.postgresCpuMs !== null && s.result.replies > 0 ? round(s.postgresCpuMs / s.result.replies) : null,
      rss_max_mb: Math.round(s.rssMaxMb),
      window_monotonic_us: s.window,
    },
    plus_ttft_ms: {
      p50: round(s.figures.ttft_ms.p50 - d.figures.ttft_ms.p50),
      p99: round(s.figures.ttft_ms.p99 - d.figures.ttft_ms.p99),
    },
    req_s_ratio: round(s.figures.requests_per_second / d.figures.requests_per_second, 2),
    // C / mean cycle on both sides: the ratio of the cycles (unrounded by the req/s figures).
    sustained_ratio: round(d.figures.cycle_ms.mean / s.figures.cycle_ms.mean, 3),
    direct_saturated: d.figures.cycle_ms.mean > MODEL_REPLY_MS * (1 + DIRECT_SATURATED_ABOVE),
  };
  return { figures, replies: { direct: d.result.replyTimings, service: s.result.replyTimings } };
}

/** The median of every figure over the repeats (error counts too); error kinds are summed. */
function medianOf(runs: LevelFigures[]): LevelFigures {
  if (runs.length === 1) return runs[0];
  const merge = (values: unknown[]): unknown => {
    const first = values[0];
    if (typeof first === 'number') return round(median(values as number[]), 2);
    if (Array.isArray(first)) return first.map((_, i) => merge(values.map((v) => (v as unknown[])[i])));
    if (first && typeof first === 'object') {
      const keys = new Set(values.flatMap((v) => Object.keys(v as object)));
      const out: Record<string, unknown> = {};
      for (const k of keys) {
        const column = values.map((v) => (v as Record<string, unknown>)[k] ?? 0);
        out[k] = merge(column);
      }
      return out;
    }
    return first;
  };
  const merged = merge(runs) as LevelFigures;
  merged.direct_saturated = runs.some((run) => run.direct_saturated);
  for (const phase of ['direct', 'service'] as const) {
    merged[phase].error_kinds = {};
    for (const run of runs)
      for (const [kind, n] of Object.entries(run[phase].error_kinds))
        merged[phase].error_kinds[kind] = (merged[phase].error_kinds[kind] ?? 0) + n;
  }
  return merged;
}

/** The median error count, and with repeats the total over all of them when it differs (not hidden by the median). */
function errorCell(phase: PhaseFigures): string {
  const total = Object.values(phase.error_kinds).reduce((a, b) => a + b, 0);
  return REPEAT > 1 && total !== phase.errors
    ? `${phase.errors} (${total} in ${REPEAT} runs)`
    : String(phase.errors);
}

function table(levels: LevelFigures[]): string {
  const rows = [
    '| C | TTFT direct p50 / p99 ms | TTFT service p50 / p99 ms | +TTFT p50 / p99 ms | req/s direct | req/s service | req/s ratio | errors direct / service | CPU-ms/reply | RSS max MB |',
    '|---|---|---|---|---|---|---|---|---|---|',
  ];
  for (const l of levels) {
    rows.push(
      `| ${l.concurrency} | ${l.direct.ttft_ms.p50} / ${l.direct.ttft_ms.p99} | ${l.service.ttft_ms.p50} / ${l.service.ttft_ms.p99} | ${l.plus_ttft_ms.p50} / ${l.plus_ttft_ms.p99} | ${l.direct.requests_per_second} | ${l.service.requests_per_second} | ${l.req_s_ratio} | ${errorCell(l.direct)} / ${errorCell(l.service)} | ${l.service.cpu_ms_per_reply} | ${l.service.rss_max_mb} |`,
    );
  }
  return rows.join('\n');
}

function conditions(levels: LevelFigures[]): string {
  const rows = [
    '| C | direct: core 0 / core 1 busy % | direct: generator / fake model CPU % | service: core 0 / core 1 busy % | service: generator / fake model / service CPU % | PostgreSQL CPU-ms/reply | service drain ms | service errors by kind (all runs) | cycle mean ms direct / service | sustained req/s direct / service (ratio) |',
    '|---|---|---|---|---|---|---|---|---|---|',
  ];
  for (const l of levels) {
    const kinds = Object.entries(l.service.error_kinds)
      .map(([k, n]) => `${k}: ${n}`)
      .join(', ');
    rows.push(
      `| ${l.concurrency} | ${l.direct.core_busy_percent.slice(0, 2).join(' / ')} | ${l.direct.generator_cpu_percent} / ${l.direct.fake_model_cpu_percent} | ${l.service.core_busy_percent.slice(0, 2).join(' / ')} | ${l.service.generator_cpu_percent} / ${l.service.fake_model_cpu_percent} / ${l.service.cpu_percent} | ${l.service.postgres_cpu_ms_per_reply ?? '–'} | ${l.service.drain_ms} | ${kinds || '–'} | ${l.direct.cycle_ms.mean} / ${l.service.cycle_ms.mean} | ${l.direct.sustained_requests_per_second} / ${l.service.sustained_requests_per_second} (${l.sustained_ratio}) |`,
    );
  }
  return rows.join('\n');
}

/** A line for each level whose direct loop could not keep up with the model (`direct_saturated`). */
function saturationNotes(levels: LevelFigures[]): string {
  return levels
    .filter((l) => l.direct_saturated)
    .map(
      (l) =>
        `C=${l.concurrency}: direct's mean cycle was more than ${DIRECT_SATURATED_ABOVE * 100} % above the ` +
        `model's reply (${MODEL_REPLY_MS} ms) in at least one run (${l.direct.cycle_ms.mean} ms): core 0 (the generator ` +
        `and the fake model, ${l.direct.core_busy_percent[0]} % busy) could not keep up, so direct queued too and its ` +
        `ratios are no baseline here. The service's cycle against the model's: ` +
        `${l.service.cycle_ms.mean} / ${MODEL_REPLY_MS} ms.`,
    )
    .join('\n');
}

/** Sets both prices of the organization's default model configuration (`--credits-per-1k`). */
async function priceDefaultModel(port: number, key: string, credits: number): Promise<void> {
  const base = `http://127.0.0.1:${port}/api/v1/model_configurations`;
  const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
  const list = await fetch(base, { headers });
  if (!list.ok) throw new Error(`listing the models failed: ${list.status} ${await list.text()}`);
  const { model_configurations: models } = (await list.json()) as {
    model_configurations: { id: number; is_default: boolean }[];
  };
  const model = models.find((m) => m.is_default);
  if (!model) throw new Error('the bench organization has no default model configuration');
  const updated = await fetch(`${base}/${model.id}`, {
    method: 'PUT',
    headers,
    body: JSON.stringify({ credits_per_1k_input_tokens: credits, credits_per_1k_output_tokens: credits }),
  });
  if (!updated.ok) throw new Error(`pricing the model failed: ${updated.status} ${await updated.text()}`);
}

async function main() {
  pinSelf(PIN);
  const loadBefore = os.loadavg();
  const fake = await startFakeModel(PIN, MODEL);
  const db = await prepareDatabase(BACKEND, 'scriptorium_bench');
  const servicePort = await freeServicePort();
  const env = serviceEnv(db.env, fake.port, servicePort);
  const stamp = new Date().toISOString().replace(/[:.]/g, '-');
  const profileDir = opts.profile ? path.join(PROFILE_DIR, `service-${BACKEND}-${stamp}`) : null;
  const timingsFile = opts.timings ? path.join(RESULTS_DIR, `timings-${BACKEND}-${stamp}.jsonl`) : null;
  if (timingsFile) mkdirSync(RESULTS_DIR, { recursive: true });
  let service: ChildProcess | null = null;
  try {
    const keys = bootstrap(env);
    service = await startService(PIN, env, profileDir);
    if (CREDITS_PER_1K > 0) await priceDefaultModel(servicePort, keys.organization_key, CREDITS_PER_1K);
    const runs: LevelFigures[][] = LEVELS.map(() => []);
    for (let r = 0; r < REPEAT; r++) {
      for (const [i, level] of LEVELS.entries()) {
        if (REPEAT > 1) log(`repeat ${r + 1}/${REPEAT}`);
        const { figures, replies } = await measureLevel(
          level,
          fake.port,
          servicePort,
          keys.organization_key,
          keys.project_id,
          fake.child.pid!,
          service.pid!,
          db.name,
        );
        runs[i].push(figures);
        // One line per measured reply (`--timings`), direct's and the service's, for bench/timings-summary.ts.
        if (timingsFile)
          appendFileSync(
            timingsFile,
            (['direct', 'service'] as const)
              .flatMap((target) =>
                replies[target].map(
                  (reply) => `${JSON.stringify({ concurrency: level, repeat: r + 1, target, ...reply })}\n`,
                ),
              )
              .join(''),
          );
        log(table([figures]));
        const note = saturationNotes([figures]);
        if (note) log(note);
      }
    }
    const levels = runs.map(medianOf);
    const results = {
      method: 'closed-loop (issue 14)',
      date: new Date().toISOString(),
      machine: { cpus: os.cpus().length, model: os.cpus()[0]?.model, node: process.version },
      backend: BACKEND,
      pinned: PIN,
      load_average: {
        before: loadBefore.map((n) => round(n, 2)),
        after: os.loadavg().map((n) => round(n, 2)),
      },
      settings: { ...SETTINGS, model: MODEL, levels: LEVELS, repeat: REPEAT },
      command: `npm run bench -- ${process.argv.slice(2).join(' ')}`,
      levels,
      runs,
    };
    mkdirSync(RESULTS_DIR, { recursive: true });
    const json = `${JSON.stringify(results, null, 2)}\n`;
    writeFileSync(path.join(RESULTS_DIR, `closed-loop-${BACKEND}-${stamp}.json`), json);
    writeFileSync(path.join(RESULTS_DIR, `latest-closed-loop-${BACKEND}.json`), json);
    if (profileDir) {
      // The measured service phases, for bench/profile-summary.ts to keep only their samples.
      const windows = runs.flat().map((l) => ({
        concurrency: l.concurrency,
        window_monotonic_us: l.service.window_monotonic_us,
        replies: l.service.replies,
        cpu_ms_per_reply: l.service.cpu_ms_per_reply,
      }));
      mkdirSync(profileDir, { recursive: true });
      writeFileSync(path.join(profileDir, 'windows.json'), `${JSON.stringify(windows)}\n`);
    }
    if (opts['json-only']) {
      console.log(json);
    } else {
      console.log(
        `\nClosed loop, ${BACKEND}, ${MODEL.tokens} tokens ${MODEL.delayMs} ms apart after ${MODEL.ttftMs} ms; ` +
          `ramp ${SETTINGS.rampMs / 1000} s, warm-up ${SETTINGS.warmupMs / 1000} s, measured ${SETTINGS.measureMs / 1000} s` +
          `${REPEAT > 1 ? `, median of ${REPEAT} repeats` : ''}` +
          `${CREDITS_PER_1K > 0 ? `; the model priced at ${CREDITS_PER_1K} credits per 1k tokens` : ''}; load average before ${results.load_average.before.join(' ')}, after ${results.load_average.after.join(' ')}\n`,
      );
      console.log(table(levels));
      console.log(`\n${conditions(levels)}`);
      const notes = saturationNotes(levels);
      if (notes) console.log(`\n${notes}`);
    }
  } finally {
    // SIGTERM lets the service exit normally, which is when --cpu-prof writes its profile.
    if (service) await stopChild(service);
    await stopChild(fake.child);
    await db.cleanup();
    if (profileDir) {
      const relative = path.relative(ROOT, profileDir);
      log(`profiles: ${relative}/\nsummary: npx tsx bench/profile-summary.ts ${relative}`);
    }
    if (timingsFile) {
      const relative = path.relative(ROOT, timingsFile);
      log(`reply timings: ${relative}\nsummary: npx tsx bench/timings-summary.ts ${relative}`);
    }
  }
}

await main();
