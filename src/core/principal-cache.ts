/**
 * API keys resolved to principals, cached in memory so a request does not read its key (issue
 * 14). A revoked key, a removed user or a deactivated organization must stop working within a
 * second on every process. Changes are announced, so caches drop at once:
 *
 * - in this process, by the services that make them (`principalsChanged(db)`: revoking a key,
 *   removing or editing a user, deactivating an organization), before their response is sent;
 * - across processes, by triggers on `api_keys`, `users` and `organizations` (migration
 *   0014_principal_changes) that NOTIFY `scriptorium_principals` when a field the principal
 *   depends on changes, from any writer (the service, the CLI, an operator's SQL).
 *
 * A read that overlapped a change is not cached (generation check), so a stale row cannot
 * outlive the change's notification.
 *
 * How long an entry is trusted depends on whether those announcements are known to arrive: while
 * this process holds a live LISTEN on the channel (`setListening(true)`), an entry is trusted for
 * `listeningTtlMs` (60 s; at one request every 2 s a 1 s bound made every turn pay a key read
 * before the model call). Otherwise (no listener yet, LISTEN connection lost) the bound is
 * `ttlMs` (1 s), so the rule holds whatever happens to notifications. Every change of the
 * listening state drops all entries: notifications may have been missed while it was down.
 */
export const PRINCIPALS_CHANNEL = 'scriptorium_principals';

/** The caches of each database handle (other processes, or apps with their own pool, hear the NOTIFY). */
const cachesOf = new WeakMap<object, Set<PrincipalCache<unknown>>>();

/** Drops the principal caches reading `db` in this process (a change was just written through it). */
export function principalsChanged(db: object): void {
  for (const cache of cachesOf.get(db) ?? []) cache.clear();
}

interface Entry<T> {
  value: T;
  loadedAt: number;
}

export class PrincipalCache<T> {
  private static readonly MAX = 10_000;
  private readonly entries = new Map<string, Entry<T>>();
  /** Loads under way: concurrent misses of one key (all 50 requests in flight when it expires) share one read. */
  private readonly loading = new Map<string, Promise<T | null>>();
  private generation = 0;
  private listening = false;

  constructor(
    /** The database handle (Drizzle's `db`) the entries are read from. */
    private readonly db: object,
    /** Trust bound when changes may go unannounced (the rule: 1 s). */
    private readonly ttlMs = 1000,
    /** Trust bound while a live LISTEN delivers every change at once. */
    private readonly listeningTtlMs = 60_000,
  ) {
    let set = cachesOf.get(db);
    if (!set) {
      set = new Set();
      cachesOf.set(db, set);
    }
    set.add(this as PrincipalCache<unknown>);
  }

  get(key: string): T | undefined {
    const entry = this.entries.get(key);
    if (!entry) return undefined;
    const ttl = this.listening ? this.listeningTtlMs : this.ttlMs;
    if (performance.now() - entry.loadedAt >= ttl) {
      this.entries.delete(key);
      return undefined;
    }
    return entry.value;
  }

  /**
   * Reads through `load` on a miss; a `null` (unknown or revoked key) is never cached. A miss
   * joins a load of the same key already under way, unless a change came after that load began
   * (`clear` forgets loads under way, so no request after a change gets a read from before it).
   */
  resolve(key: string, load: () => Promise<T | null>): Promise<T | null> | T {
    const cached = this.get(key);
    if (cached !== undefined) return cached;
    const pending = this.loading.get(key);
    if (pending) return pending;
    const generation = this.generation;
    const loaded = load().then(
      (value) => {
        if (generation !== this.generation) return value;
        this.loading.delete(key);
        if (value !== null) {
          if (this.entries.size >= PrincipalCache.MAX) this.entries.clear();
          this.entries.set(key, { value, loadedAt: performance.now() });
        }
        return value;
      },
      (err) => {
        if (generation === this.generation) this.loading.delete(key);
        throw err;
      },
    );
    this.loading.set(key, loaded);
    return loaded;
  }

  /**
   * Whether a live LISTEN on `PRINCIPALS_CHANNEL` is held now. Any change drops every entry and
   * every read under way: on loss, changes may go unannounced from now on; on (re)gain, some may
   * have been missed meanwhile, and a read begun before the LISTEN took effect may predate one.
   */
  setListening(listening: boolean): void {
    this.listening = listening;
    this.clear();
  }

  isListening(): boolean {
    return this.listening;
  }

  clear(): void {
    this.generation += 1;
    this.entries.clear();
    this.loading.clear();
  }

  close(): void {
    this.clear();
    cachesOf.get(this.db)?.delete(this as PrincipalCache<unknown>);
  }
}
