import { describe, expect, it } from 'vitest';
import {
  InProcessTurnEventHub,
  isTerminal,
  type NumberedTurnEvent,
  TurnPublisher,
} from '../src/modules/chats/turn-events.js';

describe('turn events (the publisher interface SSE relays and later stores build on)', () => {
  it('numbers each turn from 1 and delivers live events in order', async () => {
    const hub = new InProcessTurnEventHub();
    const seen: NumberedTurnEvent[] = [];
    hub.subscribe(7, 0, (event) => seen.push(event));
    const publisher = new TurnPublisher(hub, 7);
    await publisher.publish({ name: 'content', data: { content: 'a' } });
    await publisher.publish({ name: 'content', data: { content: 'b' } });
    await new TurnPublisher(hub, 8).publish({ name: 'content', data: { content: 'other turn' } });
    expect(seen.map((e) => [e.turnId, e.seq, e.name, e.data])).toEqual([
      [7, 1, 'content', { content: 'a' }],
      [7, 2, 'content', { content: 'b' }],
    ]);
    expect(publisher.lastSeq).toBe(2);
    hub.clear();
  });

  it('replays what a late subscriber missed after the given seq, then goes live', async () => {
    const hub = new InProcessTurnEventHub();
    const publisher = new TurnPublisher(hub, 1);
    await publisher.publish({ name: 'content', data: { content: 'one' } });
    await publisher.publish({ name: 'content', data: { content: 'two' } });
    const seen: number[] = [];
    const unsubscribe = hub.subscribe(1, 1, (event) => seen.push(event.seq));
    expect(seen).toEqual([2]);
    await publisher.publish({ name: 'done', data: { message: {} as never } });
    expect(seen).toEqual([2, 3]);
    unsubscribe();
    await publisher.publish({ name: 'content', data: { content: 'after' } });
    expect(seen).toEqual([2, 3]);
    hub.clear();
  });

  it('keeps a finished turn for replay until its retention ends', async () => {
    const hub = new InProcessTurnEventHub(30);
    const publisher = new TurnPublisher(hub, 3);
    await publisher.publish({ name: 'error', data: { message: 'failed', code: 500 } });
    const replay = (): string[] => {
      const names: string[] = [];
      hub.subscribe(3, 0, (event) => names.push(event.name))();
      return names;
    };
    expect(replay()).toEqual(['error']);
    await new Promise((resolve) => setTimeout(resolve, 60));
    expect(replay()).toEqual([]);
  });

  it('done and error end a turn', () => {
    expect(isTerminal({ name: 'done', data: { message: {} as never } })).toBe(true);
    expect(isTerminal({ name: 'error', data: { message: 'x', code: 409 } })).toBe(true);
    expect(isTerminal({ name: 'content', data: { content: 'x' } })).toBe(false);
    expect(
      isTerminal({
        name: 'tool_result',
        data: { tool_call_id: 'c', tool_name: 't', result: null, error: null, execution_time_ms: 1 },
      }),
    ).toBe(false);
  });
});
