import { createParser } from 'eventsource-parser';

export interface IdEvent {
  id: string | undefined;
  event: string;
  data: any;
}

export interface SseRead {
  status: number;
  headers: Headers;
  /** Raw text, for asserting the wire format. */
  text: string;
  events: IdEvent[];
  /** A JSON body when the answer was not a stream (request-check refusals). */
  body: any;
  /** `end`: the server ended the stream; `aborted`: `until` disconnected; `dropped`: the connection broke. */
  ended: 'end' | 'aborted' | 'dropped';
}

/**
 * The tests' one SSE client: a real HTTP request read with eventsource-parser, keeping each event's
 * `id`. `until` disconnects as soon as it returns true for the events so far; a broken connection
 * (a killed server) is reported in `ended` with the events read until then.
 */
export async function readSse(
  url: string,
  options: {
    key: string;
    method?: 'GET' | 'POST';
    body?: unknown;
    headers?: Record<string, string>;
    until?: (events: IdEvent[]) => boolean;
    /** Called with the events so far after each read (to act mid-stream without disconnecting). */
    onProgress?: (events: IdEvent[]) => void;
    timeoutMs?: number;
  },
): Promise<SseRead> {
  const controller = new AbortController();
  const timeout = AbortSignal.timeout(options.timeoutMs ?? 30_000);
  const res = await fetch(url, {
    method: options.method ?? (options.body === undefined ? 'GET' : 'POST'),
    headers: {
      authorization: `Bearer ${options.key}`,
      ...(options.body === undefined ? {} : { 'content-type': 'application/json' }),
      ...options.headers,
    },
    body: options.body === undefined ? undefined : JSON.stringify(options.body),
    signal: AbortSignal.any([controller.signal, timeout]),
  });
  if (!String(res.headers.get('content-type')).startsWith('text/event-stream')) {
    const text = await res.text();
    return {
      status: res.status,
      headers: res.headers,
      text,
      events: [],
      body: text ? JSON.parse(text) : null,
      ended: 'end',
    };
  }
  const events: IdEvent[] = [];
  let text = '';
  let ended: SseRead['ended'] = 'end';
  const parser = createParser({
    onEvent: (message) =>
      events.push({ id: message.id, event: message.event ?? 'message', data: JSON.parse(message.data) }),
  });
  const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      text += value;
      parser.feed(value);
      options.onProgress?.(events);
      if (options.until?.(events)) {
        controller.abort();
        ended = 'aborted';
        break;
      }
    }
  } catch (err) {
    if (timeout.aborted) throw err;
    if (!controller.signal.aborted) ended = 'dropped';
  }
  return { status: res.status, headers: res.headers, text, events, body: null, ended };
}
