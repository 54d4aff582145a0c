import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createGroup, createProject, uploadAndProcess } from './fixtures/knowledge-helpers.js';
import {
  buildTestApp,
  call,
  createMember,
  createOrg,
  expectStatus,
  type TestApp,
  type TestOrg,
} from './helpers/app.js';

/**
 * The real knowledge tool inside real chat turns (the app's own tool families, the built-in offline
 * model, which searches the knowledge base and quotes what it finds).
 */
describe('knowledge tool in chat turns', () => {
  let t: TestApp;
  let org: TestOrg;
  beforeAll(async () => {
    t = await buildTestApp();
    org = await createOrg(t);
  });
  afterAll(() => t.close());

  it('answers with the passage holding a unique phrase and records the search in tool_executions', async () => {
    const doc = await uploadAndProcess(
      t,
      org.orgKey,
      'collections.md',
      '# Collections\n\n## Instruments\n\nThe vermilion astrolabe is kept in cabinet seven of the east gallery.\n\n## Maps\n\nSea charts are stored flat in the map room.',
    );
    expect(doc.processing_status).toBe('completed');

    const res = await call(t, 'POST', '/api/v2/chats', {
      key: org.orgKey,
      body: { project_id: org.projectId, content: 'Where do we keep the vermilion astrolabe?' },
    });
    expectStatus(res, 201);
    const { chat, message } = res.body.response;
    expect(message.tool_executions).toEqual([
      {
        id: expect.any(Number),
        tool_name: 'knowledge_search',
        tool_call_id: expect.any(String),
        status: 'completed',
        parameters: { query: 'Where do we keep the vermilion astrolabe?' },
        result: {
          passages: [
            {
              // Numbered for the reply's [n] citations (issue 18).
              marker: 1,
              document_id: doc.id,
              document_name: 'collections.md',
              position: 0,
              score: expect.any(Number),
              text: expect.stringContaining('The vermilion astrolabe is kept in cabinet seven'),
              heading_path: ['Collections', 'Instruments'],
            },
          ],
        },
        error: null,
        execution_time_ms: expect.any(Number),
      },
    ]);
    expect(message.content).toContain('From "collections.md" [1]');
    // The built-in model cites what it quotes.
    expect(message.citations).toEqual([
      {
        marker: 1,
        document_id: doc.id,
        document_name: 'collections.md',
        chunk_id: expect.any(Number),
        quote: expect.stringContaining('The vermilion astrolabe is kept in cabinet seven'),
      },
    ]);
    expect(message.content).toContain(
      'The vermilion astrolabe is kept in cabinet seven of the east gallery.',
    );

    const history = await call(t, 'GET', `/api/v2/chats/${chat.id}/messages`, { key: org.orgKey });
    expectStatus(history, 200);
    expect(history.body.response.messages[1].tool_executions).toEqual(message.tool_executions);
  });

  it("a member's chat never sees documents outside the member's groups", async () => {
    const member = await createMember(t, org);
    const restricted = await createGroup(t, org, 'Curators');
    // The project has both groups; the member is only in the default group.
    const project = await createProject(t, org, [org.defaultGroupId, restricted]);
    await uploadAndProcess(t, org.orgKey, 'vault.txt', 'The jade reliquary rests in the lower vault.', [
      restricted,
    ]);

    const asMember = await call(t, 'POST', '/api/v2/chats', {
      key: member.key,
      body: { project_id: project, content: 'Where is the jade reliquary?' },
    });
    expectStatus(asMember, 201);
    const [execution] = asMember.body.response.message.tool_executions;
    expect(execution).toMatchObject({
      tool_name: 'knowledge_search',
      status: 'completed',
      result: { passages: [] },
    });
    expect(asMember.body.response.message.content).not.toContain('lower vault');

    const asOrg = await call(t, 'POST', '/api/v2/chats', {
      key: org.orgKey,
      body: { project_id: project, content: 'Where is the jade reliquary?' },
    });
    expectStatus(asOrg, 201);
    expect(asOrg.body.response.message.content).toContain('The jade reliquary rests in the lower vault.');
  });
});
