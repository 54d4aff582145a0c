/**
 * Where a slow first token waited: reads the reply timings written by
 * `npm run bench -- --closed-loop --timings` (one JSON line per measured reply, direct's and the
 * service's: the client's TTFT and total, and for the service the `timing` of its `done` event)
 * and prints, per concurrency:
 *
 * - each worker's cycle (one request's send to the next's, a new chat's creation included) for
 *   direct and the service, and the rate the closed loop sustains, C divided by the mean cycle
 *   (Little's law). The bench's req/s counts the replies that end in the measured 20 s; with the
 *   workers moving in waves that count depends on where the waves fall against the window's ends
 *   (a 2.05 s reply loop counts 250 req/s, above the 243.9 it can sustain), so this rate is the
 *   steadier comparison;
 * - percentiles of the client's TTFT and of the service's own parts: `queued_ms` (arrival to the
 *   turn running), `overhead_ms` (what the service added before the first token),
 *   `model_first_token_ms` (model request to its first chunk's arrival), and the rest of the
 *   client's TTFT ("outside": before the service read the request and after it wrote the token:
 *   the event loop's backlog, the sockets, the generator's own core);
 * - the same parts for the slowest 1 % of first tokens;
 * - with the service started with bench/timing-probe.mjs, the whole reply in parts (the model's
 *   body as the service read it, the result's writing, the client's side);
 * - the load over time in slices (`--slice`, ms): requests sent, TTFT p50 / p99 and the parts'
 *   p99. A closed loop's workers move in near lockstep, so its load comes in waves; this shows
 *   whether the tail is the waves' crests.
 *
 *   npx tsx bench/timings-summary.ts bench/results/timings-<backend>-<time>.jsonl [--slice 500] [--concurrency 500]
 */
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import type { ReplyTiming } from './load-loop.js';
import { percentile } from './percentile.js';

type Line = ReplyTiming & { concurrency: number; repeat: number; target?: 'direct' | 'service' };

const { values: opts, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    slice: { type: 'string', default: '500' },
    concurrency: { type: 'string' },
  },
});
if (positionals.length !== 1) {
  console.error('usage: npx tsx bench/timings-summary.ts <timings.jsonl> [--slice 500] [--concurrency 500]');
  process.exit(2);
}

const all: Line[] = readFileSync(positionals[0]!, 'utf8')
  .split('\n')
  .filter((line) => line.trim() !== '')
  .map((line) => JSON.parse(line) as Line);
// Files written before direct's replies were kept hold the service's only, without `target`.
const targetOf = (line: Line) => line.target ?? 'service';
const lines = all.filter((line) => targetOf(line) === 'service');

const round = (n: number) => (Number.isFinite(n) ? Math.round(n * 10) / 10 : '–');

const mean = (values: number[]) =>
  values.length === 0 ? Number.NaN : values.reduce((a, b) => a + b, 0) / values.length;

/** The parts of one reply's TTFT; null for a reply without the service's timing. */
function parts(line: Line): Record<string, number> | null {
  const t = line.service;
  if (!t || typeof t.queued_ms !== 'number' || typeof t.overhead_ms !== 'number') return null;
  const model = typeof t.model_first_token_ms === 'number' ? t.model_first_token_ms : 0;
  return {
    ttft: line.ttft_ms,
    queued: t.queued_ms,
    overhead: t.overhead_ms,
    model_first_token: model,
    outside: line.ttft_ms - t.overhead_ms - model,
  };
}

/**
 * Each worker's cycles: from one request's sending to the next's, for consecutive messages of a
 * run (a new chat's creation falls in every `chatEvery`-th); a worker's last reply, with no next,
 * counts to its end (as `LoopResult.cycleMs`).
 */
function cyclesOf(replies: Line[]): number[] {
  const byWorker = new Map<string, Line[]>();
  for (const line of replies) {
    const key = `${line.repeat}:${line.worker}`;
    const own = byWorker.get(key);
    if (own) own.push(line);
    else byWorker.set(key, [line]);
  }
  const cycles: number[] = [];
  for (const own of byWorker.values()) {
    own.sort((a, b) => a.message - b.message);
    for (let i = 1; i < own.length; i++)
      if (own[i]!.message === own[i - 1]!.message + 1) cycles.push(own[i]!.sent_ms - own[i - 1]!.sent_ms);
    cycles.push(own.at(-1)!.total_ms);
  }
  return cycles;
}

const PARTS = ['ttft', 'queued', 'overhead', 'model_first_token', 'outside'] as const;

/**
 * The whole reply in parts, for a service started with bench/timing-probe.mjs (its `done` timing
 * then has `model_request_ms`, `first_chunk_ms` and `model_end_ms`), with direct's TTFT and body
 * beside them. The fake model sends its first chunk 50 ms after the request and its last 2,000 ms
 * after that, so a body above 2,000 is the model's lateness plus the service's reading late.
 */
function replyParts(level: number, replies: Line[]): void {
  const probed = replies.filter((l) => typeof l.service?.model_end_ms === 'number');
  if (probed.length === 0) {
    // The probe ran, but what it reads is gone (a renamed field of TurnTiming): say so.
    if (replies.some((l) => l.service !== null && 'model_end_ms' in l.service))
      console.log(
        "\nThe probe's parts are null in every reply: bench/timing-probe.mjs reads what TurnTiming no longer has.\n",
      );
    return;
  }
  const direct = all.filter((l) => l.concurrency === level && targetOf(l) === 'direct');
  const rows: [string, number[]][] = [
    ['direct: TTFT at the client', direct.map((l) => l.ttft_ms)],
    ['direct: first token to the end, at the client', direct.map((l) => l.total_ms - l.ttft_ms)],
    ['service: TTFT at the client', probed.map((l) => l.ttft_ms)],
    ['arrival to the model request', probed.map((l) => l.service!.model_request_ms!)],
    [
      'model request to its first chunk',
      probed.map((l) => l.service!.first_chunk_ms! - l.service!.model_request_ms!),
    ],
    [
      "first chunk to the model's end (the body, as read)",
      probed.map((l) => l.service!.model_end_ms! - l.service!.first_chunk_ms!),
    ],
    [
      "the model's end to the reply written (`turn_finish`)",
      probed.map((l) => l.service!.total_ms! - l.service!.model_end_ms!),
    ],
    [
      'outside the service (client total minus `total_ms`)',
      probed.map((l) => l.total_ms - l.service!.total_ms!),
    ],
    ['service: request to the end, at the client', probed.map((l) => l.total_ms)],
  ];
  console.log(`\nThe reply's parts (bench/timing-probe.mjs, ${probed.length} replies):\n`);
  console.log('| part, ms | mean | p50 | p90 | p99 |');
  console.log('|---|---|---|---|---|');
  for (const [name, values] of rows)
    console.log(
      `| ${name} | ${round(mean(values))} | ${round(percentile(values, 50))} | ${round(percentile(values, 90))} | ${round(percentile(values, 99))} |`,
    );
  console.log('');
}

const levels = [...new Set(lines.map((l) => l.concurrency))].filter(
  (c) => opts.concurrency === undefined || c === Number(opts.concurrency),
);
const sliceMs = Number(opts.slice);

for (const level of levels) {
  const replies = lines.filter((l) => l.concurrency === level);
  const split = replies.map(parts).filter((p): p is Record<string, number> => p !== null);
  const repeats = new Set(replies.map((l) => l.repeat)).size;
  console.log(
    `\n## C=${level}: ${replies.length} replies (${repeats} run${repeats === 1 ? '' : 's'}), ${split.length} with the service's timing\n`,
  );
  console.log('| cycle, ms | replies | p50 | p90 | p99 | mean | C / mean cycle, req/s |');
  console.log('|---|---|---|---|---|---|---|');
  const rates: Partial<Record<'direct' | 'service', number>> = {};
  for (const target of ['direct', 'service'] as const) {
    const own = all.filter((l) => l.concurrency === level && targetOf(l) === target);
    const cycles = cyclesOf(own);
    if (cycles.length === 0) continue;
    rates[target] = (level * 1000) / mean(cycles);
    console.log(
      `| ${target} | ${own.length} | ${round(percentile(cycles, 50))} | ${round(percentile(cycles, 90))} | ${round(percentile(cycles, 99))} | ${round(mean(cycles))} | ${round(rates[target]!)} |`,
    );
  }
  console.log(
    rates.direct && rates.service
      ? `\nRatio of the sustained rates (service / direct): ${(rates.service / rates.direct).toFixed(3)}\n`
      : '',
  );
  console.log('| part, ms | p50 | p90 | p99 | max | mean of the slowest 1 % of TTFTs |');
  console.log('|---|---|---|---|---|---|');
  const slowest = [...split]
    .sort((a, b) => b.ttft! - a.ttft!)
    .slice(0, Math.max(1, Math.floor(split.length / 100)));
  for (const part of PARTS) {
    const values = split.map((p) => p[part]!);
    console.log(
      `| ${part} | ${round(percentile(values, 50))} | ${round(percentile(values, 90))} | ${round(percentile(values, 99))} | ${round(percentile(values, 100))} | ${round(mean(slowest.map((p) => p[part]!)))} |`,
    );
  }
  replyParts(level, replies);
  // Slices of the measured phase (of the first run: the runs' clocks start afresh).
  const first = replies.filter((l) => l.repeat === Math.min(...replies.map((r) => r.repeat)));
  const bySlice = new Map<number, Line[]>();
  for (const line of first) {
    const slice = Math.floor(line.sent_ms / sliceMs);
    bySlice.set(slice, [...(bySlice.get(slice) ?? []), line]);
  }
  console.log(`\nBy time sent (first run, ${sliceMs} ms slices; p99 of each part):\n`);
  console.log(
    '| sent at s | requests | TTFT p50 | TTFT p99 | queued | overhead | model first token | outside |',
  );
  console.log('|---|---|---|---|---|---|---|---|');
  for (const slice of [...bySlice.keys()].sort((a, b) => a - b)) {
    const inSlice = bySlice.get(slice)!;
    const p = inSlice.map(parts).filter((x): x is Record<string, number> => x !== null);
    const p99 = (part: (typeof PARTS)[number]) =>
      round(
        percentile(
          p.map((x) => x[part]!),
          99,
        ),
      );
    console.log(
      `| ${round((slice * sliceMs) / 1000)} | ${inSlice.length} | ${round(
        percentile(
          inSlice.map((l) => l.ttft_ms),
          50,
        ),
      )} | ${round(
        percentile(
          inSlice.map((l) => l.ttft_ms),
          99,
        ),
      )} | ${p99('queued')} | ${p99('overhead')} | ${p99('model_first_token')} | ${p99('outside')} |`,
    );
  }
}
