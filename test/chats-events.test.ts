import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isFinalEvent, type TurnEvent } from '../src/streams/protocol.js';
import { StreamPublisher } from '../src/streams/publisher.js';
import { type StreamEnd, type StreamEvent, StreamHub } from '../src/streams/stream-hub.js';
import { turnStreamKey } from '../src/turns/events.js';
import { testLog } from './helpers/app.js';
import { createTestDatabase, type TestDatabase } from './helpers/database.js';
import { sleep } from './streams-support.js';

// Turns publish through the real stream hub (on the test database), as the app does.
describe('turn events (numbered by the publisher, delivered by the stream hub)', () => {
  let testDb: TestDatabase;
  const hubs: StreamHub[] = [];
  const hubOf = (options: ConstructorParameters<typeof StreamHub>[2] = {}) => {
    const hub = new StreamHub(testDb.database, testLog(), options);
    hubs.push(hub);
    return hub;
  };
  const publisherOf = (hub: StreamHub, turnId: number) =>
    new StreamPublisher<TurnEvent>(hub, turnStreamKey(turnId));

  beforeAll(async () => {
    testDb = await createTestDatabase();
  });
  afterAll(async () => {
    for (const hub of hubs) await hub.close();
    await testDb.drop();
  });

  it('numbers each turn from 1 and delivers live events in order', async () => {
    const hub = hubOf();
    const seen: StreamEvent[] = [];
    const publisher = publisherOf(hub, 7);
    hub.subscribe(turnStreamKey(7), 0, { onEvent: (event) => seen.push(event), onEnd: () => {} });
    await publisher.publish({ name: 'content', data: { content: 'a' } });
    await publisher.publish({ name: 'content', data: { content: 'b' } });
    await publisherOf(hub, 8).publish({ name: 'content', data: { content: 'other turn' } });
    expect(seen.map((e) => [e.seq, e.name, e.data])).toEqual([
      [1, 'content', { content: 'a' }],
      [2, 'content', { content: 'b' }],
    ]);
    expect(publisher.lastSeq).toBe(2);
  });

  it('replays what a late subscriber missed after the given seq, then goes live', async () => {
    const hub = hubOf();
    const publisher = publisherOf(hub, 1);
    await publisher.publish({ name: 'content', data: { content: 'one' } });
    await publisher.publish({ name: 'content', data: { content: 'two' } });
    const seen: number[] = [];
    const unsubscribe = hub.subscribe(turnStreamKey(1), 1, {
      onEvent: (event) => seen.push(event.seq),
      onEnd: () => {},
    });
    expect(seen).toEqual([2]);
    await publisher.publish({ name: 'content', data: { content: 'three' } });
    expect(seen).toEqual([2, 3]);
    unsubscribe();
    await publisher.publish({ name: 'content', data: { content: 'after' } });
    expect(seen).toEqual([2, 3]);
  });

  it('replays a finished turn from memory, and from the database once the memory forgot it', async () => {
    const hub = hubOf({ retainLocalMs: 30 });
    await publisherOf(hub, 3).publish({ name: 'error', data: { message: 'failed', code: 500 } });
    const replay = async (): Promise<{ names: string[]; end: StreamEnd | null }> => {
      const names: string[] = [];
      let end: StreamEnd | null = null;
      const stop = hub.subscribe(turnStreamKey(3), 0, {
        onEvent: (event) => names.push(event.name),
        onEnd: (reason) => {
          end = reason;
        },
      });
      for (let waited = 0; end === null && waited < 3000; waited += 10) await sleep(10);
      stop();
      return { names, end };
    };
    expect(await replay()).toEqual({ names: ['error'], end: 'ended' });
    await sleep(60);
    expect(await replay()).toEqual({ names: ['error'], end: 'ended' });
  });

  it('done and error end a stream; other events do not', () => {
    expect(isFinalEvent('done')).toBe(true);
    expect(isFinalEvent('error')).toBe(true);
    expect(isFinalEvent('content')).toBe(false);
    expect(isFinalEvent('tool_result')).toBe(false);
    expect(isFinalEvent('chunk')).toBe(false);
  });
});
