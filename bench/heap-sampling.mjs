/**
 * Allocation sampling for the running service (a preload, not part of it): each SIGUSR2 starts or
 * stops V8's sampling heap profiler, keeping objects the GC already collected (Node's own
 * `--heap-prof` keeps only those still alive at exit, which hides short-lived garbage: what a
 * busy stream makes). On stop it writes `heap-<time>.heapprofile` to HEAP_SAMPLING_DIR (default
 * the working directory), for `bench/heap-summary.ts`.
 *
 *   BENCH_START_ARGS="--single-threaded-gc --heap-growing-percent=50 --import ./bench/heap-sampling.mjs dist/main.js" \
 *     npm run --silent bench -- --closed-loop --concurrency 500 &
 *   # once the bench prints "C=500: service...", a few seconds later:
 *   kill -USR2 <service pid>; sleep 10; kill -USR2 <service pid>
 */
import { writeFileSync } from 'node:fs';
import { Session } from 'node:inspector';
import path from 'node:path';

const session = new Session();
session.connect();
let sampling = false;

process.on('SIGUSR2', () => {
  sampling = !sampling;
  if (sampling) {
    session.post('HeapProfiler.startSampling', {
      samplingInterval: 16384,
      includeObjectsCollectedByMajorGC: true,
      // HEAP_SAMPLING_SURVIVORS=1: only what outlived the scavenges (what is promoted and marked).
      includeObjectsCollectedByMinorGC: process.env.HEAP_SAMPLING_SURVIVORS !== '1',
    });
    return;
  }
  session.post('HeapProfiler.stopSampling', (err, result) => {
    if (err) return console.error('heap sampling:', err);
    const file = path.join(process.env.HEAP_SAMPLING_DIR ?? '.', `heap-${Date.now()}.heapprofile`);
    writeFileSync(file, JSON.stringify(result.profile));
  });
});
