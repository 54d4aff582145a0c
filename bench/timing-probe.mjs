/**
 * The whole reply's parts in the `done` event's timing (a preload for the bench, not part of the
 * service). The public `timing` (src/telemetry/turn-timing.ts) covers the service's share before
 * the first token and the total; this adds, in ms from the request's arrival, the moments the
 * turn already marks: `model_request_ms` (the model request sent, or the early request the turn
 * took), `first_chunk_ms` (the model's first chunk) and `model_end_ms` (the model's stream read to
 * its end). `bench/timings-summary.ts` then splits a reply into the service's time before the
 * model, the model's first chunk, the model's body as the service read it (a rested socket reads
 * its end late), the writing of the result, and what the client saw outside the service.
 *
 *   BENCH_START_ARGS="--single-threaded-gc --heap-growing-percent=50 --import ./bench/timing-probe.mjs dist/main.js" \
 *     npm run --silent bench -- --closed-loop --concurrency 500 --timings
 *
 * It reads the class's members (private to TypeScript only). If a method it calls is renamed,
 * every `done` event fails (a probe run shows errors at once); if a field is renamed, its part is
 * null in every reply, and the summary says that the probe's parts are missing.
 */
import { TurnTiming } from '../dist/telemetry/turn-timing.js';

const round = (ms) => Math.round(ms * 10) / 10;
const since = (timing, at) => (at === null || at === undefined ? null : round(at - timing.arrivedAt));
const view = TurnTiming.prototype.view;

TurnTiming.prototype.view = function probedView() {
  return {
    ...view.call(this),
    model_request_ms: since(this, this.requestAt()),
    first_chunk_ms: since(this, this.chunkAt()),
    model_end_ms: since(this, this.modelEndAt),
  };
};
