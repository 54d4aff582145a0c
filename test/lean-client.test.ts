/**
 * The lean model client (src/llm/lean-client.ts) runs the tool loop itself for OpenAI Chat
 * Completions providers: tool calls it cannot run (an unknown tool, arguments that are not JSON
 * or do not fit the tool's schema) become failed executions whose error goes back to the model,
 * and the turn completes, as with the AI SDK's `streamText`. Usage is summed over the steps.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  addModel,
  type ChatTestApp,
  eventKinds,
  postStream,
  type RecordedToolCall,
  startChatApp,
  streamedText,
  testKnowledgeFamily,
} from './chats-support.js';
import { call, createOrg, expectStatus } from './helpers/app.js';
import { type FakeModelServer, startFakeModelServer } from './helpers/fake-model-server.js';

let server: FakeModelServer;
let t: ChatTestApp;
const toolCalls: RecordedToolCall[] = [];

beforeAll(async () => {
  server = await startFakeModelServer();
  t = await startChatApp({ deps: { toolFamilies: testKnowledgeFamily(toolCalls) } });
});
afterEach(() => server.reset());
afterAll(async () => {
  await t?.close();
  await server?.close();
});

async function chatWithFakeModel() {
  const org = await createOrg(t);
  await addModel(t, org.organizationId, { baseUrl: server.baseUrl, model: 'local-llama', makeDefault: true });
  const res = await call(t, 'POST', '/api/v2/chats', {
    key: org.orgKey,
    body: { project_id: org.projectId },
  });
  expectStatus(res, 201);
  return { org, chatId: res.body.response.chat.id as number };
}

describe('the lean model client', () => {
  it('tool calls it cannot run are failed executions sent back to the model; the turn completes', async () => {
    const { org, chatId } = await chatWithFakeModel();
    server.enqueue(
      {
        toolCalls: [
          { id: 'call_unknown', name: 'no_such_tool', arguments: { a: 1 } },
          { id: 'call_json', name: 'knowledge_search', arguments: '{"query": ' },
          { id: 'call_schema', name: 'knowledge_search', arguments: { query: 42 } },
        ],
        usage: { prompt_tokens: 10, completion_tokens: 5 },
      },
      { chunks: ['Sorry, ', 'no luck.'], usage: { prompt_tokens: 20, completion_tokens: 3 } },
    );
    const before = toolCalls.length;
    const res = await postStream(t.baseUrl, `/api/v2/chats/${chatId}/messages`, org.orgKey, {
      content: 'Search',
      stream: true,
    });
    expect(eventKinds(res.events)).toEqual([
      'tool_start',
      'tool_start',
      'tool_start',
      'tool_result',
      'tool_result',
      'tool_result',
      'content',
      'done',
    ]);
    expect(streamedText(res.events)).toBe('Sorry, no luck.');
    const results = res.events.filter((e) => e.event === 'tool_result').map((e) => e.data);
    expect(results.map((r) => [r.tool_call_id, r.result, typeof r.error?.message])).toEqual([
      ['call_unknown', null, 'string'],
      ['call_json', null, 'string'],
      ['call_schema', null, 'string'],
    ]);
    expect(results[0].error.message).toMatch(/no_such_tool/);
    // Parameters as the model sent them: an object when they are JSON (the unknown tool's too).
    const starts = res.events.filter((e) => e.event === 'tool_start').map((e) => e.data.parameters);
    expect(starts).toEqual([{ a: 1 }, { input: '{"query": ' }, { query: 42 }]);
    // None of them ran.
    expect(toolCalls.length).toBe(before);
    const { message } = res.events.at(-1)!.data;
    expect(message.tool_executions.map((x: any) => x.parameters)).toEqual(starts);
    expect(message.tool_executions.map((x: any) => [x.tool_call_id, x.status])).toEqual([
      ['call_unknown', 'failed'],
      ['call_json', 'failed'],
      ['call_schema', 'failed'],
    ]);
    // Usage of both model calls.
    expect(message.usage).toMatchObject({ input_tokens: 30, output_tokens: 8 });
    // The second call carries the assistant's tool calls and one tool message per call, with the error.
    const second = server.chatRequests()[1].body;
    const assistant = second.messages.at(-4);
    expect(assistant.role).toBe('assistant');
    expect(assistant.tool_calls.map((c: any) => c.id)).toEqual(['call_unknown', 'call_json', 'call_schema']);
    const tools = second.messages.slice(-3);
    expect(tools.map((m: any) => [m.role, m.tool_call_id])).toEqual([
      ['tool', 'call_unknown'],
      ['tool', 'call_json'],
      ['tool', 'call_schema'],
    ]);
    for (const [i, m] of tools.entries()) expect(m.content).toBe(results[i].error.message);
    expect(second.tools.map((x: any) => x.function.name)).toEqual(['knowledge_search']);
    expect(second.stream_options).toEqual({ include_usage: true });
  });

  it('stops after maxSteps model calls when the model keeps calling tools', async () => {
    const { org, chatId } = await chatWithFakeModel();
    const steps = t.deps.turns.settings.maxSteps;
    server.setResponder(() => ({
      toolCalls: [{ name: 'knowledge_search', arguments: { query: 'again' } }],
    }));
    const res = await call(t, 'POST', `/api/v2/chats/${chatId}/messages`, {
      key: org.orgKey,
      body: { content: 'Loop' },
    });
    expectStatus(res, 200);
    expect(server.chatRequests()).toHaveLength(steps);
    expect(res.body.response.message.tool_executions).toHaveLength(steps);
  });
});
