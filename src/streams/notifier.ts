import type { FastifyBaseLogger } from 'fastify';
import pg from 'pg';
import type { Database } from '../db/client.js';

type Handler = (payload: string) => void;

const RECONNECT_MS = 1000;

/**
 * PostgreSQL LISTEN/NOTIFY between the processes sharing a database. On PostgreSQL it holds one
 * dedicated connection (outside the pool, which stays whole for queries) and reconnects when it
 * drops; on PGlite it uses the embedded instance's own LISTEN. Notifications are only a wake-up
 * call: readers always read the table, and poll it too, so a lost notification costs latency only.
 */
export class Notifier {
  private readonly handlers = new Map<string, Set<Handler>>();
  private readonly reconnectHandlers = new Set<() => void>();
  /** Channels with a LISTEN in effect now (on the current connection, or PGlite's). */
  private readonly live = new Set<string>();
  private readonly liveHandlers = new Map<string, Set<(live: boolean) => void>>();
  private client: pg.Client | null = null;
  private connecting: Promise<void> | null = null;
  private readonly pgliteUnlisten = new Map<string, () => Promise<void>>();
  private retry: NodeJS.Timeout | null = null;
  private closed = false;

  constructor(
    private readonly database: Database,
    private readonly log: FastifyBaseLogger,
  ) {}

  /** Registers a handler; resolves once the channel is listened to (or failed to be, and will be retried). */
  async listen(channel: string, handler: Handler): Promise<void> {
    let set = this.handlers.get(channel);
    const isNew = !set;
    if (!set) {
      set = new Set();
      this.handlers.set(channel, set);
    }
    set.add(handler);
    if (isNew) await this.listenOn(channel);
    else await this.connecting;
  }

  /** Called after a dropped LISTEN connection came back: notifications may have been missed meanwhile. */
  onReconnect(handler: () => void): void {
    this.reconnectHandlers.add(handler);
  }

  /**
   * Called with `true` once a LISTEN on `channel` is in effect (again), and with `false` when the
   * connection holding it is lost: a cache may trust announcements only between the two.
   */
  onListening(channel: string, handler: (live: boolean) => void): void {
    let set = this.liveHandlers.get(channel);
    if (!set) {
      set = new Set();
      this.liveHandlers.set(channel, set);
    }
    set.add(handler);
    if (this.live.has(channel)) handler(true);
  }

  /** Whether a LISTEN on `channel` is in effect now. */
  isListening(channel: string): boolean {
    return this.live.has(channel);
  }

  private setLive(channel: string, live: boolean) {
    if (this.live.has(channel) === live) return;
    if (live) this.live.add(channel);
    else this.live.delete(channel);
    for (const handler of this.liveHandlers.get(channel) ?? []) {
      try {
        handler(live);
      } catch (err) {
        this.log.error({ err, channel }, 'listening handler failed');
      }
    }
  }

  async notify(channel: string, payload: string): Promise<void> {
    await this.database.query('select pg_notify($1, $2)', [channel, payload]);
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.retry) clearTimeout(this.retry);
    await this.connecting?.catch(() => {});
    const client = this.client;
    this.client = null;
    await client?.end().catch(() => {});
    for (const unlisten of this.pgliteUnlisten.values()) await unlisten().catch(() => {});
    this.pgliteUnlisten.clear();
    for (const channel of [...this.live]) this.setLive(channel, false);
    this.handlers.clear();
    this.liveHandlers.clear();
  }

  private dispatch(channel: string, payload: string) {
    for (const handler of this.handlers.get(channel) ?? []) {
      try {
        handler(payload);
      } catch (err) {
        this.log.error({ err, channel }, 'notification handler failed');
      }
    }
  }

  private async listenOn(channel: string): Promise<void> {
    if (this.closed) return;
    const { pglite } = this.database;
    if (pglite) {
      if (this.pgliteUnlisten.has(channel)) return;
      const unlisten = await pglite.listen(channel, (payload) => this.dispatch(channel, payload));
      this.pgliteUnlisten.set(channel, unlisten);
      // One process owns PGlite's data directory, and its LISTEN cannot drop.
      this.setLive(channel, true);
      return;
    }
    await this.connect();
    const client = this.client;
    if (!client) return;
    // Repeating LISTEN is harmless: a connection opened meanwhile may have listened already.
    const ok = await client.query(`LISTEN ${quoteChannel(channel)}`).then(
      () => true,
      (err) => {
        this.log.warn({ err, channel }, 'LISTEN failed; readers fall back to polling');
        return false;
      },
    );
    if (ok && this.client === client) this.setLive(channel, true);
  }

  private connect(): Promise<void> {
    if (this.client) return Promise.resolve();
    if (this.connecting) return this.connecting;
    this.connecting = (async () => {
      const pool = this.database.pool;
      if (!pool || this.closed) return;
      const client = new pg.Client(pool.options);
      client.on('notification', (msg) => this.dispatch(msg.channel, msg.payload ?? ''));
      const lost = (err?: unknown) => {
        if (this.client !== client) return;
        this.client = null;
        for (const channel of [...this.live]) this.setLive(channel, false);
        client.end().catch(() => {});
        if (this.closed) return;
        this.log.warn({ err }, 'the LISTEN connection dropped; reconnecting');
        this.scheduleReconnect();
      };
      client.on('error', lost);
      client.on('end', () => lost());
      try {
        await client.connect();
        for (const channel of this.handlers.keys()) await client.query(`LISTEN ${quoteChannel(channel)}`);
      } catch (err) {
        client.end().catch(() => {});
        if (!this.closed) {
          this.log.warn({ err }, 'could not open the LISTEN connection; retrying (readers poll meanwhile)');
          this.scheduleReconnect();
        }
        return;
      }
      if (this.closed) {
        await client.end().catch(() => {});
        return;
      }
      this.client = client;
      for (const channel of this.handlers.keys()) this.setLive(channel, true);
    })().finally(() => {
      this.connecting = null;
    });
    return this.connecting;
  }

  private scheduleReconnect() {
    if (this.retry || this.closed) return;
    this.retry = setTimeout(() => {
      this.retry = null;
      void this.connect().then(() => {
        if (this.client) for (const handler of this.reconnectHandlers) handler();
      });
    }, RECONNECT_MS);
    this.retry.unref();
  }
}

function quoteChannel(channel: string): string {
  if (!/^[a-z_][a-z0-9_]*$/.test(channel)) throw new Error(`Invalid channel name ${channel}`);
  return channel;
}
