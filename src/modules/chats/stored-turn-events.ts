import type { StreamEnd, StreamHub, StreamState } from '../streams/stream-hub.js';
import type { NumberedTurnEvent, TurnEventHub } from './turn-events.js';

/** The stream key of a chat turn's events (also the Idempotency-Key stream reference). */
export const turnStreamKey = (turnId: number) => `chat-turn:${turnId}`;

export function turnIdOfStreamKey(key: string): number | null {
  const match = /^chat-turn:(\d+)$/.exec(key);
  return match ? Number(match[1]) : null;
}

/**
 * The app's turn event hub: turns publish through the stream hub, so subscribers in this process
 * get events from memory at once and every other process reads them from `stream_events`.
 */
export class StoredTurnEventHub implements TurnEventHub {
  constructor(private readonly streams: StreamHub) {}

  open(turnId: number): void {
    this.streams.open(turnStreamKey(turnId));
  }

  publish(event: NumberedTurnEvent): Promise<void> {
    return this.streams.publish(turnStreamKey(event.turnId), event.seq, event.name, event.data);
  }

  subscribe(
    turnId: number,
    afterSeq: number,
    listener: (event: NumberedTurnEvent) => void,
    onEnd?: (reason: StreamEnd) => void,
  ): () => void {
    return this.streams.subscribe(turnStreamKey(turnId), afterSeq, {
      onEvent: (event) =>
        // Stored events are the ones turns published: their names and data are TurnEvent's.
        listener({ name: event.name, data: event.data, turnId, seq: event.seq } as NumberedTurnEvent),
      onEnd: (reason) => onEnd?.(reason),
    });
  }

  describe(turnId: number): Promise<StreamState | null> {
    return this.streams.describe(turnStreamKey(turnId));
  }
}
