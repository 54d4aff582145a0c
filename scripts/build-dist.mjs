/**
 * The service's JavaScript: every file of src/ transpiled by esbuild (the transform tsx applies
 * at run time, done once) into dist/, with src/'s other files (migrations) copied beside them.
 * `npm start`, `npm run cli` and `npm run worker` run dist/ (docs/decisions.md, "The start
 * command runs dist/").
 *
 *   node scripts/build-dist.mjs             build dist/ (the `build` script; `prepare` runs it)
 *   node scripts/build-dist.mjs --if-stale  build only if dist/ was not built from this src/
 *
 * Staleness is decided by content, not by time stamps: dist/.source-hash holds a SHA-256 of every
 * path and byte under src/, of tsconfig.json, of this file and of the esbuild version. Checking
 * reads about 2 MB and takes tens of milliseconds, so every start checks, and an edited, added or
 * removed source file (a `git pull`, a checkout, an edit without a build) never runs stale code.
 * Prints nothing on stdout (the CLI's `bootstrap --json` prints exactly one JSON object).
 */
import { createHash, randomBytes } from 'node:crypto';
import { cpSync, existsSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const SRC = path.join(ROOT, 'src');
const DIST = path.join(ROOT, 'dist');
const STAMP = '.source-hash';

/** Every file under `dir`, as paths relative to it, sorted (the same order on every machine). */
function filesOf(dir, prefix = '') {
  const out = [];
  for (const entry of readdirSync(path.join(dir, prefix), { withFileTypes: true })) {
    const rel = prefix ? `${prefix}/${entry.name}` : entry.name;
    if (entry.isDirectory()) out.push(...filesOf(dir, rel));
    else if (entry.isFile()) out.push(rel);
  }
  return out.sort();
}

function esbuildVersion() {
  return JSON.parse(readFileSync(path.join(ROOT, 'node_modules/esbuild/package.json'), 'utf8')).version;
}

function sourceHash(files) {
  const hash = createHash('sha256');
  hash.update(`esbuild ${esbuildVersion()}\0`);
  for (const file of [fileURLToPath(import.meta.url), path.join(ROOT, 'tsconfig.json')]) {
    hash.update(readFileSync(file)).update('\0');
  }
  for (const rel of files)
    hash
      .update(rel)
      .update('\0')
      .update(readFileSync(path.join(SRC, rel)))
      .update('\0');
  return hash.digest('hex');
}

function builtHash() {
  try {
    return readFileSync(path.join(DIST, STAMP), 'utf8').trim();
  } catch {
    return null;
  }
}

async function build(files, hash) {
  const { build: esbuild } = await import('esbuild');
  // Built beside dist/ and swapped in whole: a start that checks meanwhile sees the old complete
  // tree or the new one, and a concurrent build of the same sources loses the race harmlessly.
  const tmp = `${DIST}.tmp-${randomBytes(4).toString('hex')}`;
  try {
    const entries = files.filter((f) => f.endsWith('.ts') && !f.endsWith('.d.ts'));
    await esbuild({
      absWorkingDir: ROOT,
      entryPoints: entries.map((f) => `src/${f}`),
      outbase: 'src',
      outdir: tmp,
      bundle: false,
      format: 'esm',
      platform: 'node',
      // The oldest Node the service supports (package.json engines): the same output on every machine.
      target: 'node20',
      tsconfig: path.join(ROOT, 'tsconfig.json'),
      // Maps on disk only: Node reads them only with NODE_OPTIONS=--enable-source-maps (stack
      // traces in src/ terms when debugging); the service does not hold them in memory.
      sourcemap: 'linked',
      logLevel: 'warning',
    });
    for (const rel of files) {
      if (rel.endsWith('.ts')) continue;
      cpSync(path.join(SRC, rel), path.join(tmp, rel));
    }
    writeFileSync(path.join(tmp, STAMP), `${hash}\n`);
    const old = `${DIST}.old-${randomBytes(4).toString('hex')}`;
    if (existsSync(DIST)) renameSync(DIST, old);
    try {
      renameSync(tmp, DIST);
    } catch (err) {
      // Another build put its dist/ in place first; it is ours too if it was built from the same src/.
      if (builtHash() !== hash) throw err;
    }
    rmSync(old, { recursive: true, force: true });
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
}

const started = performance.now();
const files = filesOf(SRC);
const hash = sourceHash(files);
if (process.argv.includes('--if-stale') && builtHash() === hash) process.exit(0);
await build(files, hash);
process.stderr.write(`dist/ built from src/ in ${Math.round(performance.now() - started)} ms\n`);
