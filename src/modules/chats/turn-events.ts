import type { StreamEnd, StreamState } from '../streams/stream-hub.js';
import type { ChatView, MessageView } from './schemas.js';

/** The chat stream events of spec 6.1, as the turn publishes them. */
export type TurnEvent =
  | { name: 'content'; data: { content: string } }
  | {
      name: 'tool_start';
      data: { tool_call_id: string; tool_name: string; parameters: Record<string, unknown> };
    }
  | {
      name: 'tool_result';
      data: {
        tool_call_id: string;
        tool_name: string;
        result: unknown;
        error: { message: string } | null;
        execution_time_ms: number;
      };
    }
  | { name: 'done'; data: { message: MessageView; chat?: ChatView } }
  | { name: 'error'; data: { message: string; code: number; chat?: ChatView } };

export type TurnEventName = TurnEvent['name'];

/** An event with its place in the turn: `seq` counts 1, 2, 3... per turn. */
export type NumberedTurnEvent = TurnEvent & { turnId: number; seq: number };

export const isTerminal = (event: TurnEvent) => event.name === 'done' || event.name === 'error';

/**
 * Where turns publish and listeners (SSE responses) subscribe. The in-process hub below fans out
 * within one process; the app's default, `StoredTurnEventHub` (stored-turn-events.ts), also keeps
 * every event in the database so any process can replay a turn's stream from a given `seq`.
 */
export interface TurnEventHub {
  /** Called when the turn starts, before its first event. */
  open?(turnId: number): void;
  /** Called in `seq` order by the turn's one publisher; resolves once the event is deliverable. */
  publish(event: NumberedTurnEvent): Promise<void>;
  /**
   * Delivers the turn's events with `seq > afterSeq`: those already published first, then live
   * ones, in order, until the returned function is called. `onEnd`, when the hub can tell, reports
   * that nothing more will come (`lost`: the process running the turn stopped before its end).
   */
  subscribe(
    turnId: number,
    afterSeq: number,
    listener: (event: NumberedTurnEvent) => void,
    onEnd?: (reason: StreamEnd) => void,
  ): () => void;
  /** How far the turn's stream got; null when the hub knows nothing of it. */
  describe(turnId: number): Promise<StreamState | null>;
}

/** Numbers a turn's events and hands them to the hub; the runner's only way to emit. */
export class TurnPublisher {
  private seq = 0;

  constructor(
    private readonly hub: TurnEventHub,
    readonly turnId: number,
  ) {
    hub.open?.(turnId);
  }

  get lastSeq(): number {
    return this.seq;
  }

  publish(event: TurnEvent): Promise<void> {
    this.seq += 1;
    return this.hub.publish({ ...event, turnId: this.turnId, seq: this.seq } as NumberedTurnEvent);
  }
}

interface TurnLog {
  events: NumberedTurnEvent[];
  listeners: Set<(event: NumberedTurnEvent) => void>;
  expiry?: NodeJS.Timeout;
}

/**
 * In-process fan-out with a replay buffer per turn, so a listener that subscribes after the turn
 * started (or reconnects within this process) still sees every event. A finished turn's buffer is
 * dropped after `retainMs`.
 */
export class InProcessTurnEventHub implements TurnEventHub {
  private readonly turns = new Map<number, TurnLog>();

  constructor(private readonly retainMs = 60_000) {}

  async publish(event: NumberedTurnEvent): Promise<void> {
    const log = this.logOf(event.turnId);
    log.events.push(event);
    for (const listener of [...log.listeners]) listener(event);
    if (isTerminal(event)) {
      log.expiry = setTimeout(() => this.turns.delete(event.turnId), this.retainMs);
      log.expiry.unref();
    }
  }

  subscribe(turnId: number, afterSeq: number, listener: (event: NumberedTurnEvent) => void): () => void {
    const log = this.logOf(turnId);
    for (const event of log.events) if (event.seq > afterSeq) listener(event);
    log.listeners.add(listener);
    return () => {
      log.listeners.delete(listener);
      // A log that never got an event (no such turn here) must not linger.
      if (log.listeners.size === 0 && log.events.length === 0) this.turns.delete(turnId);
    };
  }

  async describe(turnId: number): Promise<StreamState | null> {
    const log = this.turns.get(turnId);
    if (!log || log.events.length === 0) return null;
    return { lastSeq: log.events.at(-1)!.seq, ended: log.events.some(isTerminal) };
  }

  /** Drops every buffer (app shutdown). */
  clear(): void {
    for (const log of this.turns.values()) clearTimeout(log.expiry);
    this.turns.clear();
  }

  private logOf(turnId: number): TurnLog {
    let log = this.turns.get(turnId);
    if (!log) {
      log = { events: [], listeners: new Set() };
      this.turns.set(turnId, log);
    }
    return log;
  }
}
