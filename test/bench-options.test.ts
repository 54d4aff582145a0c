/**
 * The bench's entry points (and bench/lean-micro.ts) refuse a mistyped option at once
 * (bench/options.ts): a typo in `--concurrency` or `--repeat` would otherwise run minutes of bench
 * on NaN and print a table of it.
 */
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = path.resolve(import.meta.dirname, '..');
const TSX = path.join(ROOT, 'node_modules', '.bin', 'tsx');

function bench(script: string, ...args: string[]) {
  // A check that no longer stops the run would start a whole bench: the timeout fails it instead.
  const run = spawnSync(TSX, [path.join(ROOT, 'bench', script), ...args], {
    cwd: ROOT,
    encoding: 'utf8',
    timeout: 30_000,
  });
  return { status: run.status, stderr: run.stderr };
}

describe('bench options', () => {
  it.each([
    [
      'closed-loop.ts',
      ['--concurrency', '10,5x0'],
      '--concurrency must be a whole number, 1 or more, got "5x0"',
    ],
    ['closed-loop.ts', ['--repeat', '0'], '--repeat must be a whole number, 1 or more, got "0"'],
    ['closed-loop.ts', ['--duration', ''], '--duration must be a number, 1 or more, got ""'],
    ['closed-loop.ts', ['--credits-per-1k=-1'], '--credits-per-1k must be a number, 0 or more, got "-1"'],
    ['closed-loop.ts', ['--backend', 'pg'], '--backend must be postgres or pglite, got "pg"'],
    ['rates.ts', ['--connections', '2.5'], '--connections must be a whole number, 1 or more, got "2.5"'],
    ['burst.ts', ['--levels', '1,ten'], '--levels must be a whole number, 1 or more, got "ten"'],
    ['lean-micro.ts', ['.', '100', '0'], 'seconds (the third argument) must be a number, 1 or more, got "0"'],
  ])('%s %j stops with exit code 2 and says what was wrong', (script, args, message) => {
    const run = bench(script, ...args);
    expect(run.status).toBe(2);
    expect(run.stderr).toContain(message);
  });
});
