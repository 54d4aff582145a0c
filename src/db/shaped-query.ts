import pg from 'pg';
import { PipelinedPool } from './pipelined-pool.js';

interface FieldDescription {
  name: string;
  dataTypeID: number;
  format?: string;
}

/** A result's columns as last seen for a statement, with their type parsers. */
interface Shape {
  fields: FieldDescription[];
  names: string[];
  parsers: ((value: string) => unknown)[];
}

/** What ShapedQuery overrides and reads of pg's Query (lib/query.js), which its typings omit. */
interface QueryInternals {
  handleRowDescription(msg: { fields: FieldDescription[] }): void;
  handleDataRow(msg: { fields: (string | null)[] }): void;
  /** Starts a new result after a finished one (a simple query of several statements). */
  _checkForMultirow(): void;
  /** The statement's name: read when the query is sent (set after construction, see ShapedQuery). */
  name: string | undefined;
  _result: { fields: FieldDescription[]; rows: Record<string, unknown>[] };
}
const PgQuery = pg.Query as unknown as new (text: string, values: unknown[] | undefined) => QueryInternals;

/** Shapes by statement name (named statements) or text; bounded by the service's own statements. */
const shapes = new Map<string, Shape>();
const MAX_SHAPES = 500;

function sameShape(shape: Shape, fields: FieldDescription[]): boolean {
  if (shape.fields.length !== fields.length) return false;
  for (let i = 0; i < fields.length; i++) {
    const known = shape.fields[i]!;
    const field = fields[i]!;
    if (known.name !== field.name || known.dataTypeID !== field.dataTypeID || known.format !== field.format)
      return false;
  }
  return true;
}

function shapeOf(key: string, fields: FieldDescription[]): Shape | null {
  // Binary columns need pg's own handling (a Buffer per value; the service asks for text only), and
  // a column named `__proto__` its own-property template (assigned to `{}`, it would set the prototype).
  if (fields.some((field) => field.format === 'binary' || field.name === '__proto__')) return null;
  const known = shapes.get(key);
  if (known && sameShape(known, fields)) return known;
  const shape: Shape = {
    fields,
    names: fields.map((field) => field.name),
    parsers: fields.map((field) => pg.types.getTypeParser(field.dataTypeID, 'text')),
  };
  if (!known && shapes.size >= MAX_SHAPES) shapes.clear();
  shapes.set(key, shape);
  return shape;
}

/**
 * A query whose rows are built from the shape its statement's result had last time (checked
 * against every result's description, so a changed result is learnt again, never misread).
 *
 * pg's own `Result` learns the columns on every call (`addFields`): it builds a template object
 * in dictionary mode and spreads it into every row: about 40 µs a call for `turn_open`'s 60
 * columns, 11 to 16 µs for 20 (bench/pg-rows-micro.ts; 3 % of the service's CPU at C=500,
 * bench/README.md Session 9). Built here, a row is a plain object filled in the columns' order:
 * 4 to 6 µs and 1.5. Rows equal pg's: the same keys in the same order, the same type parsers
 * (pg.types), null for NULL.
 */
export class ShapedQuery extends PgQuery {
  private shape: Shape | null = null;
  private readonly key: string;

  constructor(config: pg.QueryConfig) {
    // Text and values, not the config object: pg copies a config object through its property
    // descriptors (`cloneQueryConfig`, 0.8 % of the service's CPU at C=500), a string it wraps.
    super(config.text, config.values);
    this.name = config.name;
    this.key = config.name ?? config.text;
  }

  override handleRowDescription(msg: { fields: FieldDescription[] }): void {
    this.shape = shapeOf(this.key, msg.fields);
    if (!this.shape) {
      super.handleRowDescription(msg);
      return;
    }
    this._checkForMultirow();
    this._result.fields = msg.fields;
  }

  override handleDataRow(msg: { fields: (string | null)[] }): void {
    const shape = this.shape;
    if (!shape) {
      super.handleDataRow(msg);
      return;
    }
    const { names, parsers } = shape;
    const values = msg.fields;
    const row: Record<string, unknown> = {};
    for (let i = 0; i < names.length; i++) {
      const value = values[i];
      row[names[i]!] = value === null || value === undefined ? null : parsers[i]!(value);
    }
    this._result.rows.push(row);
  }
}

/**
 * Runs `config` on a connection of `pool` with rows built as ShapedQuery builds them. The query
 * has no callback of its own: pg-pool (and PipelinedPool) gives it the one that releases the
 * connection, and returns a promise of the result (pg-pool's typings say it returns the query).
 */
export function shapedQuery<T extends pg.QueryResultRow>(
  pool: pg.Pool | PipelinedPool,
  config: pg.QueryConfig,
): Promise<pg.QueryResult<T>> {
  const query = new ShapedQuery(config);
  if (pool instanceof PipelinedPool) return pool.query<T>(query as unknown as pg.Query);
  return pool.query(query as unknown as pg.QueryConfig) as unknown as Promise<pg.QueryResult<T>>;
}
