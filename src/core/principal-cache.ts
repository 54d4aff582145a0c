/**
 * API keys resolved to principals, cached in memory so a request does not read its key (issue
 * 14). A cached key is trusted for at most `ttlMs` (1 s): whatever happens to notifications, a
 * revoked key, a removed user or a deactivated organization stops working within a second on every
 * process. Changes are also announced, so caches drop at once rather than at expiry:
 *
 * - in this process, by the services that make them (`principalsChanged(db)`: revoking a key,
 *   removing or editing a user, deactivating an organization), before their response is sent;
 * - across processes, by triggers on `api_keys`, `users` and `organizations` (migration
 *   0014_principal_changes) that NOTIFY `scriptorium_principals` when a field the principal
 *   depends on changes, from any writer (the service, the CLI, an operator's SQL).
 *
 * A read that overlapped a change is not cached (generation check), so a stale row cannot
 * outlive the change's notification.
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
  expiresAt: number;
}

export class PrincipalCache<T> {
  private static readonly MAX = 10_000;
  private readonly entries = new Map<string, Entry<T>>();
  /** Loads under way: concurrent misses of one key (all 50 requests in flight when it expires) share one read. */
  private readonly loading = new Map<string, Promise<T | null>>();
  private generation = 0;

  constructor(
    /** The database handle (Drizzle's `db`) the entries are read from. */
    private readonly db: object,
    private readonly ttlMs = 1000,
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
    if (entry.expiresAt <= performance.now()) {
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
          this.entries.set(key, { value, expiresAt: performance.now() + this.ttlMs });
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
