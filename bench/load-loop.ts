/**
 * The closed loop of bench/closed-loop.ts: C workers, each sending one streamed request, reading it
 * to its end, then sending the next. Built to drive 500 streams from one core, beside the fake
 * model: the service's own small HTTP client (keep-alive connections read into one reused buffer,
 * no `Readable`), and the SSE bodies only scanned for a few marker bytes, never parsed.
 */
import { StreamClient } from '../src/net/stream-client.js';

/** Bytes whose first appearance in a streamed body marks an event. */
export interface Markers {
  /** The first reply text (TTFT). */
  content: Buffer;
  /** The successful end of the reply. */
  done: Buffer;
  /** A failure reported inside a 200 stream. */
  error?: Buffer;
}

export const SERVICE_MARKERS: Markers = {
  content: Buffer.from('event: content\n'),
  done: Buffer.from('event: done\n'),
  error: Buffer.from('event: error\n'),
};

export const DIRECT_MARKERS: Markers = {
  content: Buffer.from('"content":"'),
  done: Buffer.from('data: [DONE]'),
};

export interface LoopTarget {
  name: 'direct' | 'service';
  port: number;
  headers: Record<string, string>;
  markers: Markers;
  /** The JSON request body. */
  body: string;
  /** Starts a conversation (every `chatEvery` messages); resolves to the path its messages go to. */
  newConversation(client: StreamClient): Promise<string>;
}

export interface LoopSettings {
  concurrency: number;
  rampMs: number;
  warmupMs: number;
  measureMs: number;
  /** A request unanswered (to its end) this long is abandoned and counted as an error. */
  timeoutMs: number;
  /** Messages per chat before a worker moves to a fresh one. */
  chatEvery: number;
  /**
   * Keep each measured reply's figures (`LoopResult.replyTimings`), with the `timing` of the
   * service's `done` event: the body's bytes are then kept until the reply ends (`--timings`).
   */
  recordReplies?: boolean;
}

/** One reply whose first token came in the measured phase (`--timings`; bench/timings-summary.ts). */
export interface ReplyTiming {
  worker: number;
  /** The worker's message number (1 is the first of a run; a fresh chat every `chatEvery`). */
  message: number;
  /** When it was sent, ms after the measured phase began. */
  sent_ms: number;
  /** Sent to the first `content` bytes, and to the reply's end, as the client saw them. */
  ttft_ms: number;
  total_ms: number;
  /** The `timing` of the service's `done` event (TurnTimingView, src/telemetry/turn-timing.ts); null direct. */
  service: Record<string, number | null> | null;
}

export interface LoopHooks {
  /** Called when the measured phase starts and ends (to read CPU counters at those instants). */
  onMeasureStart(): void;
  onMeasureEnd(): void;
}

export interface LoopResult {
  /** Time from sending to the first `content` marker, of first tokens seen in the measured phase. */
  ttftMs: number[];
  /** Replies that reached `done` in the measured phase. */
  replies: number;
  /** Actual measured phase, performance.now() ms. */
  windowStart: number;
  windowEnd: number;
  /** Failed requests (including chat creations) that overlapped the measured phase, by kind. */
  errors: Record<string, number>;
  /** Requests sent, whole run. */
  sent: number;
  /** Time after the measured phase until the last in-flight request ended. */
  drainMs: number;
  /** With `recordReplies`: every reply whose first token came in the measured phase. */
  replyTimings: ReplyTiming[];
  /**
   * Each worker's cycles begun in the measured phase: one request's sending to the same worker's
   * next (a new chat's creation included). C over their mean is the rate the loop sustains. The
   * last one, whose next request is never sent (the phase ended), counts to its reply's end: left
   * out, the long cycles would be the ones most often missing.
   */
  cycleMs: number[];
}

interface Outcome {
  sentAt: number;
  ttftAt: number;
  endAt: number;
  error: string | null;
  /** With `recordReplies`, the `done` event's `timing` object, if the body had one. */
  timing?: Record<string, number | null> | null;
}

/** The `"timing":{...}` of a `done` event's message (a flat object of numbers and nulls). */
const TIMING = /"timing":(\{[^{}]*\})/;

/** The last bytes of the body read so far, copied out of the reused read buffer. */
export class Carry {
  private readonly bytes: Buffer;
  private length = 0;

  constructor(size: number) {
    this.bytes = Buffer.alloc(size);
  }

  keep(chunk: Buffer): void {
    const size = this.bytes.length;
    if (chunk.length >= size) {
      chunk.copy(this.bytes, 0, chunk.length - size);
      this.length = size;
      return;
    }
    // A short chunk: the carry's last bytes before it, then the chunk.
    const kept = Math.min(this.length, size - chunk.length);
    this.bytes.copy(this.bytes, 0, this.length - kept, this.length);
    chunk.copy(this.bytes, kept);
    this.length = kept + chunk.length;
  }

  /** Whether `marker` occurs in `chunk`, or begins in the carry and ends in `chunk`. */
  contains(chunk: Buffer, marker: Buffer): boolean {
    if (chunk.indexOf(marker) !== -1) return true;
    // Byte by byte, without a Buffer.concat per chunk and marker (50,000 chunks a second at C=500).
    for (let k = Math.min(marker.length - 1, this.length); k >= 1; k--) {
      const from = this.length - k;
      let i = 0;
      while (i < k && this.bytes[from + i] === marker[i]) i++;
      if (i < k) continue;
      let j = k;
      while (j < marker.length && j - k < chunk.length && chunk[j - k] === marker[j]) j++;
      if (j === marker.length) return true;
    }
    return false;
  }
}

/**
 * One streamed request on `client`, read to its end. The body's bytes are scanned where they land
 * (`onData` hands over a view of the read buffer, valid only during the call), so the carry is
 * copied out.
 */
function streamOnce(
  client: StreamClient,
  target: LoopTarget,
  path: string,
  timeoutMs: number,
  record: boolean,
): Promise<Outcome> {
  return new Promise((resolve) => {
    const outcome: Outcome = { sentAt: 0, ttftAt: Number.NaN, endAt: 0, error: null };
    let settled = false;
    let abort: ((err?: Error) => void) | null = null;
    const finish = (error: string | null) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      outcome.endAt = performance.now();
      outcome.error = error;
      resolve(outcome);
    };
    const { markers } = target;
    const keep = Math.max(markers.content.length, markers.done.length, markers.error?.length ?? 0) - 1;
    let status = 0;
    const carry = new Carry(keep);
    let done = false;
    let failed = false;
    const body: Buffer[] | null = record && target.name === 'service' ? [] : null;
    const timer = setTimeout(() => {
      finish('timeout');
      abort?.(new Error('timeout'));
    }, timeoutMs);
    outcome.sentAt = performance.now();
    client.dispatch(
      {
        origin: `http://127.0.0.1:${target.port}`,
        path,
        method: 'POST',
        headers: target.headers,
        body: target.body,
      },
      {
        onConnect: (a) => {
          abort = a;
        },
        onHeaders: (statusCode) => {
          status = statusCode;
          return true;
        },
        onData: (chunk) => {
          if (status !== 200) return true;
          body?.push(Buffer.from(chunk));
          if (Number.isNaN(outcome.ttftAt) && carry.contains(chunk, markers.content))
            outcome.ttftAt = performance.now();
          if (!done && carry.contains(chunk, markers.done)) done = true;
          if (markers.error && !failed && carry.contains(chunk, markers.error)) failed = true;
          carry.keep(chunk);
          return true;
        },
        onComplete: () => {
          if (status !== 200) return finish(`HTTP ${status}`);
          if (body) {
            const match = TIMING.exec(Buffer.concat(body).toString('utf8'));
            outcome.timing = match ? JSON.parse(match[1]!) : null;
          }
          finish(failed ? 'error event' : done ? null : 'ended without done');
        },
        onError: (err) => finish(`request ${(err as NodeJS.ErrnoException).code ?? err.message}`),
      },
    );
  });
}

/**
 * A JSON POST on the loop's client (chat creation), so that a worker's requests share its
 * keep-alive connections: a second pool would double the connections opened in the ramp.
 */
export function postJson(
  client: StreamClient,
  port: number,
  path: string,
  key: string,
  body: unknown,
  timeoutMs: number,
): Promise<any> {
  return new Promise((resolve, reject) => {
    let status = 0;
    let abort: ((err?: Error) => void) | null = null;
    const chunks: Buffer[] = [];
    const timer = setTimeout(() => abort?.(new Error('timeout')), timeoutMs);
    const settle = (error: Error | null) => {
      clearTimeout(timer);
      if (error) reject(error);
      else if (status !== 201 && status !== 200) reject(new Error(`HTTP ${status}`));
      else {
        try {
          resolve(JSON.parse(Buffer.concat(chunks).toString('utf8')));
        } catch (err) {
          reject(err);
        }
      }
    };
    client.dispatch(
      {
        origin: `http://127.0.0.1:${port}`,
        path,
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      },
      {
        onConnect: (a) => {
          abort = a;
        },
        onHeaders: (statusCode) => {
          status = statusCode;
          return true;
        },
        // A copy: the client's read buffer is reused.
        onData: (chunk) => chunks.push(Buffer.from(chunk)) > 0,
        onComplete: () => settle(null),
        onError: (err) => settle(err),
      },
    );
  });
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export async function runClosedLoop(
  target: LoopTarget,
  settings: LoopSettings,
  hooks: LoopHooks,
): Promise<LoopResult> {
  const { concurrency } = settings;
  // No socket timeout (each read would re-arm it): `streamOnce` has a timer of its own.
  const client = new StreamClient({ keepAliveMs: 30_000, readTimeoutMs: 0 });
  const t0 = performance.now();
  const plannedStart = t0 + settings.rampMs + settings.warmupMs;
  const plannedEnd = plannedStart + settings.measureMs;
  const result: LoopResult = {
    ttftMs: [],
    replies: 0,
    windowStart: plannedStart,
    windowEnd: plannedEnd,
    errors: {},
    sent: 0,
    drainMs: 0,
    replyTimings: [],
    cycleMs: [],
  };
  let started = false;
  let stopped = false;
  const startTimer = setTimeout(() => {
    result.windowStart = performance.now();
    started = true;
    hooks.onMeasureStart();
  }, plannedStart - t0);
  const endTimer = setTimeout(() => {
    result.windowEnd = performance.now();
    stopped = true;
    hooks.onMeasureEnd();
  }, plannedEnd - t0);
  // Timers of a busy event loop fire late: the window is where they actually fired.
  const inWindow = (t: number) => started && t >= result.windowStart && (!stopped || t <= result.windowEnd);
  // A failure counts when its request overlapped the measured phase, including requests in flight
  // at its end that fail afterwards (timeouts of an overloaded service); warm-up failures do not.
  const countError = (kind: string, sentAt: number, endAt: number) => {
    if (!started || endAt < result.windowStart || (stopped && sentAt > result.windowEnd)) return;
    result.errors[kind] = (result.errors[kind] ?? 0) + 1;
  };

  const worker = async (index: number) => {
    await sleep((index * settings.rampMs) / concurrency);
    let path = '';
    let count = 0;
    let previousSentAt: number | null = null;
    let previousEndAt = 0;
    while (!stopped) {
      if (path === '' || count % settings.chatEvery === 0) {
        const sentAt = performance.now();
        try {
          path = await target.newConversation(client);
        } catch (err) {
          countError(`new chat: ${(err as Error).message}`, sentAt, performance.now());
          path = '';
          // Back off so a refusing service does not turn the loop into a busy spin on core 0.
          await sleep(50);
          continue;
        }
      }
      result.sent++;
      const outcome = await streamOnce(
        client,
        target,
        path,
        settings.timeoutMs,
        settings.recordReplies === true,
      );
      count++;
      if (previousSentAt !== null && inWindow(previousSentAt))
        result.cycleMs.push(outcome.sentAt - previousSentAt);
      previousSentAt = outcome.error ? null : outcome.sentAt;
      previousEndAt = outcome.endAt;
      if (inWindow(outcome.ttftAt)) {
        result.ttftMs.push(outcome.ttftAt - outcome.sentAt);
        if (settings.recordReplies)
          result.replyTimings.push({
            worker: index,
            message: count,
            sent_ms: outcome.sentAt - result.windowStart,
            ttft_ms: outcome.ttftAt - outcome.sentAt,
            total_ms: outcome.endAt - outcome.sentAt,
            service: outcome.timing ?? null,
          });
      }
      if (outcome.error) {
        countError(outcome.error, outcome.sentAt, outcome.endAt);
        await sleep(50);
      } else if (inWindow(outcome.endAt)) {
        result.replies++;
      }
    }
    if (previousSentAt !== null && inWindow(previousSentAt))
      result.cycleMs.push(previousEndAt - previousSentAt);
  };
  await Promise.all(Array.from({ length: concurrency }, (_, i) => worker(i)));
  clearTimeout(startTimer);
  clearTimeout(endTimer);
  result.drainMs = Math.max(0, performance.now() - result.windowEnd);
  client.close();
  return result;
}
