import { performance } from 'node:perf_hooks';

/**
 * Adaptive coalescing of a stream's text deltas (issue 14, docs/decisions.md "Adaptive coalescing
 * of content deltas").
 *
 * - Idle process: a delta is published at once, unless one was published in the current turn of
 *   the event loop (the model sent several in one read); those are merged into one event when the
 *   loop comes round (`setImmediate`). So every token goes out as it comes.
 * - Busy process (event-loop utilization high, see `EventLoopLoad`): a stream publishes at most
 *   one `content` event per window (40 to 100 ms, longer the busier; up to 250 ms when the loop
 *   is saturated, where the alternative is queueing every stream): a delta arriving sooner after
 *   the stream's last event is held, merged with the ones after it, and published by one timer
 *   shared by every stream (`CoalescingScheduler`), not a timer per stream. Each event then costs
 *   one SSE write per reader and one stored row for several tokens.
 * - The first delta of a stream is never held; any other event of the stream first publishes what
 *   is held (`flush`), so the order stays the model's.
 *
 * Merging happens before events are numbered, so what is sent live, stored and replayed on
 * reattach (Last-Event-ID) is one sequence of events: same ids, same contents.
 */
export class ContentCoalescer {
  private buffered = '';
  /** A `setImmediate` is pending: deltas until then are merged (idle mode). */
  private turnOpen = false;
  /** Registered with the scheduler's shared timer (busy mode). */
  private held = false;
  private lastEmitAt = Number.NEGATIVE_INFINITY;

  constructor(
    private readonly emit: (text: string) => void,
    private readonly scheduler: CoalescingScheduler = defaultScheduler(),
  ) {}

  /** Publishes `text` now, or merges it into an event published shortly. */
  push(text: string): void {
    if (this.turnOpen || this.held) {
      this.buffered += text;
      return;
    }
    const now = this.scheduler.now();
    const window = this.scheduler.windowMs(now);
    if (window === 0) {
      this.openTurn();
      this.publish(text, now);
    } else if (now - this.lastEmitAt >= window) {
      this.publish(text, now);
    } else {
      this.buffered = text;
      this.held = true;
      this.scheduler.hold(this, window);
    }
  }

  /** Publishes what is merged now (before any other event of the stream, so order is kept). */
  flush(): void {
    if (this.held) {
      this.held = false;
      this.scheduler.release(this);
    }
    if (!this.buffered) return;
    const text = this.buffered;
    this.buffered = '';
    this.publish(text, this.scheduler.now());
  }

  private publish(text: string, now: number): void {
    this.lastEmitAt = now;
    this.emit(text);
  }

  private openTurn(): void {
    this.turnOpen = true;
    setImmediate(() => {
      this.turnOpen = false;
      if (!this.buffered) return;
      // Something merged: publish it, and keep merging until a turn of the loop brings nothing.
      this.openTurn();
      this.flush();
    });
  }
}

/** How long a busy process holds a stream's deltas; 0 when it is idle. */
export interface LoadSignal {
  windowMs(now: number): number;
  /** The loop never waits: held model calls leave their sockets unread for a while (`pauseReading`). */
  saturated?(now: number): boolean;
}

export interface EventLoopLoadOptions {
  /** How often utilization is measured (lazily, on a delta: no timer). */
  sampleMs: number;
  /** Utilization at which the process counts as busy... */
  busyAt: number;
  /** ...and below which it counts as idle again (hysteresis: merging lowers the load it measures). */
  idleBelow: number;
  minWindowMs: number;
  /** The window at `saturatedAt`; from `idleBelow` to there it grows from `minWindowMs`. */
  maxWindowMs: number;
  /** Utilization from which the loop counts as saturated: the window grows on... */
  saturatedAt: number;
  /** ...to this at a loop that never waits. */
  saturatedWindowMs: number;
}

export const DEFAULT_EVENT_LOOP_LOAD: EventLoopLoadOptions = {
  sampleMs: 100,
  busyAt: 0.3,
  idleBelow: 0.2,
  minWindowMs: 40,
  maxWindowMs: 100,
  saturatedAt: 0.8,
  saturatedWindowMs: 250,
};

/**
 * The process's load as event-loop utilization (`performance.eventLoopUtilization`): the share
 * of time the loop was running code rather than waiting for I/O, over the last sample period. It
 * counts every kind of work (streams, queries, other requests) and also time the process had work
 * but not the CPU (a shared core), which delays tokens as much. Sampled when asked, at most every
 * `sampleMs`; after a quiet spell the sample covers the whole spell and reads idle.
 */
export class EventLoopLoad implements LoadSignal {
  private readonly options: EventLoopLoadOptions;
  private last = performance.eventLoopUtilization();
  private sampledAt = Number.NEGATIVE_INFINITY;
  private busy = false;
  private window = 0;
  private saturatedNow = false;

  constructor(options: Partial<EventLoopLoadOptions> = {}) {
    this.options = { ...DEFAULT_EVENT_LOOP_LOAD, ...options };
  }

  windowMs(now: number): number {
    if (now - this.sampledAt < this.options.sampleMs) return this.window;
    const current = performance.eventLoopUtilization();
    const utilization = performance.eventLoopUtilization(current, this.last).utilization;
    this.last = current;
    this.sampledAt = now;
    this.window = this.windowFor(utilization);
    this.saturatedNow = this.busy && utilization >= this.options.saturatedAt;
    return this.window;
  }

  saturated(now: number): boolean {
    this.windowMs(now);
    return this.saturatedNow;
  }

  /**
   * The window for a measured utilization: 0 when idle, from min to max between idle and
   * saturated, then on to the saturated window at a loop that never waits.
   */
  windowFor(utilization: number): number {
    const { busyAt, idleBelow, minWindowMs, maxWindowMs, saturatedAt, saturatedWindowMs } = this.options;
    this.busy = this.busy ? utilization >= idleBelow : utilization >= busyAt;
    if (!this.busy) return 0;
    if (utilization >= saturatedAt) {
      const over = Math.min(1, (utilization - saturatedAt) / (1 - saturatedAt));
      return Math.round(maxWindowMs + over * (saturatedWindowMs - maxWindowMs));
    }
    const share = Math.max(0, (utilization - idleBelow) / (saturatedAt - idleBelow));
    return Math.round(minWindowMs + share * (maxWindowMs - minWindowMs));
  }
}

/** What the scheduler holds: a stream's merged deltas, or a model call's unread text (llm/lean-client.ts). */
export interface Flushable {
  flush(): void;
}

/** A held model call whose socket stopped reading (llm/lean-client.ts): the scheduler restarts it. */
export interface PausedReader {
  resumeReading(): void;
}

/**
 * Publishes the held deltas of every stream from one timer: armed when the first stream is held,
 * it fires after that stream's window and publishes every stream held by then (a stream held
 * later waits less, never more), 32 per turn of the loop (`flushSlice`).
 */
export class CoalescingScheduler {
  private held = new Set<Flushable>();
  private timer: NodeJS.Timeout | null = null;
  private paused = new Set<PausedReader>();
  private readTimer: NodeJS.Timeout | null = null;

  constructor(
    private readonly load: LoadSignal = new EventLoopLoad(),
    readonly now: () => number = () => performance.now(),
    /** How long a paused reader rests before the restarts begin (`pauseReading`). */
    readonly readPauseMs: number = READ_PAUSE_MS,
  ) {}

  windowMs(now: number): number {
    return this.load.windowMs(now);
  }

  /** Whether a held model call should stop reading its socket for a while (a saturated loop). */
  pausesReads(now: number): boolean {
    return this.load.saturated?.(now) ?? false;
  }

  hold(coalescer: Flushable, windowMs: number): void {
    this.held.add(coalescer);
    if (this.timer) return;
    this.timer = setTimeout(() => this.flushAll(), windowMs);
    // A held delta must not keep a process alive that has nothing else to do.
    this.timer.unref();
  }

  release(coalescer: Flushable): void {
    this.held.delete(coalescer);
  }

  /**
   * Restarts `reader` `readPauseMs` after the first reader of its round paused, with every reader
   * paused by then: one timer for all (a reader paused later rests less, never more), then
   * `FLUSH_SLICE` per turn of the loop, as the held streams are released.
   */
  pauseReading(reader: PausedReader): void {
    this.paused.add(reader);
    if (this.readTimer) return;
    this.readTimer = setTimeout(() => this.resumeAll(), this.readPauseMs);
    this.readTimer.unref();
  }

  /** The reader resumed on its own (its text was taken, or it closed). */
  readingResumed(reader: PausedReader): void {
    this.paused.delete(reader);
  }

  /** How many streams are waiting for the timer (tests). */
  get size(): number {
    return this.held.size;
  }

  private flushAll(): void {
    this.timer = null;
    const held = this.held;
    this.held = new Set();
    this.flushSlice(held.values(), (coalescer) => coalescer.flush());
  }

  private resumeAll(): void {
    this.readTimer = null;
    const paused = this.paused;
    this.paused = new Set();
    this.flushSlice(paused.values(), (reader) => reader.resumeReading());
  }

  /**
   * Releases `FLUSH_SLICE` of the held, then lets the loop come round (`setImmediate`) before the
   * next ones. Releasing is cheap, but each released call's turn then does its window's work (the
   * coalescer, the SSE write, the stored row) in the microtasks after it: at C=500 one window held
   * 700 to 960 calls and streams, and releasing them at once blocked the loop for 25 to 45 ms (up
   * to 120), which new turns' first tokens waited behind (bench/README.md, Session 16). A slice
   * lets the poll phase take in what arrived; a stream released later waits a few ms more, never a
   * window more.
   */
  private flushSlice<T>(items: Iterator<T>, release: (item: T) => void): void {
    for (let i = 0; i < FLUSH_SLICE; i++) {
      const next = items.next();
      if (next.done) return;
      try {
        release(next.value);
      } catch {
        // One stream's throwing publish must not leave the other streams' deltas held forever.
      }
    }
    setImmediate(() => this.flushSlice(items, release));
  }
}

/** How many held calls and streams one turn of the loop releases. */
const FLUSH_SLICE = 32;

/**
 * How long a held model call leaves its socket unread in a saturated process (docs/decisions.md,
 * "A saturated process reads a held call's socket every 40 ms"). It is also how much later the end
 * of a reply can be read: short against the window (up to 250 ms), long against a saturated loop's
 * turn (about 20 ms at C=500), whose every turn otherwise read every stream's socket.
 */
const READ_PAUSE_MS = 40;

let shared: CoalescingScheduler | null = null;

/**
 * The process's scheduler, shared by every stream's coalescer and by the lean model client, which
 * holds a busy call's text with the same windows and releases it on the same timer, just before
 * the coalescers publish (docs/decisions.md, "Coalescing at the source").
 */
export function defaultScheduler(): CoalescingScheduler {
  shared ??= new CoalescingScheduler();
  return shared;
}
