import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { addModel, asInHistory, eventNames, postStream } from './chats-support.js';
import { uploadFile, waitForProcessing } from './fixtures/knowledge-helpers.js';
import { call, createOrg, expectStatus, startTestServer, type TestApp } from './helpers/app.js';
import { type FakeModelServer, startFakeModelServer } from './helpers/fake-model-server.js';

/** Uploads and waits for processing (extraction runs in a child process: slow on a loaded machine). */
async function uploadAndProcess(
  t: Parameters<typeof uploadFile>[0],
  key: string,
  filename: string,
  content: string,
  groups?: number[],
) {
  const document = await uploadFile(t, key, filename, content, groups);
  return waitForProcessing(t, key, document.id, 80_000);
}

/**
 * Issue 18, citations: the real knowledge tool numbers its passages, the model (the fake server)
 * answers with [n] markers, and the reply carries the passages it cites.
 */
let server: FakeModelServer;
let t: TestApp;
beforeAll(async () => {
  server = await startFakeModelServer();
  t = await startTestServer();
});
afterEach(() => server.reset());
afterAll(async () => {
  await t.close();
  await server.close();
});

async function orgWithDocuments() {
  const org = await createOrg(t);
  const astro = await uploadAndProcess(
    t,
    org.orgKey,
    'astro.md',
    '# Instruments\n\nThe vermilion astrolabe is kept in cabinet seven of the east gallery.',
  );
  const maps = await uploadAndProcess(
    t,
    org.orgKey,
    'maps.md',
    '# Maps\n\nSea charts lie flat in the cartography room.',
  );
  expect([astro.processing_status, maps.processing_status]).toEqual(['completed', 'completed']);
  await addModel(t, org.organizationId, { baseUrl: server.baseUrl, model: 'local-llama', makeDefault: true });
  return { org, astro, maps };
}

const toolMessages = (body: any) => body.messages.filter((m: any) => m.role === 'tool');
const systemOf = (body: any) => body.messages.find((m: any) => m.role === 'system').content as string;

const search = (query: string, id: string) => ({
  toolCalls: [{ id, name: 'knowledge_search', arguments: { query } }],
});

// Each test uploads and processes documents: slow on a loaded machine.
describe('citations', { timeout: 90_000 }, () => {
  it('numbers the passages for the model and resolves the markers of the reply', async () => {
    const { org, astro } = await orgWithDocuments();
    server.enqueue(search('vermilion astrolabe', 'call-1'), {
      text: 'Cabinet seven [1]. An unknown source [9]. Again [1].',
    });
    const res = await call(t, 'POST', '/api/v2/chats', {
      key: org.orgKey,
      body: { project_id: org.projectId, content: 'Where is the astrolabe?' },
    });
    expectStatus(res, 201);
    const { message, chat } = res.body.response;
    const passages = message.tool_executions[0].result.passages;
    expect(passages[0]).toMatchObject({ marker: 1, document_id: astro.id, document_name: 'astro.md' });
    expect(passages.map((p: any) => p.marker)).toEqual(passages.map((_: unknown, i: number) => i + 1));
    expect(message.citations).toEqual([
      {
        marker: 1,
        document_id: astro.id,
        document_name: 'astro.md',
        chunk_id: expect.any(Number),
        quote: expect.stringContaining('The vermilion astrolabe is kept in cabinet seven'),
      },
    ]);
    // The model saw the numbers and was asked to cite with them.
    const requests = server.chatRequests();
    expect(systemOf(requests[0].body)).toContain('cite it with its marker in square brackets');
    expect(toolMessages(requests[1].body)[0].content).toContain('"marker":1');

    const history = await call(t, 'GET', `/api/v2/chats/${chat.id}/messages`, { key: org.orgKey });
    const [question, reply] = history.body.response.messages;
    expect(question.citations).toEqual([]);
    expect(reply.citations).toEqual(message.citations);
    expect(reply).toEqual(asInHistory(message));
  });

  it('numbers across the searches of a turn, in order of first appearance; streamed in done', async () => {
    const { org, astro, maps } = await orgWithDocuments();
    server.enqueue(search('sea charts cartography', 'call-1'), search('vermilion astrolabe', 'call-2'));
    server.setResponder((req) => {
      // The second search's passages continue the first one's numbers.
      const results = toolMessages(req.body).map((m: any) => JSON.parse(m.content));
      const second = results[1].passages.find((p: any) => p.document_name === 'astro.md');
      const first = results[0].passages.find((p: any) => p.document_name === 'maps.md');
      return { text: `Astrolabe: [${second.marker}]. Charts: [${first.marker}]. Nothing: [0].` };
    });
    const created = await call(t, 'POST', '/api/v2/chats', {
      key: org.orgKey,
      body: { project_id: org.projectId },
    });
    const res = await postStream(
      t.baseUrl,
      `/api/v2/chats/${created.body.response.chat.id}/messages`,
      org.orgKey,
      {
        content: 'Where are the astrolabe and the charts?',
        stream: true,
      },
    );
    expect(eventNames(res.events).at(-1)).toBe('done');
    const { message } = res.events.at(-1)!.data;
    const firstCount = message.tool_executions[0].result.passages.length;
    expect(message.tool_executions[1].result.passages[0].marker).toBe(firstCount + 1);
    expect(message.citations.map((c: any) => c.document_id)).toEqual([astro.id, maps.id]);
    expect(message.citations[0].marker).toBeGreaterThan(firstCount);
    expect(message.citations[1].marker).toBeLessThanOrEqual(firstCount);
    expect(message.citations[1].quote).toContain('Sea charts lie flat');
  });

  it('a reply without markers, or a turn without a search, carries []', async () => {
    const { org } = await orgWithDocuments();
    server.enqueue(search('astrolabe', 'call-1'), { text: 'No markers here.' }, { text: 'No search [1].' });
    const first = await call(t, 'POST', '/api/v2/chats', {
      key: org.orgKey,
      body: { project_id: org.projectId, content: 'Where?' },
    });
    expect(first.body.response.message.citations).toEqual([]);
    const second = await call(t, 'POST', `/api/v2/chats/${first.body.response.chat.id}/messages`, {
      key: org.orgKey,
      body: { content: 'And?' },
    });
    expect(second.body.response.message.tool_executions).toEqual([]);
    expect(second.body.response.message.citations).toEqual([]);
  });
});
