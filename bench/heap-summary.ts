/**
 * What allocates: reads a `.heapprofile` written by `bench/heap-sampling.mjs` and prints the bytes
 * sampled by allocating function (self), then by the nearest frame in the service's own code
 * (`dist/`), so allocations inside Node or a library are charged to the service code that
 * caused them. With `--stacks NAME`, prints the heaviest call stacks ending in functions whose
 * label starts with NAME instead.
 *
 *   npx tsx bench/heap-summary.ts heap-<time>.heapprofile [--top 30] [--stacks "Map "]
 */
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';

interface HeapNode {
  callFrame: { functionName: string; url: string; lineNumber: number };
  selfSize: number;
  children: HeapNode[];
}

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: { top: { type: 'string', default: '30' }, stacks: { type: 'string' } },
});
if (positionals.length !== 1) {
  console.error('usage: npx tsx bench/heap-summary.ts FILE.heapprofile [--top N] [--stacks NAME]');
  process.exit(2);
}
const profile = JSON.parse(readFileSync(positionals[0]!, 'utf8')) as { head: HeapNode };
const top = Number(values.top);

function label(frame: HeapNode['callFrame']): string {
  const url = frame.url.replace(/^.*\/(dist|node_modules)\//, '$1/').replace(/^node:/, '');
  return `${frame.functionName || '(anonymous)'} ${url}:${frame.lineNumber + 1}`;
}

const self = new Map<string, number>();
const ours = new Map<string, number>();
const stacks = new Map<string, number>();
let total = 0;
const add = (map: Map<string, number>, key: string, bytes: number) =>
  map.set(key, (map.get(key) ?? 0) + bytes);

function walk(node: HeapNode, stack: HeapNode['callFrame'][]): void {
  const frames = [...stack, node.callFrame];
  if (node.selfSize > 0) {
    total += node.selfSize;
    const here = label(node.callFrame);
    add(self, here, node.selfSize);
    const nearest = frames.findLast((f) => f.url.includes('/dist/'));
    add(ours, nearest ? label(nearest) : '(no service frame)', node.selfSize);
    if (values.stacks !== undefined && here.startsWith(values.stacks))
      add(stacks, frames.slice(-9).map(label).reverse().join('\n    <- '), node.selfSize);
  }
  for (const child of node.children) walk(child, frames);
}
walk(profile.head, []);

const rows = (map: Map<string, number>) =>
  [...map]
    .sort((a, b) => b[1] - a[1])
    .slice(0, top)
    .map(
      ([key, bytes]) =>
        `${((bytes / total) * 100).toFixed(1).padStart(5)} %  ${(bytes / 1e6).toFixed(1).padStart(8)} MB  ${key}`,
    )
    .join('\n');

console.log(`sampled: ${(total / 1e6).toFixed(1)} MB`);
if (values.stacks !== undefined) {
  console.log(`\nheaviest stacks ending in "${values.stacks}":\n${rows(stacks)}`);
} else {
  console.log(`\nby allocating function:\n${rows(self)}`);
  console.log(`\nby nearest service frame (dist/):\n${rows(ours)}`);
}
