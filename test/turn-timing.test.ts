/**
 * A reply's timing (src/telemetry/turn-timing.ts) when its model request was sent before the turn
 * built its own (src/llm/speculative-requests.ts): the model's time runs from that request to its
 * first chunk's arrival; the rest is the service's.
 */
import { performance } from 'node:perf_hooks';
import { describe, expect, it } from 'vitest';
import { TurnTiming } from '../src/telemetry/turn-timing.js';

/**
 * A turn that arrived 50 ms ago; an early request sent 40 ms ago, its first bytes (when given)
 * 30 ms ago; the turn reads the first chunk now.
 */
function turnWith(early: { taken: boolean; dataArrived: boolean }) {
  const now = performance.now();
  const timing = new TurnTiming(now - 50);
  timing.started();
  timing.modelRequest({
    taken: early.taken,
    sentAt: now - 40,
    firstDataAt: early.dataArrived ? now - 30 : null,
  });
  timing.modelChunk();
  timing.eventWritten();
  timing.modelEnded();
  timing.ended();
  return timing.view();
}

describe('TurnTiming with a request sent early', () => {
  it('counts the model’s time from the early request the turn took to its first bytes', () => {
    const view = turnWith({ taken: true, dataArrived: true });
    expect(view.model_first_token_ms).toBeGreaterThanOrEqual(9.9);
    expect(view.model_first_token_ms).toBeLessThan(30);
    // Arrival to the request (10 ms) and the first bytes' wait for the turn (30 ms and more).
    expect(view.overhead_ms).toBeGreaterThanOrEqual(39.9);
    expect(view.total_ms).toBeGreaterThanOrEqual(50);
  });

  it('to the turn’s first chunk when the turn was reading before any came', () => {
    const view = turnWith({ taken: true, dataArrived: false });
    expect(view.model_first_token_ms).toBeGreaterThanOrEqual(40);
    expect(view.overhead_ms).toBeGreaterThanOrEqual(10);
    expect(view.overhead_ms).toBeLessThan(40);
  });

  it('counts from the turn’s own request when the early one was dropped', () => {
    const view = turnWith({ taken: false, dataArrived: true });
    expect(view.model_first_token_ms).toBeLessThan(40);
    expect(view.overhead_ms).toBeGreaterThanOrEqual(50);
  });
});
