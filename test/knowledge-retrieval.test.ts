import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RECALL_BAR, runRetrievalEval } from '../scripts/eval-retrieval.js';
import { createProject } from './fixtures/knowledge-helpers.js';
import { CORPUS, QUESTIONS } from './fixtures/retrieval-corpus.js';
import { buildTestApp, createOrg, type TestApp } from './helpers/app.js';

describe('retrieval evaluation (full-text search alone)', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await buildTestApp();
  });
  afterAll(() => t.close());

  it('the corpus covers every format with at least 30 documents and 30 questions', () => {
    expect(CORPUS.length).toBeGreaterThanOrEqual(30);
    expect(QUESTIONS.length).toBeGreaterThanOrEqual(30);
    expect(new Set(CORPUS.map((d) => d.format))).toEqual(
      new Set(['pdf', 'docx', 'html', 'md', 'txt', 'csv', 'json']),
    );
    const keys = new Set(CORPUS.map((d) => d.key));
    for (const q of QUESTIONS) expect(keys.has(q.answer), q.question).toBe(true);
  });

  it(`finds the answering document in the top 5 for at least ${RECALL_BAR * 100}% of the questions`, async () => {
    const org = await createOrg(t);
    const projectId = await createProject(t, org, [org.defaultGroupId]);
    const result = await runRetrievalEval({
      database: t.deps.database,
      secrets: t.deps.secrets,
      organizationId: org.organizationId,
      groupId: org.defaultGroupId,
      projectId,
    });
    expect(result.documents).toBe(CORPUS.length);
    const misses = result.results
      .filter((r) => r.rank === null)
      .map((r) => `${r.question} -> ${r.top.join(', ')}`);
    expect(result.recallAt5, misses.join('\n')).toBeGreaterThanOrEqual(RECALL_BAR);
    expect(result.mrr).toBeGreaterThanOrEqual(0.7);
  }, 60_000);
});
