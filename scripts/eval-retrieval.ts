/**
 * Retrieval evaluation: ingests the corpus of test/fixtures/retrieval-corpus.ts through the real
 * processing pipeline (detection, extraction, chunking, indexing) into a fresh in-memory database,
 * asks every question through full-text search alone, and prints recall@5 and MRR.
 *
 *   npm run eval:retrieval            # table + summary
 *   npm run eval:retrieval -- --json  # machine-readable summary
 *
 * Exits 1 when recall@5 is below the bar (0.8), so CI can run it.
 */
import { createHash } from 'node:crypto';
import { pathToFileURL } from 'node:url';
import { PGlite } from '@electric-sql/pglite';
import { vector } from '@electric-sql/pglite-pgvector';
import { DOCUMENT_LIMIT_DEFAULTS, loadConfig } from '../src/config.js';
import type { OrgPrincipal } from '../src/core/principal.js';
import { createSecretBox, type SecretBox } from '../src/crypto/secret-box.js';
import { type Database, migrateDatabase, openDatabase } from '../src/db/client.js';
import { documentContents, documentGroups, documents } from '../src/db/schema/index.js';
import { DocumentExtractor } from '../src/knowledge/extractor.js';
import { detectMediaType } from '../src/knowledge/media-type.js';
import { processDocument } from '../src/knowledge/process.js';
import { searchPassages } from '../src/knowledge/search.js';
import { VectorStore } from '../src/knowledge/vector-store.js';
import { bootstrap } from '../src/modules/bootstrap/service.js';
import { documentVisibleToProject } from '../src/policies/documents.js';
import { corpusFiles, QUESTIONS } from '../test/fixtures/retrieval-corpus.js';

export const RECALL_BAR = 0.8;
const K = 5;

export interface QuestionResult {
  question: string;
  answer: string;
  /** 1-based rank of the first passage from the answering document; null when not in the top K. */
  rank: number | null;
  top: string[];
}

export interface EvalResult {
  documents: number;
  questions: number;
  recallAt5: number;
  mrr: number;
  results: QuestionResult[];
}

const quietLog = { info() {}, warn() {} };

export interface EvalTarget {
  database: Database;
  secrets: SecretBox;
  organizationId: number;
  groupId: number;
  projectId: number;
}

/** Ingests the corpus into the organization (in `groupId`, which the project must have) and scores it. */
export async function runRetrievalEval(target: EvalTarget): Promise<EvalResult> {
  const { database } = target;
  const deps = {
    database,
    secrets: target.secrets,
    vectors: new VectorStore(database, quietLog),
    limits: DOCUMENT_LIMIT_DEFAULTS,
    extractor: new DocumentExtractor(),
    // The evaluation's embedding server, if one is configured, runs on this machine.
    outbound: { outboundAllowPrivate: true, modelBaseUrlAllow: [] },
    log: quietLog,
  };
  const keyOf = new Map<number, string>();
  for (const file of await corpusFiles()) {
    const [row] = await database.db
      .insert(documents)
      .values({
        organizationId: target.organizationId,
        name: file.filename,
        mediaType: await detectMediaType(file.bytes, file.filename),
        sizeBytes: file.bytes.length,
        sha256: createHash('sha256').update(file.bytes).digest('hex'),
      })
      .returning({ id: documents.id });
    await database.db.insert(documentContents).values({ documentId: row.id, bytes: file.bytes });
    await database.db.insert(documentGroups).values({ documentId: row.id, groupId: target.groupId });
    await processDocument(deps, row.id);
    keyOf.set(row.id, file.key);
  }
  deps.extractor.close();

  const principal: OrgPrincipal = {
    kind: 'organization',
    keyId: 0,
    organizationId: target.organizationId,
    userId: null,
    role: 'admin',
  };
  const results: QuestionResult[] = [];
  for (const { question, answer } of QUESTIONS) {
    const passages = await searchPassages(deps, {
      organizationId: target.organizationId,
      visible: documentVisibleToProject(principal, target.projectId),
      query: question,
      limit: K,
      fullTextOnly: true,
    });
    const keys = passages.map((p) => keyOf.get(p.document_id) ?? '?');
    const index = keys.indexOf(answer);
    results.push({ question, answer, rank: index >= 0 ? index + 1 : null, top: keys });
  }
  const found = results.filter((r) => r.rank !== null);
  return {
    documents: keyOf.size,
    questions: results.length,
    recallAt5: found.length / results.length,
    mrr: results.reduce((sum, r) => sum + (r.rank ? 1 / r.rank : 0), 0) / results.length,
    results,
  };
}

async function main() {
  const json = process.argv.includes('--json');
  const client = new PGlite({ extensions: { vector } });
  const database = await openDatabase({ databaseUrl: null, dataDir: '', pglite: client });
  await migrateDatabase(database);
  const config = loadConfig({ LOG_LEVEL: 'silent', DATA_DIR: '/tmp' });
  const secrets = createSecretBox('retrieval-evaluation-secret-0123456789');
  const boot = await bootstrap(database, { config, secrets } as Parameters<typeof bootstrap>[1]);
  const result = await runRetrievalEval({
    database,
    secrets,
    organizationId: boot.organization_id,
    groupId: boot.default_group_id,
    projectId: boot.project_id,
  });
  await database.close();

  if (json) {
    console.log(JSON.stringify(result, null, 2));
  } else {
    for (const r of result.results) {
      const mark = r.rank === null ? 'MISS' : `#${r.rank}  `;
      console.log(`${mark.padEnd(5)} ${r.question}  [${r.answer}; top: ${r.top.join(', ')}]`);
    }
    console.log('');
    console.log(`documents: ${result.documents}, questions: ${result.questions} (full-text search only)`);
    console.log(`recall@5: ${result.recallAt5.toFixed(3)}`);
    console.log(`MRR:      ${result.mrr.toFixed(3)}`);
  }
  if (result.recallAt5 < RECALL_BAR) {
    console.error(`recall@5 ${result.recallAt5.toFixed(3)} is below the bar of ${RECALL_BAR}`);
    process.exitCode = 1;
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  main().catch((err) => {
    console.error(err);
    process.exit(1);
  });
}
