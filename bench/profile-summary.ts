/**
 * Where the service's CPU goes: reads the V8 `.cpuprofile` files of a directory written by
 * `npm run bench -- --closed-loop --profile` (one per JavaScript thread: the main one and tsx's
 * module-loader thread), or one file, and prints self time grouped by category, by package or source
 * file, and the top functions. When the directory holds the bench's `windows.json`, only the samples
 * taken during the measured service phases count (not start-up, migrations or the direct phases),
 * and times are also given per reply.
 *
 *   npx tsx bench/profile-summary.ts bench/profiles/<run> [--top 25] [--concurrency 100] [--whole]
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';

interface CallFrame {
  functionName: string;
  url: string;
  lineNumber: number;
  columnNumber: number;
}

interface ProfileNode {
  id: number;
  callFrame: CallFrame;
}

interface CpuProfile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

interface Window {
  concurrency: number;
  window_monotonic_us: [number, number];
  replies: number;
  cpu_ms_per_reply?: number;
}

const ROOT = path.resolve(import.meta.dirname, '..');

/** Native bindings of stream handles: the syscalls of socket writes and reads. */
const SOCKET_NATIVES = new Set([
  'writev',
  'writeBuffer',
  'writeUtf8String',
  'writeLatin1String',
  'writeAsciiString',
  'readStart',
  'readStop',
  'shutdown',
]);

/** The package (node_modules), source file (the repository) or Node.js module a frame belongs to. */
export function groupOf(frame: CallFrame): string {
  const { url, functionName } = frame;
  if (url === '') {
    if (functionName.startsWith('(')) return functionName;
    return SOCKET_NATIVES.has(functionName) ? '(native) socket I/O' : '(native/builtin)';
  }
  if (url.startsWith('node:')) return url;
  const file = url.startsWith('file://') ? decodeURIComponent(new URL(url).pathname) : url;
  const modules = file.lastIndexOf('/node_modules/');
  if (modules !== -1) {
    const parts = file.slice(modules + '/node_modules/'.length).split('/');
    return parts[0].startsWith('@') ? `${parts[0]}/${parts[1]}` : parts[0];
  }
  return path.isAbsolute(file) ? path.relative(ROOT, file) : file;
}

/** Coarse buckets for the "where the CPU goes" table; first match wins. */
const CATEGORIES: [string, (group: string) => boolean][] = [
  ['idle', (g) => g === '(idle)'],
  ['garbage collection', (g) => g === '(garbage collector)'],
  ['V8/native, unattributed', (g) => g === '(program)' || g === '(native/builtin)' || g === '(root)'],
  ['AI SDK (ai, @ai-sdk/*)', (g) => g === 'ai' || g.startsWith('@ai-sdk/')],
  ['zod', (g) => g === 'zod'],
  ['web streams (node:internal/webstreams)', (g) => g.startsWith('node:internal/webstreams')],
  ['undici / fetch', (g) => g === 'undici' || g.startsWith('node:internal/deps/undici')],
  ['pg driver (pg, pg-protocol, pg-pool)', (g) => /^pg(-|$)/.test(g) || g === 'postgres-array'],
  ['PGlite', (g) => g.startsWith('@electric-sql/')],
  ['drizzle-orm', (g) => g === 'drizzle-orm'],
  ['pg-boss', (g) => g === 'pg-boss'],
  [
    'Fastify and its plugins',
    (g) =>
      g === 'fastify' ||
      g.startsWith('@fastify/') ||
      [
        'find-my-way',
        'avvio',
        'fast-json-stringify',
        'light-my-request',
        'pino',
        'ajv',
        'secure-json-parse',
      ].includes(g),
  ],
  [
    'Node.js HTTP, net, streams, timers',
    (g) =>
      g === '(native) socket I/O' ||
      /^node:(internal\/)?(http|_http|net|stream|streams|timers|events|buffer|dns|tls)/.test(g),
  ],
  ['other Node.js internals', (g) => g.startsWith('node:')],
  ['service: src/modules/chats', (g) => g.startsWith('src/modules/chats/')],
  ['service: src/modules/streams', (g) => g.startsWith('src/modules/streams/')],
  ['service: src/llm', (g) => g.startsWith('src/llm/')],
  ['service: src/http', (g) => g.startsWith('src/http/')],
  ['service: src/db', (g) => g.startsWith('src/db/')],
  ['service: other src/', (g) => g.startsWith('src/')],
  ['tsx loader', (g) => g === 'tsx' || g === 'esbuild'],
  ['other packages', () => true],
];

const categoryOf = (group: string) => CATEGORIES.find(([, test]) => test(group))![0];

interface Totals {
  ms: number;
  functions: Map<string, { ms: number; group: string }>;
  groups: Map<string, number>;
  categories: Map<string, number>;
}

export const emptyTotals = (): Totals => ({
  ms: 0,
  functions: new Map(),
  groups: new Map(),
  categories: new Map(),
});

/** Adds the profile's self times (of samples inside `windows`, or all) to `totals`; returns its ms. */
export function summarise(profile: CpuProfile, windows: [number, number][] | null, totals: Totals): number {
  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  const before = totals.ms;
  const groupCache = new Map<number, { group: string; category: string; fn: string }>();
  let t = profile.startTime;
  for (let i = 0; i < profile.samples.length; i++) {
    t += profile.timeDeltas[i];
    // A sample stands for the time until the next one.
    const ms = (profile.timeDeltas[i + 1] ?? 0) / 1000;
    if (windows && !windows.some(([from, to]) => t >= from && t <= to)) continue;
    let info = groupCache.get(profile.samples[i]);
    if (!info) {
      const frame = byId.get(profile.samples[i])!.callFrame;
      const group = groupOf(frame);
      const where = frame.url ? `${group}:${frame.lineNumber + 1}` : group;
      info = { group, category: categoryOf(group), fn: `${frame.functionName || '(anonymous)'} ${where}` };
      groupCache.set(profile.samples[i], info);
    }
    totals.ms += ms;
    totals.groups.set(info.group, (totals.groups.get(info.group) ?? 0) + ms);
    totals.categories.set(info.category, (totals.categories.get(info.category) ?? 0) + ms);
    const fn = totals.functions.get(info.fn);
    if (fn) fn.ms += ms;
    else totals.functions.set(info.fn, { ms, group: info.group });
  }
  return totals.ms - before;
}

function main() {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      top: { type: 'string', default: '25' },
      concurrency: { type: 'string' },
      whole: { type: 'boolean', default: false },
    },
  });
  const target = positionals[0];
  if (!target) {
    console.error(
      'usage: tsx bench/profile-summary.ts DIR|FILE.cpuprofile [--top 25] [--concurrency C] [--whole]',
    );
    process.exit(2);
  }
  const isDir = statSync(target).isDirectory();
  const files = isDir
    ? readdirSync(target)
        .filter((name) => name.endsWith('.cpuprofile'))
        .map((name) => path.join(target, name))
    : [target];
  if (files.length === 0) throw new Error(`no .cpuprofile in ${target}`);
  const sidecar = path.join(isDir ? target : path.dirname(target), 'windows.json');
  let windows: Window[] | null = null;
  if (!values.whole && existsSync(sidecar)) {
    windows = JSON.parse(readFileSync(sidecar, 'utf8')) as Window[];
    if (values.concurrency) windows = windows.filter((w) => w.concurrency === Number(values.concurrency));
    if (windows.length === 0) throw new Error(`no measured phase at C=${values.concurrency} in ${sidecar}`);
  }
  const totals = emptyTotals();
  const threads: string[] = [];
  for (const file of files) {
    const profile = JSON.parse(readFileSync(file, 'utf8')) as CpuProfile;
    const idleBefore = totals.categories.get('idle') ?? 0;
    const ms = summarise(profile, windows ? windows.map((w) => w.window_monotonic_us) : null, totals);
    const busyMs = ms - ((totals.categories.get('idle') ?? 0) - idleBefore);
    threads.push(
      `${path.basename(file)}: busy ${(busyMs / 1000).toFixed(2)} s of ${(ms / 1000).toFixed(1)} s`,
    );
  }
  const idle = totals.categories.get('idle') ?? 0;
  const busy = totals.ms - idle;
  const replies = windows?.reduce((sum, w) => sum + w.replies, 0) ?? 0;
  const perReply = (ms: number) => (replies > 0 ? (ms / replies).toFixed(2) : '–');
  const pct = (ms: number) => ((ms / busy) * 100).toFixed(1);
  const top = Number(values.top);

  const lines: string[] = [...threads, ''];
  lines.push(
    windows
      ? `Measured phases: ${windows.map((w) => `C=${w.concurrency}`).join(', ')}; ${replies} replies; ` +
          `${(totals.ms / 1000).toFixed(1)} s sampled, JavaScript threads busy ${(busy / 1000).toFixed(1)} s ` +
          `(${perReply(busy)} ms per reply; the bench measured ` +
          `${windows.map((w) => w.cpu_ms_per_reply ?? '?').join(', ')} CPU-ms per reply for the whole process tree, ` +
          'all threads)'
      : `Whole profile: ${(totals.ms / 1000).toFixed(1)} s sampled, JavaScript threads busy ${(busy / 1000).toFixed(1)} s`,
  );
  lines.push('', '| category | self ms | % of busy | ms per reply |', '|---|---|---|---|');
  for (const [name, ms] of [...totals.categories].sort((a, b) => b[1] - a[1])) {
    if (name === 'idle') continue;
    lines.push(`| ${name} | ${ms.toFixed(0)} | ${pct(ms)} | ${perReply(ms)} |`);
  }
  lines.push('', '| package / file | self ms | % of busy | ms per reply |', '|---|---|---|---|');
  for (const [name, ms] of [...totals.groups].sort((a, b) => b[1] - a[1]).slice(0, top)) {
    if (name === '(idle)') continue;
    lines.push(`| ${name} | ${ms.toFixed(0)} | ${pct(ms)} | ${perReply(ms)} |`);
  }
  lines.push('', '| function | package / file | self ms | % of busy |', '|---|---|---|---|');
  const functions = [...totals.functions].filter(([, f]) => f.group !== '(idle)');
  for (const [name, f] of functions.sort((a, b) => b[1].ms - a[1].ms).slice(0, top)) {
    lines.push(`| ${name.replaceAll('|', '\\|')} | ${f.group} | ${f.ms.toFixed(0)} | ${pct(f.ms)} |`);
  }
  console.log(lines.join('\n'));
}

main();
