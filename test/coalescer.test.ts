import { setImmediate as nextTurn } from 'node:timers/promises';
import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  CoalescingScheduler,
  ContentCoalescer,
  EventLoopLoad,
  type LoadSignal,
} from '../src/streams/coalescer.js';
import { sleep } from './streams-support.js';

/** How `vi.waitFor` waits for the scheduler's timer: as long as a loaded machine makes it. */
const UNTIL_FIRED = { timeout: 5_000, interval: 5 };
/** Polls a load sampled every 50 ms (`sampleMs`) until a quiet sample reads idle. */
const UNTIL_IDLE = { timeout: 5_000, interval: 100 };

/** A load signal the test sets: the window a busy process would use, 0 for idle. */
class FixedLoad implements LoadSignal {
  constructor(public window = 0) {}
  windowMs(): number {
    return this.window;
  }
}

function stream(scheduler: CoalescingScheduler) {
  const events: { text: string; at: number }[] = [];
  const coalescer = new ContentCoalescer((text) => events.push({ text, at: performance.now() }), scheduler);
  return { events, coalescer, texts: () => events.map((e) => e.text) };
}

afterEach(() => {
  vi.restoreAllMocks();
});

describe('content coalescer, idle process', () => {
  it('publishes each delta at once when they arrive in separate turns of the event loop', async () => {
    const { coalescer, texts } = stream(new CoalescingScheduler(new FixedLoad(0)));
    for (const token of ['Hel', 'lo', ' there']) {
      coalescer.push(token);
      // Published synchronously, before anything else runs.
      expect(texts().at(-1)).toBe(token);
      await nextTurn();
      await nextTurn();
    }
    expect(texts()).toEqual(['Hel', 'lo', ' there']);
  });

  it('merges deltas of one turn (one read of the model) after publishing the first at once', async () => {
    const { coalescer, texts } = stream(new CoalescingScheduler(new FixedLoad(0)));
    coalescer.push('a');
    coalescer.push('b');
    coalescer.push('c');
    expect(texts()).toEqual(['a']);
    await nextTurn();
    expect(texts()).toEqual(['a', 'bc']);
  });
});

describe('content coalescer, busy process', () => {
  it('never holds the first delta, then publishes one event per window from the shared timer', async () => {
    const scheduler = new CoalescingScheduler(new FixedLoad(40));
    const { coalescer, events, texts } = stream(scheduler);
    const started = performance.now();
    coalescer.push('first');
    expect(texts()).toEqual(['first']);
    coalescer.push(' second');
    // A plain timer of one window set now: as late as the machine makes the scheduler's timer.
    const reference = new Promise<number>((resolve) => setTimeout(() => resolve(performance.now()), 40));
    // Not published when the loop comes round either (that is the idle mode's merging).
    await nextTurn();
    await nextTurn();
    expect(texts()).toEqual(['first']);
    await sleep(5);
    coalescer.push(' third');
    // Held, not lost and not published yet.
    expect(texts()).toEqual(['first']);
    expect(scheduler.size).toBe(1);
    // The timer's own time, however long a loaded machine makes it (a fixed sleep made this flaky).
    await vi.waitFor(() => expect(texts()).toHaveLength(2), UNTIL_FIRED);
    expect(texts()).toEqual(['first', ' second third']);
    expect(scheduler.size).toBe(0);
    // The held text went out about one window after it was held, not much later: no later than a
    // plain timer of one window set at the same time, give or take half a window (a fixed bound
    // of 200 ms could fail on a loaded machine).
    const delay = events[1]!.at - started;
    expect(delay).toBeGreaterThanOrEqual(35);
    expect(delay).toBeLessThan((await reference) - started + 20);
  });

  it('publishes at once again when the stream published nothing for a whole window', async () => {
    const { coalescer, texts } = stream(new CoalescingScheduler(new FixedLoad(20)));
    coalescer.push('a');
    await sleep(40);
    coalescer.push('b');
    expect(texts()).toEqual(['a', 'b']);
  });

  it('flush publishes what is held at once, in order, and the timer adds nothing after it', async () => {
    const scheduler = new CoalescingScheduler(new FixedLoad(30));
    const { coalescer, texts } = stream(scheduler);
    coalescer.push('a');
    await nextTurn();
    coalescer.push('b');
    coalescer.push('c');
    expect(texts()).toEqual(['a']);
    coalescer.flush();
    expect(texts()).toEqual(['a', 'bc']);
    expect(scheduler.size).toBe(0);
    await sleep(60);
    expect(texts()).toEqual(['a', 'bc']);
    coalescer.flush();
    expect(texts()).toEqual(['a', 'bc']);
  });

  it('flushes every held stream from one timer', async () => {
    // The scheduler's clock stands still, so every second delta falls within its stream's window
    // however long the machine takes between the pushes (a real clock made this flaky under load).
    const scheduler = new CoalescingScheduler(new FixedLoad(30), () => 0);
    const streams = Array.from({ length: 50 }, () => stream(scheduler));
    for (const s of streams) s.coalescer.push('x');
    await nextTurn();
    const timers = vi.spyOn(globalThis, 'setTimeout');
    for (const s of streams) s.coalescer.push('y');
    for (const s of streams) s.coalescer.push('z');
    expect(timers).toHaveBeenCalledTimes(1);
    expect(scheduler.size).toBe(50);
    await vi.waitFor(() => expect(streams.every((s) => s.texts().length === 2)).toBe(true), UNTIL_FIRED);
    for (const s of streams) expect(s.texts()).toEqual(['x', 'yz']);
    // The 50 held events went out from the one timer (32 in its callback, the rest a turn later).
    const times = streams.map((s) => s.events[1]!.at);
    expect(Math.max(...times) - Math.min(...times)).toBeLessThan(10);
  });

  it('releases held streams 32 per turn of the loop, letting what arrived in between run first', async () => {
    const scheduler = new CoalescingScheduler(new FixedLoad(30), () => 0);
    const streams = Array.from({ length: 100 }, () => stream(scheduler));
    for (const s of streams) s.coalescer.push('x');
    for (const s of streams) s.coalescer.push('y');
    expect(scheduler.size).toBe(100);
    const published = () => streams.filter((s) => s.texts().length === 2).length;
    // Work that arrives while the first stream is published (a new turn's request, a first token)
    // runs before the next slice, not after all 100.
    const seen: number[] = [];
    const first = streams[0]!;
    const emitted = first.events.push.bind(first.events);
    first.events.push = (...items) => {
      setImmediate(() => seen.push(published()));
      return emitted(...items);
    };
    // Until the timer fired and every slice went out, however long a loaded machine takes.
    await vi.waitFor(() => expect(published()).toBe(100), UNTIL_FIRED);
    expect(seen).toEqual([32]);
    for (const s of streams) expect(s.texts()).toEqual(['x', 'y']);
  });

  it('keeps the text exact across idle and busy spells', async () => {
    const load = new FixedLoad(0);
    const { coalescer, texts } = stream(new CoalescingScheduler(load));
    const tokens = Array.from({ length: 60 }, (_, i) => `t${i} `);
    for (const [i, token] of tokens.entries()) {
      load.window = Math.floor(i / 10) % 2 === 0 ? 0 : 15;
      coalescer.push(token);
      if (i % 3 === 0) await sleep(4);
    }
    coalescer.flush();
    await sleep(40);
    expect(texts().join('')).toBe(tokens.join(''));
    // Busy spells merged something.
    expect(texts().length).toBeLessThan(tokens.length);
  });
});

describe('event-loop load', () => {
  it('turns busy above busyAt and idle again only below idleBelow, the window growing with load', () => {
    const load = new EventLoopLoad({
      busyAt: 0.5,
      idleBelow: 0.3,
      minWindowMs: 20,
      maxWindowMs: 50,
      saturatedAt: 0.8,
      saturatedWindowMs: 200,
    });
    expect(load.windowFor(0.2)).toBe(0);
    expect(load.windowFor(0.45)).toBe(0);
    const busy = load.windowFor(0.6);
    expect(busy).toBe(38);
    // Still busy between the thresholds (merging lowers the load it measures).
    expect(load.windowFor(0.4)).toBe(26);
    expect(load.windowFor(0.7)).toBe(44);
    // Saturated: the window grows on, to its longest at a loop that never waits.
    expect(load.windowFor(0.8)).toBe(50);
    expect(load.windowFor(0.9)).toBe(125);
    expect(load.windowFor(1)).toBe(200);
    expect(load.windowFor(0.25)).toBe(0);
    expect(load.windowFor(0.4)).toBe(0);
  });

  it('reads a spinning event loop as busy and a waiting one as idle', async () => {
    const load = new EventLoopLoad({ sampleMs: 50 });
    load.windowMs(performance.now());
    const spinUntil = performance.now() + 150;
    while (performance.now() < spinUntil) {
      // Busy: the loop runs code the whole time.
    }
    expect(load.windowMs(performance.now())).toBeGreaterThan(0);
    // Each poll, more than `sampleMs` after the last, samples the loop since then: one quiet
    // interval reads idle. (A fixed 400 ms sleep failed in CI on a loaded machine, where the
    // worker's loop had other work in it: utilization just above `idleBelow`.)
    await vi.waitFor(() => expect(load.windowMs(performance.now())).toBe(0), UNTIL_IDLE);
  });

  it('reads a loop that never waits as saturated, and a waiting one as not', async () => {
    const load = new EventLoopLoad({ sampleMs: 50 });
    load.saturated(performance.now());
    const spinUntil = performance.now() + 150;
    while (performance.now() < spinUntil) {
      // The loop runs code the whole time.
    }
    expect(load.saturated(performance.now())).toBe(true);
    await vi.waitFor(() => expect(load.saturated(performance.now())).toBe(false), UNTIL_IDLE);
  });
});

describe('paused model reads', () => {
  it('restarts every paused reader within readPauseMs, 32 per turn of the loop, not one that resumed on its own', async () => {
    const scheduler = new CoalescingScheduler(new FixedLoad(1_000), undefined, 60);
    const start = performance.now();
    let firstAt = 0;
    // Which turn of the loop each reader was restarted in: 0 for the timer's, then one more per turn.
    let turn = 0;
    let counting = false;
    const resumed: { reader: number; turn: number }[] = [];
    const readers = Array.from({ length: 40 }, (_, reader) => ({
      resumeReading: () => {
        firstAt ||= performance.now() - start;
        if (!counting) {
          counting = true;
          setImmediate(() => {
            counting = false;
            turn++;
          });
        }
        resumed.push({ reader, turn });
      },
    }));
    for (const reader of readers) scheduler.pauseReading(reader);
    scheduler.readingResumed(readers[5]!);
    while (resumed.length < 39) await sleep(5);
    await sleep(20);
    expect(firstAt).toBeGreaterThanOrEqual(55);
    expect(resumed.filter((r) => r.turn === 0)).toHaveLength(32);
    expect(resumed.filter((r) => r.turn === 1)).toHaveLength(7);
    expect(resumed.map((r) => r.reader)).not.toContain(5);
  });

  it('pauses reads only when the load says saturated', () => {
    expect(new CoalescingScheduler(new FixedLoad(250)).pausesReads(0)).toBe(false);
    const saturated: LoadSignal = { windowMs: () => 250, saturated: () => true };
    expect(new CoalescingScheduler(saturated).pausesReads(0)).toBe(true);
  });
});
