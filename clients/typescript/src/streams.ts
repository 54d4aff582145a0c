import { ScriptoriumError } from './errors.js';
import { isEventStream, readEvents } from './sse.js';

export interface ResumeOptions {
  /** Reconnections in a row without a new event before giving up (default 5). */
  maxReconnects?: number;
  /** First delay between reconnections, doubled each time (default 250 ms). */
  reconnectDelayMs?: number;
  signal?: AbortSignal;
}

/**
 * `open(after)` starts the stream (`after` null) or resumes it after the last event id received.
 * It answers the HTTP response; 204 means nothing is left to attach to.
 */
export type Opener = (after: number | null) => Promise<Response>;

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve, reject) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener(
      'abort',
      () => {
        clearTimeout(timer);
        reject(signal.reason);
      },
      { once: true },
    );
  });

/**
 * Yields a stream's events until its final event (`done` or `error`), reconnecting through
 * `open(lastId)` whenever the connection breaks or ends early, so the caller sees every event once,
 * in order. A refusal (an HTTP error status) is thrown as a ScriptoriumError.
 */
export async function* resumableStream<E extends { id: number; event: string; data: unknown }>(
  open: Opener,
  options: ResumeOptions = {},
): AsyncGenerator<E> {
  const maxReconnects = options.maxReconnects ?? 5;
  const baseDelay = options.reconnectDelayMs ?? 250;
  let lastId: number | null = null;
  let failures = 0;
  for (;;) {
    options.signal?.throwIfAborted();
    let response: Response | null = null;
    try {
      response = await open(lastId);
    } catch (err) {
      // No answer at all (connection refused or reset before the headers).
      if (options.signal?.aborted) throw err;
    }
    if (response) {
      if (response.status === 204) return;
      if (!response.ok || !isEventStream(response) || !response.body) {
        throw await ScriptoriumError.fromResponse(response);
      }
      try {
        for await (const raw of readEvents(response.body)) {
          if (raw.id !== null) {
            if (lastId !== null && raw.id <= lastId) continue; // already delivered
            lastId = raw.id;
          }
          failures = 0;
          yield { id: raw.id ?? lastId ?? 0, event: raw.event, data: raw.data } as E;
          if (raw.event === 'done' || raw.event === 'error') return;
        }
      } catch (err) {
        if (options.signal?.aborted) throw err;
        // The connection broke mid-stream: resume below.
      }
    }
    if (++failures > maxReconnects) {
      throw new ScriptoriumError(0, 'stream_interrupted', 'The stream broke and could not be resumed');
    }
    await sleep(baseDelay * 2 ** (failures - 1), options.signal);
  }
}
