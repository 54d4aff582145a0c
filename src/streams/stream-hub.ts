import { performance } from 'node:perf_hooks';
import type { FastifyBaseLogger } from 'fastify';
import type { Database } from '../db/client.js';
import { Notifier } from './notifier.js';
import { isFinalEvent } from './protocol.js';

/** One event of a stream; `seq` counts 1, 2, 3... per stream and is the SSE `id:`. */
export interface StreamEvent {
  seq: number;
  name: string;
  data: unknown;
  /**
   * `data` as JSON, encoded once when published here: the SSE write and the stored row share it
   * (absent on events read back from the table).
   */
  json?: string;
}

/**
 * Why a subscription ended without (or after) its stream's last event: `ended` (everything was
 * delivered), `lost` (the publishing process stopped vouching for the stream before it ended),
 * `closing` (this process is shutting down; the client may reattach elsewhere).
 */
export type StreamEnd = 'ended' | 'lost' | 'closing';

export interface StreamListener {
  onEvent(event: StreamEvent): void;
  /** Called once, last. */
  onEnd(reason: StreamEnd): void;
}

export interface SubscribeOptions {
  /**
   * For readers in other processes: whether the stream's work is known to have stopped without
   * ending it (a chat turn whose lease ran out). Asked once the reader has every stored event and
   * the stream has not ended; true ends the subscription as `lost` without waiting for the
   * stream's own liveness to lapse.
   */
  abandoned?: () => Promise<boolean>;
}

export interface StreamState {
  lastSeq: number;
  ended: boolean;
}

export interface StreamHubOptions {
  /** How long events wait to be written together. */
  flushMs: number;
  /**
   * How long a stream's last event waits at most, so that the last events of streams ending close
   * together (and the other streams' pending events) share one statement; 0 writes it at once.
   * Local readers have it already (it is delivered before it is stored, as every event); readers
   * in other processes get it when it is written.
   */
  finalFlushMs: number;
  /** How long a stream stays vouched for without renewal; open streams renew every third of it. */
  aliveMs: number;
  /** How often a reader in another process checks the table (besides being woken by NOTIFY). */
  pollMs: number;
  /**
   * How long a finished stream's events stay in this process's memory for local readers; later
   * readers read them from the table, where the stream's last event is written within
   * `finalFlushMs` (and retried for about 2 s when a write fails).
   */
  retainLocalMs: number;
  /** How long stored events are kept after their stream ended (idempotent repeats replay them). */
  retentionMs: number;
}

export const DEFAULT_STREAM_HUB_OPTIONS: StreamHubOptions = {
  flushMs: 75,
  finalFlushMs: 15,
  aliveMs: 60_000,
  pollMs: 1_000,
  // At 240 replies a second, 15 s held 3,600 finished streams and about 30 MB of RSS at C=500
  // (docs/decisions.md, "Finished streams in memory for 5 s").
  retainLocalMs: 5_000,
  retentionMs: 24 * 3600_000,
};

const EVENTS_CHANNEL = 'scriptorium_stream_events';
const NOTIFY_PAYLOAD_MAX = 7000;
const FETCH_LIMIT = 500;
const PRUNE_EVERY_MS = 10 * 60_000;
/** A batch the database keeps refusing (not a transient failure) is dropped after this many tries. */
const MAX_WRITE_ATTEMPTS = 5;

interface LocalStream {
  events: StreamEvent[];
  listeners: Set<StreamListener>;
  ended: boolean;
  expiry?: NodeJS.Timeout;
}

/** An event of a finished stream kept in memory: its JSON, and `data` decoded when asked. */
class RetainedEvent implements StreamEvent {
  constructor(
    readonly seq: number,
    readonly name: string,
    readonly json: string,
  ) {}

  get data(): unknown {
    return JSON.parse(this.json);
  }
}

interface PendingEvent {
  key: string;
  seq: number;
  name: string;
  /** The event's data as JSON (StreamEvent.json). */
  json: string;
  final: boolean;
}

/**
 * Where streams are published and read, in any process sharing the database.
 *
 * The publishing process fans events out to its own subscribers at once, in memory, and writes
 * them to `stream_events` in batches (one multi-row INSERT and one NOTIFY per flush, at most every
 * `flushMs`; a stream's last event within `finalFlushMs`; its head row when it opens, ends and is
 * kept alive). Readers in other processes (or after this process forgot a finished stream) read
 * the table after their last `seq` when notified, and on a short poll as a fallback. So a
 * reconnecting client can be served by any process, with no gap or duplicate, and nothing beyond
 * the database is needed.
 */
export class StreamHub {
  readonly notifier: Notifier;
  private readonly options: StreamHubOptions;
  private readonly local = new Map<string, LocalStream>();
  private readonly remote = new Map<string, Set<RemoteSubscription>>();
  private pending: PendingEvent[] = [];
  /** Streams whose head row must be written even without events (opened, or kept alive). */
  private heads = new Set<string>();
  private timer: NodeJS.Timeout | null = null;
  /** When `timer` fires (performance.now()). */
  private timerDue = 0;
  /** Last events waiting for the next write: resolved (or rejected) with it. */
  private finalsWritten: {
    promise: Promise<void>;
    resolve: () => void;
    reject: (err: unknown) => void;
  } | null = null;
  private chain: Promise<void> = Promise.resolve();
  private failedAttempts = 0;
  private keepAlive: NodeJS.Timeout | null = null;
  private listening: Promise<void> | null = null;
  private lastPrune = 0;
  private closed = false;

  constructor(
    readonly database: Database,
    readonly log: FastifyBaseLogger,
    options: Partial<StreamHubOptions> = {},
  ) {
    this.options = { ...DEFAULT_STREAM_HUB_OPTIONS, ...options };
    this.notifier = new Notifier(database, log);
    this.notifier.onReconnect(() => {
      for (const subs of this.remote.values()) for (const sub of subs) sub.wake();
    });
  }

  get pollMs(): number {
    return this.options.pollMs;
  }

  get aliveMs(): number {
    return this.options.aliveMs;
  }

  /** Starts a stream published by this process; its head row is written with the next flush. */
  open(key: string): void {
    if (this.local.has(key)) return;
    this.local.set(key, { events: [], listeners: new Set(), ended: false });
    this.heads.add(key);
    this.scheduleFlush();
    this.startKeepAlive();
    void this.ensureListening();
  }

  /**
   * Publishes the stream's next event (`seq` = previous + 1). Subscribers in this process get it
   * before this returns; the promise resolves at once, or for the last event once it is written.
   */
  publish(key: string, seq: number, name: string, data: unknown, final = isFinalEvent(name)): Promise<void> {
    if (!this.local.has(key)) this.open(key);
    const stream = this.local.get(key)!;
    if (stream.ended) return Promise.resolve();
    const json = JSON.stringify(data) ?? 'null';
    const event: StreamEvent = { seq, name, data, json };
    stream.events.push(event);
    if (stream.listeners.size === 1) for (const listener of stream.listeners) this.deliver(listener, event);
    else if (stream.listeners.size > 1)
      for (const listener of [...stream.listeners]) this.deliver(listener, event);
    this.pending.push({ key, seq, name, json, final });
    if (!final) {
      this.scheduleFlush();
      return Promise.resolve();
    }
    stream.ended = true;
    for (const listener of [...stream.listeners]) this.end(listener, 'ended');
    stream.listeners.clear();
    // Kept for late local readers only: the JSON is all the SSE relay needs, and `data` is decoded
    // from it for the rare reader that wants it, so a finished stream holds one copy of each event.
    stream.events = stream.events.map((e) => new RetainedEvent(e.seq, e.name, e.json!));
    stream.expiry = setTimeout(() => this.local.delete(key), this.options.retainLocalMs);
    stream.expiry.unref();
    return this.flushWithin(this.options.finalFlushMs);
  }

  /**
   * Delivers the stream's events with `seq > afterSeq` in order (stored ones first, then live
   * ones), then `onEnd`. Returns the function that stops the subscription.
   */
  subscribe(
    key: string,
    afterSeq: number,
    listener: StreamListener,
    options: SubscribeOptions = {},
  ): () => void {
    const stream = this.local.get(key);
    if (stream) {
      for (const event of stream.events) if (event.seq > afterSeq) this.deliver(listener, event);
      if (stream.ended) {
        this.end(listener, 'ended');
        return () => {};
      }
      stream.listeners.add(listener);
      return () => stream.listeners.delete(listener);
    }
    const sub = new RemoteSubscription(this, key, afterSeq, listener, options.abandoned);
    let subs = this.remote.get(key);
    if (!subs) {
      subs = new Set();
      this.remote.set(key, subs);
    }
    subs.add(sub);
    void sub.start();
    return () => sub.stop();
  }

  /** How far a stream got, from memory when it is published here, else from its head row. */
  async describe(key: string): Promise<StreamState | null> {
    const stream = this.local.get(key);
    if (stream) return { lastSeq: stream.events.at(-1)?.seq ?? 0, ended: stream.ended };
    const { rows } = await this.database.query<{ last_seq: number; ended: boolean }>(HEAD_SQL, [key]);
    return rows[0] ? { lastSeq: Number(rows[0].last_seq), ended: rows[0].ended } : null;
  }

  /** Writes everything pending now; resolves when written (or when the write failed and will be retried). */
  flush(): Promise<void> {
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = null;
    }
    const run = this.chain.then(() => this.writeBatch());
    this.chain = run.catch(() => {});
    const finals = this.finalsWritten;
    if (finals) {
      this.finalsWritten = null;
      run.then(finals.resolve, finals.reject);
    }
    return run;
  }

  /**
   * Ends a stream whose publisher is gone (it is not published by this process): appends the event
   * after the stored ones as the stream's last, and wakes every reader. False when the stream had
   * ended already.
   */
  async endAbandoned(key: string, name: string, data: unknown): Promise<boolean> {
    const { rows } = await this.database.query(END_ABANDONED_SQL, [
      key,
      name,
      jsonForDatabase(data),
      EVENTS_CHANNEL,
    ]);
    return rows.length > 0;
  }

  /** Ends the subscriptions served from the table (shutdown): their clients can reattach elsewhere. */
  detachRemote(): void {
    for (const subs of [...this.remote.values()]) for (const sub of [...subs]) sub.finish('closing');
  }

  async close(): Promise<void> {
    this.detachRemote();
    await this.flush();
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    if (this.keepAlive) clearInterval(this.keepAlive);
    for (const stream of this.local.values()) clearTimeout(stream.expiry);
    this.local.clear();
    await this.notifier.close();
  }

  // ---- internals shared with RemoteSubscription ----

  deliver(listener: StreamListener, event: StreamEvent): void {
    try {
      listener.onEvent(event);
    } catch (err) {
      this.log.error({ err }, 'stream listener failed');
    }
  }

  end(listener: StreamListener, reason: StreamEnd): void {
    try {
      listener.onEnd(reason);
    } catch (err) {
      this.log.error({ err }, 'stream listener failed');
    }
  }

  forget(sub: RemoteSubscription): void {
    const subs = this.remote.get(sub.key);
    subs?.delete(sub);
    if (subs?.size === 0) this.remote.delete(sub.key);
  }

  ensureListening(): Promise<void> {
    this.listening ??= this.notifier
      .listen(EVENTS_CHANNEL, (payload) => this.onNotification(payload))
      .catch((err) => {
        this.log.warn({ err }, 'could not LISTEN for stream events; readers poll instead');
      });
    return this.listening;
  }

  // ---- internals ----

  private onNotification(payload: string) {
    for (const line of payload.split('\n')) {
      const space = line.lastIndexOf(' ');
      const subs = this.remote.get(line.slice(0, space));
      if (!subs) continue;
      const seq = Number(line.slice(space + 1));
      for (const sub of subs) if (sub.delivered < seq) sub.wake();
    }
  }

  private scheduleFlush(delay = this.options.flushMs) {
    if (this.timer || this.closed) return;
    this.armTimer(delay);
  }

  /**
   * Writes what is pending within `delay` (sooner if a flush was due sooner); resolves once a
   * write that includes everything pending now is done.
   */
  private flushWithin(delay: number): Promise<void> {
    if (delay <= 0 || this.closed) return this.flush();
    if (!this.timer || this.timerDue > performance.now() + delay) {
      if (this.timer) clearTimeout(this.timer);
      this.armTimer(delay);
    }
    // Someone awaits this write (a turn's end): it must happen even if nothing else keeps the process up.
    this.timer!.ref();
    if (!this.finalsWritten) {
      let resolve!: () => void;
      let reject!: (err: unknown) => void;
      const promise = new Promise<void>((res, rej) => {
        resolve = res;
        reject = rej;
      });
      this.finalsWritten = { promise, resolve, reject };
    }
    return this.finalsWritten.promise;
  }

  private armTimer(delay: number) {
    this.timerDue = performance.now() + delay;
    this.timer = setTimeout(() => {
      this.timer = null;
      void this.flush();
    }, delay);
    this.timer.unref();
  }

  private startKeepAlive() {
    if (this.keepAlive || this.closed) return;
    this.keepAlive = setInterval(
      () => {
        let open = false;
        for (const [key, stream] of this.local) {
          if (stream.ended) continue;
          this.heads.add(key);
          open = true;
        }
        if (open) void this.flush();
      },
      Math.max(50, Math.floor(this.options.aliveMs / 3)),
    );
    this.keepAlive.unref();
  }

  private async writeBatch(): Promise<void> {
    if (this.closed || (this.pending.length === 0 && this.heads.size === 0)) return;
    const batch = this.pending;
    const heads = this.heads;
    this.pending = [];
    this.heads = new Set();

    const last = new Map<string, { seq: number; final: boolean }>();
    for (const key of heads) last.set(key, { seq: 0, final: false });
    for (const event of batch) {
      const head = last.get(event.key);
      last.set(event.key, {
        seq: Math.max(head?.seq ?? 0, event.seq),
        final: (head?.final ?? false) || event.final,
      });
    }
    // A head row is written when its stream opens, ends or is kept alive, not with every batch of
    // its events: readers take the stream's last seq from the events themselves (HEAD_SQL), and
    // rewriting every open stream's head per flush was most of the flush's cost (docs/decisions.md,
    // "Stream heads written on open, end and keep-alive").
    const written: { k: string; s: number; f: boolean }[] = [];
    for (const [k, head] of last)
      if (head.final || heads.has(k)) written.push({ k, s: head.seq, f: head.final });
    const notices = batch.length === 0 ? [] : notifyPayloads(last);
    try {
      await this.database.pipelinedQuery('stream_events_write', WRITE_BATCH_SQL, [
        batchJson(batch),
        JSON.stringify(written),
        this.options.aliveMs / 1000,
        EVENTS_CHANNEL,
        JSON.stringify(notices),
      ]);
      this.failedAttempts = 0;
    } catch (err) {
      this.failedAttempts += 1;
      if (this.failedAttempts >= MAX_WRITE_ATTEMPTS) {
        this.log.error({ err, events: batch.length }, 'could not store stream events; dropping them');
        this.failedAttempts = 0;
      } else {
        this.log.warn({ err, events: batch.length }, 'could not store stream events; retrying');
        this.pending = [...batch, ...this.pending];
        for (const key of heads) this.heads.add(key);
        this.scheduleFlush(this.options.flushMs * 2 ** this.failedAttempts);
      }
      return;
    }
    if (batch.some((e) => e.final) && Date.now() - this.lastPrune > PRUNE_EVERY_MS) {
      this.lastPrune = Date.now();
      void this.prune().catch((err) => this.log.warn({ err }, 'could not prune old stream events'));
    }
  }

  /** Drops streams ended (or abandoned) longer ago than the retention, with their events. */
  private async prune(): Promise<void> {
    await this.database.query(PRUNE_SQL, [this.options.retentionMs / 1000]);
  }
}

/**
 * Events, heads and NOTIFY in one statement: one round trip per flush. `on conflict do nothing`
 * makes a retried batch harmless; `greatest`/`coalesce` keep heads monotonic.
 */
const WRITE_BATCH_SQL = `
with ins as (
  insert into stream_events (stream_key, seq, event, data)
  select e.k, e.s, e.n, e.d from jsonb_to_recordset($1::jsonb) as e(k text, s int, n text, d jsonb)
  on conflict do nothing
), heads as (
  insert into event_streams (key, last_seq, alive_until, ended_at)
  select h.k, h.s, now() + make_interval(secs => $3::float8), case when h.f then now() end
  from jsonb_to_recordset($2::jsonb) as h(k text, s int, f boolean)
  on conflict (key) do update set
    last_seq = greatest(event_streams.last_seq, excluded.last_seq),
    alive_until = excluded.alive_until,
    ended_at = coalesce(event_streams.ended_at, excluded.ended_at)
)
select pg_notify($4, p) from jsonb_array_elements_text($5::jsonb) as p`;

/**
 * A stream's head: how far it got, whether it ended, whether its publisher stopped vouching for
 * it. `last_seq` of the row is only as recent as the stream's last head write (open, keep-alive,
 * end), so the stored events' highest seq (the primary key's last entry) completes it.
 */
const HEAD_SQL = `
select greatest(h.last_seq, coalesce((select max(e.seq) from stream_events e where e.stream_key = h.key), 0)) as last_seq,
  h.ended_at is not null as ended, h.alive_until < now() as dead
from event_streams h where h.key = $1`;

/** One event after a dead publisher's stored ones, the head marked ended, and the NOTIFY. */
const END_ABANDONED_SQL = `
with head as (
  select coalesce((select max(seq) from stream_events where stream_key = $1), 0) as seq,
         coalesce((select ended_at is not null from event_streams where key = $1), false) as ended
), ins as (
  insert into stream_events (stream_key, seq, event, data)
  select $1, head.seq + 1, $2, $3::jsonb from head where not head.ended
  on conflict do nothing
  returning seq
), heads as (
  insert into event_streams (key, last_seq, alive_until, ended_at)
  select $1, ins.seq, now(), now() from ins
  on conflict (key) do update set
    last_seq = greatest(event_streams.last_seq, excluded.last_seq),
    ended_at = coalesce(event_streams.ended_at, excluded.ended_at)
)
select pg_notify($4, $1 || ' ' || ins.seq) from ins`;

const PRUNE_SQL = `
with old as (
  delete from event_streams
  where ended_at < now() - make_interval(secs => $1::float8)
     or (ended_at is null and alive_until < now() - make_interval(secs => $1::float8))
  returning key
)
delete from stream_events where stream_key in (select key from old)`;

/** `key seq` lines, split so each NOTIFY payload stays under PostgreSQL's 8000-byte limit. */
function notifyPayloads(last: Map<string, { seq: number }>): string[] {
  const payloads: string[] = [];
  let current = '';
  for (const [key, { seq }] of last) {
    if (seq === 0) continue;
    const line = `${key} ${seq}`;
    if (current && current.length + line.length + 1 > NOTIFY_PAYLOAD_MAX) {
      payloads.push(current);
      current = '';
    }
    current = current ? `${current}\n${line}` : line;
  }
  if (current) payloads.push(current);
  return payloads;
}

/**
 * The batch parameter of WRITE_BATCH_SQL, built around each event's JSON as published (no second
 * encoding of the data); jsonb refuses NUL characters, which become U+FFFD.
 */
function batchJson(batch: PendingEvent[]): string {
  let out = '[';
  for (let i = 0; i < batch.length; i++) {
    const e = batch[i]!;
    const data = e.json.includes('\\u0000') ? jsonForDatabase(JSON.parse(e.json)) : e.json;
    out += `${i === 0 ? '' : ','}{"k":${JSON.stringify(e.key)},"s":${e.seq},"n":${JSON.stringify(e.name)},"d":${data}}`;
  }
  return `${out}]`;
}

/** JSON for a jsonb parameter; jsonb refuses NUL characters, which become U+FFFD. */
function jsonForDatabase(value: unknown): string {
  const json = JSON.stringify(value);
  if (!json.includes('\\u0000')) return json;
  return JSON.stringify(value, (_key, v) => (typeof v === 'string' ? v.replaceAll('\u0000', '\ufffd') : v));
}

/**
 * A reader of a stream published by another process (or one this process no longer holds): reads
 * rows after its last delivered `seq` when woken by NOTIFY and every `pollMs`, and checks the
 * stream's head to notice its end or its publisher's death.
 */
class RemoteSubscription {
  delivered: number;
  private stopped = false;
  private fetching = false;
  private again = false;
  private poller: NodeJS.Timeout | null = null;
  private readonly startedAt = Date.now();

  constructor(
    private readonly hub: StreamHub,
    readonly key: string,
    afterSeq: number,
    private readonly listener: StreamListener,
    private readonly abandoned?: () => Promise<boolean>,
  ) {
    this.delivered = afterSeq;
  }

  private async isAbandoned(): Promise<boolean> {
    if (!this.abandoned) return false;
    try {
      return await this.abandoned();
    } catch (err) {
      this.hub.log.warn({ err, key: this.key }, 'could not tell whether a stream was abandoned');
      return false;
    }
  }

  async start(): Promise<void> {
    await this.hub.ensureListening();
    await this.check();
    if (this.stopped) return;
    this.poller = setInterval(() => void this.check(), this.hub.pollMs);
    this.poller.unref();
  }

  stop(): void {
    if (this.stopped) return;
    this.stopped = true;
    if (this.poller) clearInterval(this.poller);
    this.hub.forget(this);
  }

  finish(reason: StreamEnd): void {
    if (this.stopped) return;
    this.stop();
    this.hub.end(this.listener, reason);
  }

  /** Reads what is new (NOTIFY said so). */
  wake(): void {
    void this.fetch().catch((err) =>
      this.hub.log.warn({ err, key: this.key }, 'could not read stream events'),
    );
  }

  private async fetch(): Promise<void> {
    if (this.fetching) {
      this.again = true;
      return;
    }
    this.fetching = true;
    try {
      let full: boolean;
      do {
        this.again = false;
        const { rows } = await this.hub.database.query<{ seq: number; event: string; data: unknown }>(
          'select seq, event, data from stream_events where stream_key = $1 and seq > $2 order by seq limit $3',
          [this.key, this.delivered, FETCH_LIMIT],
        );
        full = rows.length === FETCH_LIMIT;
        for (const row of rows) {
          if (this.stopped) return;
          const event: StreamEvent = { seq: Number(row.seq), name: row.event, data: row.data };
          this.delivered = event.seq;
          this.hub.deliver(this.listener, event);
          if (isFinalEvent(event.name)) {
            this.finish('ended');
            return;
          }
        }
      } while ((this.again || full) && !this.stopped);
    } finally {
      this.fetching = false;
    }
  }

  /** The poll: new rows, the stream's end, or its publisher gone. */
  private async check(): Promise<void> {
    if (this.stopped) return;
    try {
      const { rows } = await this.hub.database.query<{ last_seq: number; ended: boolean; dead: boolean }>(
        HEAD_SQL,
        [this.key],
      );
      const head = rows[0];
      if (!head) {
        // Not written yet (its first flush is on the way), or never: give up after a lease's length.
        if (Date.now() - this.startedAt > this.hub.aliveMs || (await this.isAbandoned())) this.finish('lost');
        return;
      }
      const lastSeq = Number(head.last_seq);
      if (lastSeq > this.delivered) await this.fetch();
      // Still behind (a concurrent read is delivering): the next check decides.
      if (this.stopped || this.delivered < lastSeq) return;
      if (head.ended) this.finish('ended');
      else if (head.dead || (await this.isAbandoned())) this.finish('lost');
    } catch (err) {
      this.hub.log.warn({ err, key: this.key }, 'could not read a stream head');
    }
  }
}
