/**
 * CPU-time microbenchmark of building a result's rows from PostgreSQL's messages (Session 9):
 * pg's own `Query` (its `Result.addFields` per call) against `ShapedQuery` (src/db/shaped-query.ts),
 * both fed the same RowDescription and one DataRow, as for `turn_open` (60 columns, one row) and
 * the finishing statement (20 columns). No connection: only the client-side work is measured,
 * with `process.cpuUsage`, so other load on the machine changes little.
 *
 *   npx tsx bench/pg-rows-micro.ts [calls=50000]
 */
import pg from 'pg';
// The service's type parsers (timestamps kept as text, int8 and numeric as numbers) are set here.
import '../src/db/client.js';
import { ShapedQuery } from '../src/db/shaped-query.js';

interface Internals {
  handleRowDescription(msg: unknown): void;
  handleDataRow(msg: unknown): void;
  _result: { rows: unknown[] };
}

const calls = Number(process.argv[2] ?? 50_000);
const INT4 = 23;
const TEXT = 25;
const TIMESTAMPTZ = 1184;

function message(columns: number) {
  const prefixes = ['c_', 'p_', 'a_', 'm_'];
  const fields = Array.from({ length: columns }, (_, i) => ({
    name: `${prefixes[i % 4]}column_${i}`,
    dataTypeID: [INT4, TEXT, TIMESTAMPTZ][i % 3],
    format: 'text',
  }));
  const values = Array.from({ length: columns }, (_, i) =>
    i % 5 === 4
      ? null
      : i % 3 === 0
        ? String(i)
        : i % 3 === 1
          ? `text ${i}`
          : '2026-11-29 07:00:00.123456+00',
  );
  return { fields, values };
}

function run(make: () => Internals, columns: number): number {
  const { fields, values } = message(columns);
  const before = process.cpuUsage();
  let rows = 0;
  for (let i = 0; i < calls; i++) {
    const query = make();
    query.handleRowDescription({ fields });
    query.handleDataRow({ fields: values });
    rows += query._result.rows.length;
  }
  const used = process.cpuUsage(before);
  if (rows !== calls) throw new Error('a row went missing');
  return (used.user + used.system) / calls;
}

const text = 'select 1';
const pgQuery = () => new pg.Query({ text }) as unknown as Internals;
const shaped = () => new ShapedQuery({ text, name: 'micro' }) as unknown as Internals;

console.log('| columns | pg Query µs/call (best of 2) | ShapedQuery µs/call (best of 2) |');
console.log('|---|---|---|');
for (const columns of [60, 20]) {
  // Warm-up, then the measured pass of each, twice alternating.
  run(pgQuery, columns);
  run(shaped, columns);
  const results = [run(pgQuery, columns), run(shaped, columns), run(pgQuery, columns), run(shaped, columns)];
  const pgBest = Math.min(results[0]!, results[2]!);
  const shapedBest = Math.min(results[1]!, results[3]!);
  console.log(`| ${columns} | ${pgBest.toFixed(1)} | ${shapedBest.toFixed(1)} |`);
}
