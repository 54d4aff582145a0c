import { Parser } from '@asyncapi/parser';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildTestApp, call, expectStatus, type TestApp } from './helpers/app.js';

describe('AsyncAPI document', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await buildTestApp();
  });
  afterAll(() => t.close());

  it('is served at /asyncapi.json and validates as AsyncAPI 3.0', async () => {
    const res = await call(t, 'GET', '/asyncapi.json');
    expectStatus(res, 200);
    const { document, diagnostics } = await new Parser().parse(res.body);
    const errors = diagnostics.filter((d) => d.severity === 0);
    expect(errors).toEqual([]);
    expect(document?.version()).toBe('3.0.0');
    const names = document!
      .allMessages()
      .all()
      .map((m) => m.name());
    for (const event of ['content', 'tool_start', 'tool_result', 'done', 'error', 'chunk'])
      expect(names).toContain(event);
    // Issue 18: the reply in `done` carries its citations, attachments and parsed value.
    const done = document!
      .allMessages()
      .all()
      .find((m) => m.name() === 'done')!;
    const message = done.payload()!.properties()!.message.properties()!;
    for (const field of ['citations', 'attachments', 'parsed']) expect(Object.keys(message)).toContain(field);
    const citation = message.citations.items() as any;
    expect(Object.keys(citation.properties())).toEqual(
      expect.arrayContaining(['marker', 'document_id', 'document_name', 'chunk_id', 'quote']),
    );
    for (const event of [
      'artifact_generated',
      'artifact_refined',
      'artifact_generation_failed',
      'webhook_test',
    ])
      expect(names).toContain(event);
  });
});
