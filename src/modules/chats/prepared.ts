import type { Database } from '../../db/client.js';

/** PGlite sessions and the statements prepared (or being prepared) on each. */
const preparedOn = new WeakMap<object, Map<string, Promise<void>>>();

/**
 * Runs a hot statement whose parameters are all integers as a prepared statement, parsed and
 * planned once per connection instead of on every request (issue 14's plain rates):
 *
 * - on PostgreSQL a named statement of node-postgres (PostgreSQL shares the machine's cores with
 *   the service);
 * - on PGlite, which runs on the service's own thread and whose API has no named statements,
 *   `PREPARE` once per session, then `EXECUTE` with the integers written out (checked here, so
 *   nothing but digits reaches the text). Planning was most of the cost there: history went from
 *   5.3 to 1.7 CPU-ms per request.
 *
 * `types` are the parameters' SQL types for PREPARE, e.g. `['int', 'int']`.
 */
export async function preparedRow<T>(
  database: Database,
  statement: { name: string; types: string[]; text: string },
  params: (number | boolean | null)[],
): Promise<T | undefined> {
  if (database.pool) return (await database.prepared<T>(statement.name, statement.text, params)).rows[0];
  const session = database.pglite ?? database;
  let statements = preparedOn.get(session);
  if (!statements) {
    statements = new Map();
    preparedOn.set(session, statements);
  }
  let prepared = statements.get(statement.name);
  if (!prepared) {
    const created = database.exec(
      `prepare ${statement.name}(${statement.types.join(', ')}) as ${statement.text}`,
    );
    statements.set(statement.name, created);
    created.catch(() => statements.delete(statement.name));
    prepared = created;
  }
  await prepared;
  const literals = params.map((value) => {
    if (value === null || typeof value === 'boolean') return String(value);
    if (!Number.isSafeInteger(value)) throw new Error(`not an integer parameter: ${value}`);
    return String(value);
  });
  const result = await database.query<T>(`execute ${statement.name}(${literals.join(', ')})`);
  return result.rows[0];
}

/** A hot statement that may run for several requests at once on PostgreSQL (`batchedRow`). */
export interface BatchableStatement {
  name: string;
  types: string[];
  /** The statement for one request, parameters `$1`... */
  text: string;
  /**
   * The same statement for many: `$k` is the array of every request's k-th parameter (build it
   * with `forEachInput`); each row carries `n`, the 1-based position of the request it answers.
   */
  batch: string;
}

/**
 * Rewrites a statement written for one request's `$1`... into one that reads them from the row `i`
 * of `BATCH_INPUTS` (`i.p1`...), to be placed in a LATERAL subquery or a join over it.
 */
export function forEachInput(text: string): string {
  return text.replace(/\$(\d+)\b/g, 'i.p$1');
}

/** `unnest($1::int[], ...) with ordinality as i(p1, ..., n)`: one row per request of the batch. */
export function batchInputs(types: string[]): string {
  const arrays = types.map((type, k) => `$${k + 1}::${type}[]`).join(', ');
  const columns = types.map((_, k) => `p${k + 1}`).join(', ');
  return `unnest(${arrays}) with ordinality as i(${columns}, n)`;
}

/** Statements in flight per batcher: PostgreSQL works on that many batches at once. */
const MAX_IN_FLIGHT = 4;
const MAX_BATCH = 100;

interface Waiting<T> {
  params: (number | boolean | null)[];
  resolve(row: T | undefined): void;
  reject(err: unknown): void;
}

/**
 * Requests for one statement that arrive while `MAX_IN_FLIGHT` of its statements are running (or
 * within one turn of the event loop) go to PostgreSQL as one statement (issue 14's plain rates:
 * per request PostgreSQL spent 0.4 to 0.6 CPU-ms on its own statement, and an INSERT of 10 chats in
 * one statement costs 0.1 ms per chat, one commit and one round trip for all). Nothing waits for a
 * batch to fill: a lone request runs at once, alone. A failed batch is run again request by request,
 * so each gets its own answer or error (e.g. one out-of-range id).
 */
class StatementBatcher<T> {
  private waiting: Waiting<T>[] = [];
  private inFlight = 0;
  private scheduled = false;
  /** Statements run and requests answered by batches of more than one (tests, benchmarks). */
  readonly stats = { statements: 0, batched: 0 };

  constructor(
    private readonly database: Database,
    private readonly statement: BatchableStatement,
  ) {}

  submit(params: (number | boolean | null)[]): Promise<T | undefined> {
    return new Promise((resolve, reject) => {
      this.waiting.push({ params, resolve, reject });
      this.schedule();
    });
  }

  private schedule() {
    if (this.scheduled || this.waiting.length === 0 || this.inFlight >= MAX_IN_FLIGHT) return;
    this.scheduled = true;
    // After the requests read in this turn of the event loop have reached here.
    setImmediate(() => {
      this.scheduled = false;
      while (this.waiting.length > 0 && this.inFlight < MAX_IN_FLIGHT) {
        const items = this.waiting.splice(0, MAX_BATCH);
        this.inFlight += 1;
        void this.run(items).finally(() => {
          this.inFlight -= 1;
          this.schedule();
        });
      }
    });
  }

  private async run(items: Waiting<T>[]) {
    this.stats.statements += 1;
    if (items.length === 1) {
      const [item] = items;
      await preparedRow<T>(this.database, this.statement, item.params).then(item.resolve, item.reject);
      return;
    }
    let rows: (T & { n: number | string })[];
    try {
      const columns = this.statement.types.map((_, k) => items.map((item) => item.params[k]));
      const result = await this.database.pool!.query({
        name: `${this.statement.name}_batch`,
        text: this.statement.batch,
        values: columns,
      });
      rows = result.rows;
    } catch {
      // One request's parameters can fail the whole statement: each runs alone for its own answer.
      await Promise.all(
        items.map((item) =>
          preparedRow<T>(this.database, this.statement, item.params).then(item.resolve, item.reject),
        ),
      );
      return;
    }
    this.stats.batched += items.length;
    const byPosition = new Map<number, T>();
    for (const row of rows) byPosition.set(Number(row.n), row);
    for (const [index, item] of items.entries()) item.resolve(byPosition.get(index + 1));
  }
}

const batchers = new WeakMap<object, Map<string, StatementBatcher<unknown>>>();

function batcherOf<T>(database: Database, statement: BatchableStatement): StatementBatcher<T> {
  const pool = database.pool!;
  let byName = batchers.get(pool);
  if (!byName) {
    byName = new Map();
    batchers.set(pool, byName);
  }
  let batcher = byName.get(statement.name);
  if (!batcher) {
    batcher = new StatementBatcher(database, statement);
    byName.set(statement.name, batcher);
  }
  return batcher as StatementBatcher<T>;
}

/**
 * `preparedRow`, batched with the concurrent requests for the same statement on PostgreSQL
 * (`StatementBatcher`). On PGlite, which runs statements one at a time on the service's thread,
 * each runs alone.
 */
export function batchedRow<T>(
  database: Database,
  statement: BatchableStatement,
  params: (number | boolean | null)[],
): Promise<T | undefined> {
  if (!database.pool) return preparedRow<T>(database, statement, params);
  return batcherOf<T>(database, statement).submit(params);
}

/** How a statement's batcher has run so far on this database (null: never on PostgreSQL). */
export function batchStats(database: Database, name: string): { statements: number; batched: number } | null {
  return (database.pool && batchers.get(database.pool)?.get(name)?.stats) || null;
}
