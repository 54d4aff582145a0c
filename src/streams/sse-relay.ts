import type { SseStream } from '../http/sse.js';
import { isFinalEvent } from './protocol.js';
import type { StreamEnd, StreamEvent, StreamListener } from './stream-hub.js';

export interface NamedEvent {
  name: string;
  data: unknown;
}

export interface RelayOptions {
  /**
   * The event ending a stream whose process stopped before its end: the family's `error`, or
   * what a caller recovers from elsewhere (relayTurn: a recorded reply's `done`).
   */
  lostEvent: () => NamedEvent | Promise<NamedEvent>;
  /** The seq the client already has (Last-Event-ID); events the relay adds itself repeat it. */
  afterSeq?: number;
}

/**
 * Relays a stream to an SSE response, each event with its `seq` as `id:`, until its last event
 * (`done`/`error`), its end, or the client leaving. Events the relay makes up (a lost
 * stream) carry the last delivered id, so a client resuming from them misses nothing.
 */
export function relayStream(
  sse: SseStream,
  subscribe: (listener: StreamListener) => () => void,
  options: RelayOptions,
): Promise<void> {
  return new Promise<void>((resolve) => {
    let finished = false;
    let lastId = options.afterSeq ?? 0;
    let unsubscribe: (() => void) | null = null;
    const finish = () => {
      if (finished) return;
      finished = true;
      unsubscribe?.();
      sse.end();
      resolve();
    };
    const sendOwn = (event: NamedEvent) => sse.send(event.name, event.data, lastId);
    // Events already published are replayed synchronously inside subscribe().
    unsubscribe = subscribe({
      onEvent: (event: StreamEvent) => {
        if (finished) return;
        lastId = event.seq;
        if (event.json !== undefined) sse.sendJson(event.name, event.json, event.seq);
        else sse.send(event.name, event.data, event.seq);
        if (isFinalEvent(event.name)) finish();
      },
      onEnd: (reason: StreamEnd) => {
        if (finished) return;
        if (reason !== 'lost') return finish();
        void (async () => options.lostEvent())()
          .then(
            (event) => {
              if (!finished) sendOwn(event);
            },
            () => undefined,
          )
          .finally(finish);
      },
    });
    if (finished) unsubscribe();
    void sse.closedPromise().then(finish);
  });
}
