import { and, asc, desc, eq, inArray, type SQL, sql } from 'drizzle-orm';
import type { SecretBox } from '../crypto/secret-box.js';
import type { Database } from '../db/client.js';
import { documentChunks, documents } from '../db/schema/index.js';
import type { ModelUrlRule } from '../net/model-base-url.js';
import { embeddingModelFor, embedQuery } from './embeddings.js';
import { chunkEmbeddings, type VectorStore, vectorLiteral } from './vector-store.js';

export interface Passage {
  document_id: number;
  document_name: string;
  position: number;
  score: number;
  text: string;
  heading_path: string[];
}

export interface SearchDeps {
  database: Database;
  secrets: SecretBox;
  vectors: VectorStore;
  outbound: ModelUrlRule;
  log: { info(obj: object, msg: string): void; warn(obj: object, msg: string): void };
}

export interface SearchRequest {
  organizationId: number;
  /** Which documents may be read (a condition on `documents`, from src/knowledge/access.ts). */
  visible: SQL;
  query: string;
  limit: number;
  /** Skip the vector half even when embeddings exist (the retrieval evaluation measures full text alone). */
  fullTextOnly?: boolean;
  signal?: AbortSignal;
}

/** Candidates taken from each ranking before fusion. */
const CANDIDATES = 50;
/** Passages ranked by `ts_rank_cd` before the term-coverage re-ranking. */
const PRESELECT = 200;
/** Reciprocal rank fusion constant (Cormack et al. 2009). */
const RRF_K = 60;
const MAX_QUERY_TERMS = 32;

/**
 * The query as `websearch_to_tsquery` input with OR between its words: questions rarely repeat a
 * passage's every word, so requiring all of them (the default AND) misses most answers. Ranking then
 * rewards passages that match more of the words, and rarer ones (see `fullTextSearch`).
 */
export function orQuery(query: string): string {
  const words = (query.toLowerCase().match(/[\p{L}\p{N}]+(?:['’][\p{L}]+)?/gu) ?? []).filter(
    (word) => word !== 'or' && word !== 'and',
  );
  return [...new Set(words)].slice(0, MAX_QUERY_TERMS).join(' or ');
}

interface Ranked {
  chunkId: number;
  score: number;
}

export async function searchPassages(deps: SearchDeps, request: SearchRequest): Promise<Passage[]> {
  const text = orQuery(request.query);
  if (!text) return [];
  const limit = Math.max(1, Math.min(request.limit, 50));
  const [textHits, vectorHits] = await Promise.all([
    fullTextSearch(deps.database, request, text),
    request.fullTextOnly ? Promise.resolve([]) : vectorSearch(deps, request),
  ]);
  const ranked = vectorHits.length > 0 ? fuse([textHits, vectorHits]) : textHits;
  return passagesOf(deps.database, ranked.slice(0, limit));
}

const baseConditions = (request: SearchRequest) =>
  and(
    eq(documentChunks.organizationId, request.organizationId),
    eq(documents.processingStatus, 'completed'),
    request.visible,
  );

/**
 * Full-text ranking: `ts_rank_cd` (cover density, with the heading context weighted above the
 * body), scaled by how many of the query's distinct terms the passage contains, so a passage
 * matching three words of the question beats one repeating a single word. Counting terms costs a
 * match per term, so it runs only on the best `PRESELECT` passages by `ts_rank_cd`.
 */
async function fullTextSearch(database: Database, request: SearchRequest, text: string): Promise<Ranked[]> {
  const query = sql`websearch_to_tsquery('english', ${text})`;
  const rank = sql<number>`ts_rank_cd(${documentChunks.search}, ${query}, 1)`;
  const preselected = database.db
    .select({ chunkId: documentChunks.id, search: documentChunks.search, rank: rank.as('rank') })
    .from(documentChunks)
    .innerJoin(documents, eq(documents.id, documentChunks.documentId))
    .where(and(baseConditions(request), sql`${documentChunks.search} @@ ${query}`))
    .orderBy(desc(rank), asc(documentChunks.id))
    .limit(PRESELECT)
    .as('preselected');
  const matchedTerms = sql`(select count(*) from unnest(tsvector_to_array(to_tsvector('english', ${text}))) as term(lexeme)
      where ${preselected.search} @@ (quote_literal(term.lexeme)::tsquery))`;
  const score = sql<number>`(${preselected.rank} * (1 + ${matchedTerms}))::float8`;
  const rows = await database.db
    .select({ chunkId: preselected.chunkId, score })
    .from(preselected)
    .orderBy(desc(score), asc(preselected.chunkId))
    .limit(CANDIDATES);
  return rows.map((row) => ({ chunkId: row.chunkId, score: Number(row.score) }));
}

/** Nearest chunks by cosine distance, when the organization embeds and this database has pgvector. */
async function vectorSearch(deps: SearchDeps, request: SearchRequest): Promise<Ranked[]> {
  const choice = await embeddingModelFor(
    deps.database.db,
    deps.secrets,
    request.organizationId,
    deps.outbound,
  );
  if (!choice?.model) return [];
  if (!(await deps.vectors.available())) return [];
  let vector: number[];
  try {
    vector = await embedQuery(choice.model, request.query, request.signal);
  } catch (err) {
    // The search still answers from full text; the model being down must not fail a chat turn.
    deps.log.warn({ err: err instanceof Error ? err.message : String(err) }, 'query embedding failed');
    return [];
  }
  const distance = sql<number>`(${chunkEmbeddings.embedding} <=> ${vectorLiteral(vector)}::vector)::float8`;
  const rows = await deps.database.db
    .select({ chunkId: chunkEmbeddings.chunkId, distance })
    .from(chunkEmbeddings)
    .innerJoin(documentChunks, eq(documentChunks.id, chunkEmbeddings.chunkId))
    .innerJoin(documents, eq(documents.id, documentChunks.documentId))
    .where(
      and(
        baseConditions(request),
        eq(chunkEmbeddings.organizationId, request.organizationId),
        eq(chunkEmbeddings.modelConfigurationId, choice.configurationId),
        sql`vector_dims(${chunkEmbeddings.embedding}) = ${vector.length}`,
      ),
    )
    .orderBy(distance, asc(chunkEmbeddings.chunkId))
    .limit(CANDIDATES);
  return rows.map((row) => ({ chunkId: row.chunkId, score: 1 - Number(row.distance) }));
}

/** Reciprocal rank fusion: each list contributes 1 / (k + rank) for every chunk it ranks. */
export function fuse(lists: Ranked[][]): Ranked[] {
  const scores = new Map<number, number>();
  for (const list of lists) {
    list.forEach((hit, index) => {
      scores.set(hit.chunkId, (scores.get(hit.chunkId) ?? 0) + 1 / (RRF_K + index + 1));
    });
  }
  return [...scores.entries()]
    .map(([chunkId, score]) => ({ chunkId, score }))
    .sort((a, b) => b.score - a.score || a.chunkId - b.chunkId);
}

async function passagesOf(database: Database, ranked: Ranked[]): Promise<Passage[]> {
  if (ranked.length === 0) return [];
  const rows = await database.db
    .select({
      id: documentChunks.id,
      documentId: documentChunks.documentId,
      documentName: documents.name,
      position: documentChunks.position,
      headingPath: documentChunks.headingPath,
      content: documentChunks.content,
    })
    .from(documentChunks)
    .innerJoin(documents, eq(documents.id, documentChunks.documentId))
    .where(
      inArray(
        documentChunks.id,
        ranked.map((hit) => hit.chunkId),
      ),
    );
  const byId = new Map(rows.map((row) => [row.id, row]));
  return ranked.flatMap((hit) => {
    const row = byId.get(hit.chunkId);
    if (!row) return [];
    return [
      {
        document_id: row.documentId,
        document_name: row.documentName,
        position: row.position,
        score: Math.round(hit.score * 1e6) / 1e6,
        text: row.content,
        heading_path: row.headingPath,
      },
    ];
  });
}
