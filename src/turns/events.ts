import type { TurnEvent } from '../streams/protocol.js';
import type { StreamEvent } from '../streams/stream-hub.js';

/** The stream key of a chat turn's events (also the Idempotency-Key stream reference). */
export const turnStreamKey = (turnId: number) => `chat-turn:${turnId}`;

export function turnIdOfStreamKey(key: string): number | null {
  const match = /^chat-turn:(\d+)$/.exec(key);
  return match ? Number(match[1]) : null;
}

/** A stored event of a turn's stream: turns publish only TurnEvents (src/streams/protocol.ts). */
export const asTurnEvent = (event: StreamEvent) => ({ name: event.name, data: event.data }) as TurnEvent;
