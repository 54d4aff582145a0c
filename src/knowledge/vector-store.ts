import { sql } from 'drizzle-orm';
import { customType, integer, pgTable } from 'drizzle-orm/pg-core';
import type { Database, Queryable } from '../db/client.js';

/**
 * pgvector storage, created at run time: the shared migrations cannot mention the `vector` type
 * because a PostgreSQL server may lack the extension (Debian's PostgreSQL 15 has none). PGlite
 * always has it (`@electric-sql/pglite-pgvector`, loaded in src/db/client.ts).
 */
export const EMBEDDINGS_TABLE = 'document_chunk_embeddings';

const vector = customType<{ data: number[]; driverData: string }>({
  dataType: () => 'vector',
  toDriver: (value) => vectorLiteral(value),
});

/** For queries only: this table is not in src/db/schema, so drizzle-kit never puts it in a migration. */
export const chunkEmbeddings = pgTable(EMBEDDINGS_TABLE, {
  chunkId: integer('chunk_id').primaryKey(),
  documentId: integer('document_id').notNull(),
  organizationId: integer('organization_id').notNull(),
  modelConfigurationId: integer('model_configuration_id').notNull(),
  embedding: vector('embedding').notNull(),
});

const SETUP = `
CREATE TABLE IF NOT EXISTS ${EMBEDDINGS_TABLE} (
  chunk_id integer PRIMARY KEY REFERENCES document_chunks(id) ON DELETE CASCADE,
  document_id integer NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
  organization_id integer NOT NULL REFERENCES organizations(id),
  model_configuration_id integer NOT NULL,
  embedding vector NOT NULL
);
CREATE INDEX IF NOT EXISTS ${EMBEDDINGS_TABLE}_document_idx ON ${EMBEDDINGS_TABLE} (document_id);
CREATE INDEX IF NOT EXISTS ${EMBEDDINGS_TABLE}_org_model_idx ON ${EMBEDDINGS_TABLE} (organization_id, model_configuration_id);
`;

interface Logger {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
}

/**
 * Whether vector search works on this database; the first call creates the extension and table
 * (or finds it cannot, and says so once in the log). Later calls reuse the answer. One per
 * process, built by the composition root (src/root.ts).
 */
export class VectorStore {
  private known: Promise<boolean> | null = null;

  constructor(
    private readonly database: Database,
    private readonly log: Logger,
  ) {}

  available(): Promise<boolean> {
    this.known ??= setUp(this.database, this.log);
    return this.known;
  }
}

async function setUp(database: Database, log: Logger): Promise<boolean> {
  try {
    await createExtension(database);
  } catch (err) {
    log.warn(
      { err: err instanceof Error ? err.message : String(err), backend: database.kind },
      'pgvector is not available on this database: vector search is off and documents are searched by full text only (see docs/operations.md)',
    );
    return false;
  }
  try {
    await database.exec(SETUP);
    return true;
  } catch (err) {
    log.warn({ err }, 'could not create the embeddings table: vector search is off');
    return false;
  }
}

async function createExtension(database: Database): Promise<void> {
  try {
    await database.exec('CREATE EXTENSION IF NOT EXISTS vector');
  } catch (err) {
    // Two processes creating it at once: one wins, the other sees a duplicate; either way it exists now.
    const { rows } = await database.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM pg_extension WHERE extname = 'vector'`,
    );
    if (Number(rows[0]?.n) !== 1) throw err;
  }
}

/** pgvector's text form: `[0.1,0.2,...]`. */
export const vectorLiteral = (values: number[]) =>
  `[${values.map((v) => (Number.isFinite(v) ? v : 0)).join(',')}]`;

export interface StoredEmbedding {
  chunkId: number;
  embedding: number[];
}

export async function replaceEmbeddings(
  db: Queryable,
  target: { documentId: number; organizationId: number; modelConfigurationId: number },
  rows: StoredEmbedding[],
): Promise<void> {
  await db.delete(chunkEmbeddings).where(sql`${chunkEmbeddings.documentId} = ${target.documentId}`);
  for (let i = 0; i < rows.length; i += 200) {
    await db.insert(chunkEmbeddings).values(
      rows.slice(i, i + 200).map((row) => ({
        chunkId: row.chunkId,
        documentId: target.documentId,
        organizationId: target.organizationId,
        modelConfigurationId: target.modelConfigurationId,
        embedding: row.embedding,
      })),
    );
  }
}
