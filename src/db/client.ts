import { mkdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { PGlite } from '@electric-sql/pglite';
import { type Column, getTableColumns, sql, type Table } from 'drizzle-orm';
import { drizzle as drizzlePg } from 'drizzle-orm/node-postgres';
import { migrate as migratePg } from 'drizzle-orm/node-postgres/migrator';
import type { PgDatabase, PgQueryResultHKT } from 'drizzle-orm/pg-core';
import pg from 'pg';
import { tracePglite } from '../telemetry/tracing.js';
import { lockDataDir } from './data-dir-lock.js';
import { PipelinedPool } from './pipelined-pool.js';
import * as schema from './schema/index.js';
import { shapedQuery } from './shaped-query.js';

export type Db = PgDatabase<PgQueryResultHKT, typeof schema>;
/** A transaction handle; services accept `Db | Tx` so callers decide the transaction. */
export type Tx = Parameters<Parameters<Db['transaction']>[0]>[0];
export type Queryable = Db | Tx;

export interface RawResult<T> {
  rows: T[];
}

/** The database behind the service: PGlite in DATA_DIR, or a PostgreSQL server. */
export interface Database {
  kind: 'pglite' | 'postgres';
  db: Db;
  /**
   * When this process opened it (ISO 8601). On PGlite, which one process holds, a turn still
   * `running` from before then was left by a previous process (TurnRunner.isDead).
   */
  openedAt: string;
  /** Parameterised SQL outside Drizzle (job queue adapter, LISTEN/NOTIFY, health). */
  query<T = Record<string, unknown>>(text: string, params?: unknown[]): Promise<RawResult<T>>;
  /**
   * `query` for a statement run on every turn or flush: on PostgreSQL a named statement, so each
   * connection parses it once and keeps a generic plan after its first executions instead of
   * planning it every time (issue 14: planning the turn's finishing statement cost PostgreSQL as
   * much as running it). `name` must be unique to `text`. Its result columns must be listed, not
   * `*`: a prepared statement whose result's columns change (a migration by a newer process)
   * fails until the connection closes. (modules/chats/prepared.ts also prepares on PGlite, for
   * statements whose parameters are all integers.)
   */
  prepared<T = Record<string, unknown>>(name: string, text: string, params: unknown[]): Promise<RawResult<T>>;
  /**
   * `prepared` for the single statements a streamed turn runs (its opening, its events' batches,
   * its end): on PostgreSQL on the connections of `pipelined` (on the pool without them), on their
   * generic plans; on PGlite as `prepared`.
   * Under load the main pool lent a connection for the whole round trip, the time this process took
   * to read the answer included (docs/decisions.md, "Turn statements on pipelined connections").
   */
  pipelinedQuery<T = Record<string, unknown>>(
    name: string,
    text: string,
    params: unknown[],
  ): Promise<RawResult<T>>;
  /** Multi-statement SQL without parameters. */
  exec(text: string): Promise<void>;
  pglite: PGlite | null;
  pool: pg.Pool | null;
  /**
   * PostgreSQL: 4 of the pool's connections in pipeline mode (src/db/pipelined-pool.ts) for a
   * streamed turn's single statements: its opening (src/turns/turn-open.ts) and `pipelinedQuery`.
   * On generic plans from the first execution (`plan_cache_mode`: on the main pool each new
   * connection planned `turn_open` afresh for its first five executions, 3.5 to 5 ms each against
   * 1.5 to 2 ms on the generic plan) and kept open. Null with a pool size under 3
   * (docs/decisions.md, "The turn's opening statement on a pool of its own" and "Turn statements
   * on pipelined connections").
   */
  pipelined: PipelinedPool | null;
  ping(timeoutMs?: number): Promise<boolean>;
  close(): Promise<void>;
}

const MIGRATIONS = fileURLToPath(new URL('./migrations', import.meta.url));

// Dates stay strings everywhere, so microseconds and the UTC rendering come from PostgreSQL.
pg.types.setTypeParser(pg.types.builtins.TIMESTAMPTZ, (v) => v);
pg.types.setTypeParser(pg.types.builtins.TIMESTAMP, (v) => v);
pg.types.setTypeParser(pg.types.builtins.INT8, (v) => Number(v));
pg.types.setTypeParser(pg.types.builtins.NUMERIC, (v) => Number(v));

const asText = (value: string) => value;
/**
 * `query` answers alike on both backends: the type parsers set for pg above, on PGlite (keyed by
 * the same type OIDs, taken from pg so that PGlite is loaded only by a process that opens it).
 */
const PGLITE_PARSERS = {
  [pg.types.builtins.TIMESTAMPTZ]: asText,
  [pg.types.builtins.TIMESTAMP]: asText,
  [pg.types.builtins.DATE]: asText,
  [pg.types.builtins.INTERVAL]: asText,
  [pg.types.builtins.INT8]: (value: string) => Number(value),
  [pg.types.builtins.NUMERIC]: (value: string) => Number(value),
};

/**
 * Hand-written SQL that returns whole rows of a Drizzle table (the turn's hot path, issue 14:
 * Drizzle's query building costs more CPU than the statement): `selectList` names the columns,
 * each as `<prefix><column name>`, and `rowOf` maps a result row back to the table's row type
 * with the columns' own driver mappings, so the row equals what `db.select().from(table)` gives.
 */
export function selectList(table: Table, alias: string, prefix = ''): string {
  return columnsOf(table)
    .map(([, column]) => `${alias}."${column.name}" as "${prefix}${column.name}"`)
    .join(', ');
}

export function rowOf<T extends Table>(
  table: T,
  raw: Record<string, unknown>,
  prefix = '',
): T['$inferSelect'] {
  const row: Record<string, unknown> = {};
  for (const [key, column] of columnsOf(table)) {
    const value = raw[prefix + column.name];
    row[key] = value === null || value === undefined ? null : column.mapFromDriverValue(value);
  }
  return row as T['$inferSelect'];
}

const tableColumns = new WeakMap<Table, [string, Column][]>();
function columnsOf(table: Table): [string, Column][] {
  let columns = tableColumns.get(table);
  if (!columns) {
    columns = Object.entries(getTableColumns(table));
    tableColumns.set(table, columns);
  }
  return columns;
}

export interface OpenOptions {
  databaseUrl: string | null;
  dataDir: string;
  /** An already created PGlite (tests load a migrated template into one). */
  pglite?: PGlite;
  poolSize?: number;
}

/**
 * Connections of `pipelined`, taken from the pool size (20: 16 + 4, so a process still opens at
 * most 20; docs/operations.md). Pipelined, a connection is not lent for a round trip, so a burst
 * of turns no longer queues for one: 4 served C=500 as well as 8, with less of PostgreSQL's CPU
 * (bench/README.md, Session 17). A smaller pool size gives them two fifths (10: 6 + 4, 5: 3 + 2),
 * so the main pool, which also runs document jobs and webhook deliveries, keeps the larger part.
 */
const PIPELINED_CONNECTIONS = 4;

export async function openDatabase(options: OpenOptions): Promise<Database> {
  if (options.databaseUrl) return openPostgres(options.databaseUrl, options.poolSize ?? 20);
  if (options.pglite) return openPglite(options.pglite, () => {});
  mkdirSync(options.dataDir, { recursive: true });
  const unlock = lockDataDir(options.dataDir);
  try {
    // Loaded here, not at the top: a process on PostgreSQL never needs PGlite (about 8 MB of its
    // resident memory with drizzle's PGlite driver and pgvector; bench/README.md, Session 9).
    const [{ PGlite }, { vector }] = await Promise.all([
      import('@electric-sql/pglite'),
      import('@electric-sql/pglite-pgvector'),
    ]);
    return await openPglite(new PGlite(options.dataDir, { extensions: { vector } }), unlock);
  } catch (err) {
    unlock();
    throw err;
  }
}

async function openPglite(client: PGlite, unlock: () => void): Promise<Database> {
  await client.waitReady;
  await client.exec(`SET TIME ZONE 'UTC'`);
  tracePglite(client as unknown as Parameters<typeof tracePglite>[0]);
  const { drizzle: drizzlePglite } = await import('drizzle-orm/pglite');
  const db = drizzlePglite({ client, schema }) as unknown as Db;
  let closed = false;
  // PGlite has no named statements over its query API.
  const prepared = async <T>(_name: string, text: string, params: unknown[]) => {
    const result = await client.query<T>(text, params as any[], { parsers: PGLITE_PARSERS });
    return { rows: result.rows };
  };
  return {
    kind: 'pglite',
    db,
    openedAt: new Date().toISOString(),
    pglite: client,
    pool: null,
    pipelined: null,
    async query<T>(text: string, params?: unknown[]) {
      const result = await client.query<T>(text, params as any[], { parsers: PGLITE_PARSERS });
      return { rows: result.rows };
    },
    prepared,
    pipelinedQuery: prepared,
    async exec(text: string) {
      await client.exec(text);
    },
    async ping() {
      if (closed || client.closed) return false;
      try {
        await client.query('select 1');
        return true;
      } catch {
        return false;
      }
    },
    async close() {
      if (closed) return;
      closed = true;
      await client.close();
      unlock();
    },
  };
}

async function openPostgres(url: string, poolSize: number): Promise<Database> {
  const pipelinedSize = Math.min(PIPELINED_CONNECTIONS, Math.floor((poolSize * 2) / 5));
  const pool = new pg.Pool({
    connectionString: url,
    max: poolSize - pipelinedSize,
    options: '-c TimeZone=UTC',
    // pg's default (10 s) closed connections that the pollers (pg-boss workers and the repeated
    // tasks, each every second) opened again moments later: a connection start-up (TLS-less still
    // ~1 ms of CPU here, plus the server's backend fork) several times a minute while idle. The
    // pool reuses its most recently released connection, so the few polling needs stay open and
    // the rest of a burst's connections still close after 5 minutes.
    idleTimeoutMillis: 5 * 60_000,
  });
  // Generic plans fit the statements that run there (by key: ids, texts, flags): the plans
  // PostgreSQL settles on by itself after five custom ones. Never closed for idleness.
  const pipelined =
    pipelinedSize > 0
      ? new PipelinedPool(
          { connectionString: url, options: '-c TimeZone=UTC -c plan_cache_mode=force_generic_plan' },
          pipelinedSize,
        )
      : null;
  // An idle client losing its server must not crash the process; the next query reports it.
  pool.on('error', () => {});
  // Nor may a checked-out one (a transaction): the pool listens only to idle clients, and pg emits
  // 'error' on a client whose connection drops. Its queries reject, and the pool discards it on release.
  pool.on('connect', (client) => client.on('error', () => {}));
  const db = drizzlePg({ client: pool, schema }) as unknown as Db;
  let closed = false;
  return {
    kind: 'postgres',
    db,
    openedAt: new Date().toISOString(),
    pglite: null,
    pool,
    pipelined,
    async query<T>(text: string, params?: unknown[]) {
      const result = await shapedQuery(pool, { text, values: params });
      return { rows: result.rows as T[] };
    },
    async prepared<T>(name: string, text: string, params: unknown[]) {
      const result = await shapedQuery(pool, { name, text, values: params });
      return { rows: result.rows as T[] };
    },
    async pipelinedQuery<T>(name: string, text: string, params: unknown[]) {
      const result = await shapedQuery(pipelined ?? pool, { name, text, values: params });
      return { rows: result.rows as T[] };
    },
    async exec(text: string) {
      await pool.query(text);
    },
    async ping(timeoutMs = 2000) {
      if (closed) return false;
      let timer: NodeJS.Timeout | undefined;
      try {
        const timeout = new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new Error('timeout')), timeoutMs);
        });
        await Promise.race([pool.query('select 1'), timeout]);
        return true;
      } catch {
        return false;
      } finally {
        clearTimeout(timer);
      }
    },
    async close() {
      if (closed) return;
      closed = true;
      await Promise.all([pool.end(), pipelined?.end()]);
    },
  };
}

/** Applies the generated SQL migrations; on PostgreSQL under an advisory lock so processes can race. */
export async function migrateDatabase(database: Database): Promise<void> {
  if (database.kind === 'pglite') {
    const { migrate: migratePglite } = await import('drizzle-orm/pglite/migrator');
    await migratePglite(database.db as any, { migrationsFolder: MIGRATIONS });
    return;
  }
  const client = await database.pool!.connect();
  try {
    await client.query('select pg_advisory_lock(7265617)');
    await migratePg(drizzlePg({ client, schema }), { migrationsFolder: MIGRATIONS });
  } finally {
    await client.query('select pg_advisory_unlock(7265617)').catch(() => {});
    client.release();
  }
}

export async function isEmpty(database: Database): Promise<boolean> {
  const rows = await database.db.execute<{ n: number }>(sql`select count(*)::int as n from organizations`);
  return Number((rows as any).rows?.[0]?.n ?? (rows as any)[0]?.n ?? 0) === 0;
}
