import pg from 'pg';

/** A statement pg can send: a config, or a Query (ShapedQuery) that reports through its callback. */
type Statement = pg.QueryConfig | pg.Query;

interface Connection {
  client: pg.Client | null;
  opening: Promise<pg.Client> | null;
  /** Statements sent on it (or waiting for it to open) and not yet answered. */
  inFlight: number;
}

/**
 * A few PostgreSQL connections in pg's pipeline mode, for the single statements of every streamed
 * turn (`turn_open`, `turn_finish`, the stream hub's batches of events). A pool lends a connection
 * for a statement's whole round trip, the time this process takes to read the answer included: at
 * C=500 the event loop reads it 20 to 60 ms after PostgreSQL sent it, and the turns behind waited
 * for a connection up to 200 ms (bench/README.md, Session 17). Here a statement is written at once on the connection with the
 * fewest unanswered ones, and PostgreSQL runs the next as soon as it answered the last.
 *
 * Each statement is its own Sync, so its own transaction, as on a pool: one failing fails alone.
 * A connection that breaks fails the statements it carried and is opened again by the next one.
 * No transactions and no cursors here (pg refuses cursors in pipeline mode).
 */
export class PipelinedPool {
  private readonly connections: Connection[];
  private ended = false;

  constructor(
    private readonly config: pg.ClientConfig,
    readonly size: number,
  ) {
    this.connections = Array.from({ length: size }, () => ({ client: null, opening: null, inFlight: 0 }));
  }

  /** Connections open now. */
  get openCount(): number {
    return this.connections.filter((c) => c.client !== null).length;
  }

  /** How many unanswered statements a new one would follow on its connection. */
  get queueDepth(): number {
    return this.leastLoaded().inFlight;
  }

  query<R extends pg.QueryResultRow = pg.QueryResultRow>(statement: Statement): Promise<pg.QueryResult<R>> {
    if (this.ended) return Promise.reject(new Error('the pipelined pool was closed'));
    const connection = this.leastLoaded();
    connection.inFlight += 1;
    return new Promise<pg.QueryResult<R>>((resolve, reject) => {
      const answered = (err: Error | null, result?: pg.QueryResult<R>) => {
        connection.inFlight -= 1;
        if (err) reject(err);
        else resolve(result!);
      };
      const send = (client: pg.Client) => {
        // A Query reports to its callback (pg sets it from the second argument); a config gets one.
        try {
          (client.query as (s: Statement, cb: typeof answered) => void)(statement, answered);
        } catch (err) {
          answered(err as Error);
        }
      };
      if (connection.client) send(connection.client);
      else this.open(connection).then(send, (err: Error) => answered(err));
    });
  }

  async end(): Promise<void> {
    this.ended = true;
    await Promise.all(
      this.connections.map(async (connection) => {
        const client = connection.client ?? (await connection.opening?.catch(() => null));
        connection.client = null;
        await client?.end().catch(() => {});
      }),
    );
  }

  /** The connection with the fewest unanswered statements (the first of equals). */
  private leastLoaded(): Connection {
    let connection = this.connections[0]!;
    for (const candidate of this.connections)
      if (candidate.inFlight < connection.inFlight) connection = candidate;
    return connection;
  }

  private open(connection: Connection): Promise<pg.Client> {
    connection.opening ??= (async () => {
      const client = new pg.Client({ ...this.config, pipeline: true } as pg.ClientConfig);
      const forget = () => {
        if (connection.client === client) connection.client = null;
      };
      // A broken connection fails its statements (pg rejects them); the next statement opens another.
      client.on('error', forget);
      client.on('end', forget);
      try {
        await client.connect();
      } finally {
        connection.opening = null;
      }
      if (this.ended) {
        await client.end().catch(() => {});
        throw new Error('the pipelined pool was closed');
      }
      connection.client = client;
      return client;
    })();
    return connection.opening;
  }
}
