import os from 'node:os';
import { eq, inArray, sql } from 'drizzle-orm';
import Fastify from 'fastify';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { type Database, openDatabase } from '../src/db/client.js';
import { eventStreams, streamEvents } from '../src/db/schema/index.js';
import {
  type StreamEnd,
  type StreamEvent,
  StreamHub,
  type StreamHubOptions,
} from '../src/streams/stream-hub.js';
import { backend, createTestDatabase, type TestDatabase } from './helpers/database.js';
import { sleep } from './streams-support.js';

// A real (silent) logger, as the app would pass.
const log = Fastify({ logger: false }).log;

let testDb: TestDatabase;
/** The database as a second process sees it: its own pool on PostgreSQL, the same instance on PGlite. */
let other: Database;
const hubs: StreamHub[] = [];

beforeAll(async () => {
  testDb = await createTestDatabase();
  other =
    backend === 'postgres'
      ? await openDatabase({ databaseUrl: testDb.url, dataDir: os.tmpdir(), poolSize: 2 })
      : testDb.database;
});
afterAll(async () => {
  for (const hub of hubs) await hub.close();
  if (other !== testDb.database) await other.close();
  await testDb.drop();
});

function hub(database: Database, options: Partial<StreamHubOptions> = {}): StreamHub {
  const created = new StreamHub(database, log, options);
  hubs.push(created);
  return created;
}

function collect(target: StreamHub, key: string, after = 0) {
  const events: StreamEvent[] = [];
  let ended: StreamEnd | null = null;
  const stop = target.subscribe(key, after, {
    onEvent: (event) => events.push(event),
    onEnd: (reason) => {
      ended = reason;
    },
  });
  return { events, stop, ended: () => ended };
}

async function until(check: () => boolean, timeoutMs = 3000) {
  const started = Date.now();
  while (!check()) {
    if (Date.now() - started > timeoutMs) throw new Error('timed out');
    await sleep(10);
  }
}

describe('the stream hub', () => {
  it('subscribers in the publishing process get each event at once, before anything is written', async () => {
    const publisher = hub(testDb.database, { flushMs: 10_000 });
    const key = `test:local-${Math.random()}`;
    publisher.open(key);
    const reader = collect(publisher, key);
    await publisher.publish(key, 1, 'content', { content: 'a' });
    // With its JSON, encoded once for the SSE write and the stored row alike.
    expect(reader.events).toEqual([
      { seq: 1, name: 'content', data: { content: 'a' }, json: '{"content":"a"}' },
    ]);
    const stored = await testDb.database.db
      .select()
      .from(streamEvents)
      .where(eq(streamEvents.streamKey, key));
    expect(stored).toEqual([]);
    // The last event is written at once, with everything before it.
    await publisher.publish(key, 2, 'done', { ok: true });
    expect(reader.ended()).toBe('ended');
    const after = await testDb.database.db.select().from(streamEvents).where(eq(streamEvents.streamKey, key));
    expect(after.map((r) => r.seq).sort()).toEqual([1, 2]);
  });

  it('last events of streams ending within finalFlushMs share one write; each resolves once stored', async () => {
    const publisher = hub(testDb.database, { flushMs: 10_000, finalFlushMs: 60 });
    const [a, b] = [`test:final-a-${Math.random()}`, `test:final-b-${Math.random()}`];
    publisher.open(a);
    publisher.open(b);
    await publisher.flush();
    const spy = vi.spyOn(testDb.database, 'pipelinedQuery');
    try {
      const reader = collect(publisher, a);
      await publisher.publish(a, 1, 'content', { content: 'x' });
      const endA = publisher.publish(a, 2, 'done', { ok: 'a' });
      // Delivered to local readers at once, as every event; stored with the next write.
      expect(reader.events.map((e) => e.name)).toEqual(['content', 'done']);
      await sleep(15);
      const endB = publisher.publish(b, 1, 'done', { ok: 'b' });
      await endA;
      const stored = await testDb.database.db
        .select({ key: streamEvents.streamKey, seq: streamEvents.seq })
        .from(streamEvents)
        .where(inArray(streamEvents.streamKey, [a, b]));
      expect(stored.sort((x, y) => x.key.localeCompare(y.key) || x.seq - y.seq)).toEqual([
        { key: a, seq: 1 },
        { key: a, seq: 2 },
        { key: b, seq: 1 },
      ]);
      await endB;
      const writes = spy.mock.calls.filter(([, text]) => String(text).includes('insert into stream_events'));
      expect(writes).toHaveLength(1);
    } finally {
      spy.mockRestore();
    }
  });

  it('a finished stream replays from memory to a late local reader exactly as it went out live', async () => {
    const publisher = hub(testDb.database, { flushMs: 10_000 });
    const key = `test:retained-${Math.random()}`;
    publisher.open(key);
    const live = collect(publisher, key);
    await publisher.publish(key, 1, 'content', { content: 'caf\u00e9 \u0000' });
    await publisher.publish(key, 2, 'tool_start', { tool_call_id: 'c1', parameters: { q: [1, 'two'] } });
    await publisher.publish(key, 3, 'done', { message: { id: 7, content: 'x' } });
    const plain = (events: StreamEvent[]) =>
      events.map((e) => ({ seq: e.seq, name: e.name, data: e.data, json: e.json }));
    const late = collect(publisher, key);
    expect(late.ended()).toBe('ended');
    expect(plain(late.events)).toEqual(plain(live.events));
    // Only the JSON is kept for a finished stream; `data` is decoded from it when read.
    expect(Object.keys(late.events[0]!)).not.toContain('data');
    const middle = collect(publisher, key, 1);
    expect(middle.events.map((e) => e.seq)).toEqual([2, 3]);
  });

  it('another process is woken by NOTIFY (its poll is far off) and reads the rows in order', async () => {
    const publisher = hub(testDb.database, { flushMs: 20 });
    const remote = hub(other, { pollMs: 60_000 });
    const key = `test:notify-${Math.random()}`;
    publisher.open(key);
    await publisher.flush();
    const reader = collect(remote, key);
    await sleep(100);
    for (let seq = 1; seq <= 5; seq++) {
      await publisher.publish(key, seq, 'content', { content: `c${seq}` });
      await sleep(15);
    }
    await until(() => reader.events.length === 5, 2000);
    expect(reader.events.map((e) => e.seq)).toEqual([1, 2, 3, 4, 5]);
    await publisher.publish(key, 6, 'error', { message: 'x', code: 500 });
    await until(() => reader.ended() !== null, 2000);
    expect(reader.events.map((e) => e.name)).toEqual([
      'content',
      'content',
      'content',
      'content',
      'content',
      'error',
    ]);
    expect(reader.ended()).toBe('ended');
    // A later reader from the middle, and one past the end.
    const late = collect(remote, key, 4);
    await until(() => late.ended() !== null);
    expect(late.events.map((e) => e.seq)).toEqual([5, 6]);
    const past = collect(remote, key, 6);
    await until(() => past.ended() !== null);
    expect(past.events).toEqual([]);
    expect(past.ended()).toBe('ended');
    expect(await remote.describe(key)).toEqual({ lastSeq: 6, ended: true });
  });

  it("writes a live stream's head only when it opens; other processes still see how far it got", async () => {
    const publisher = hub(testDb.database, { flushMs: 5 });
    const remote = hub(other, { pollMs: 60_000 });
    const key = `test:head-${Math.random()}`;
    publisher.open(key);
    await publisher.flush();
    for (let seq = 1; seq <= 4; seq++) {
      await publisher.publish(key, seq, 'content', { content: `c${seq}` });
      await publisher.flush();
    }
    // Four batches of events, one head write (the open): the row says 0, the stream is at 4.
    const [head] = await testDb.database.db.select().from(eventStreams).where(eq(eventStreams.key, key));
    expect(head?.lastSeq).toBe(0);
    expect(await remote.describe(key)).toEqual({ lastSeq: 4, ended: false });
    // A reader starting from the middle gets the rest from its first check, not from a NOTIFY.
    const reader = collect(remote, key, 2);
    await until(() => reader.events.length === 2);
    expect(reader.events.map((e) => e.seq)).toEqual([3, 4]);
    await publisher.publish(key, 5, 'done', {});
    const [ended] = await testDb.database.db.select().from(eventStreams).where(eq(eventStreams.key, key));
    expect(ended?.lastSeq).toBe(5);
    expect(ended?.endedAt).not.toBeNull();
    expect(await remote.describe(key)).toEqual({ lastSeq: 5, ended: true });
  });

  it('a stream whose publisher stopped renewing it is reported lost after its last stored event', async () => {
    const publisher = new StreamHub(testDb.database, log, { aliveMs: 300 });
    const remote = hub(other, { pollMs: 100, aliveMs: 300 });
    const key = `test:lost-${Math.random()}`;
    await publisher.publish(key, 1, 'content', { content: 'only' });
    // The process dies: what it flushed stays, nothing renews it.
    await publisher.close();
    const reader = collect(remote, key);
    await until(() => reader.ended() !== null, 3000);
    expect(reader.events.map((e) => e.seq)).toEqual([1]);
    expect(reader.ended()).toBe('lost');
  });

  it('keeps an open stream alive while it is quiet', async () => {
    const publisher = hub(testDb.database, { aliveMs: 300 });
    const remote = hub(other, { pollMs: 100, aliveMs: 300 });
    const key = `test:quiet-${Math.random()}`;
    publisher.open(key);
    const reader = collect(remote, key);
    await sleep(900);
    expect(reader.ended()).toBeNull();
    await publisher.publish(key, 1, 'done', {});
    await until(() => reader.ended() !== null);
    expect(reader.ended()).toBe('ended');
  });

  it('prunes streams that ended longer ago than the retention, with their events', async () => {
    const db = testDb.database.db;
    const old = `test:old-${Math.random()}`;
    // Events before their head, as the hub itself writes them: test files share this database,
    // and a prune from another file that sees the head must see its events too (a prune that
    // started between a head and its events would delete the head and orphan the events).
    await db.insert(streamEvents).values({ streamKey: old, seq: 1, event: 'done', data: {} });
    await db.insert(eventStreams).values({
      key: old,
      lastSeq: 1,
      aliveUntil: sql`now() - interval '2 days'`,
      endedAt: sql`now() - interval '2 days'`,
    });
    const publisher = hub(testDb.database);
    const fresh = `test:fresh-${Math.random()}`;
    await publisher.publish(fresh, 1, 'done', {});
    // Pruning runs in the background after the flush of a stream's last event.
    let heads: { key: string }[] = [];
    for (let i = 0; i < 50; i++) {
      heads = await db
        .select()
        .from(eventStreams)
        .where(inArray(eventStreams.key, [old, fresh]));
      if (heads.length === 1) break;
      await sleep(20);
    }
    expect(heads.map((h) => h.key)).toEqual([fresh]);
    expect(await db.select().from(streamEvents).where(eq(streamEvents.streamKey, old))).toEqual([]);
  });

  it('stores text with NUL characters (jsonb refuses them) instead of losing the batch', async () => {
    const publisher = hub(testDb.database);
    const key = `test:nul-${Math.random()}`;
    await publisher.publish(key, 1, 'done', { content: 'a\u0000b' });
    const [row] = await testDb.database.db.select().from(streamEvents).where(eq(streamEvents.streamKey, key));
    expect(row.data).toEqual({ content: 'a\ufffdb' });
  });
});
