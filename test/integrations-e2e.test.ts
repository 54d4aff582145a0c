import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { agents } from '../src/db/schema/index.js';
import { integrationTools } from '../src/llm/tools/integrations.js';
import { DEFAULT_MCP_POOL_OPTIONS } from '../src/mcp/client-pool.js';
import {
  createArtifactType,
  createSkill,
  postStream as postArtifactStream,
  useFakeModel,
} from './artifacts-fixtures.js';
import {
  addModel,
  type ChatTestApp,
  eventKinds,
  eventually,
  postStream,
  startChatApp,
  streamedText,
} from './chats-support.js';
import { call, createOrg, expectStatus, type TestOrg } from './helpers/app.js';
import { type FakeModelServer, startFakeModelServer } from './helpers/fake-model-server.js';
import { startMcpServer, type TestMcpServer, unusedLoopbackUrl } from './helpers/mcp-server.js';

/**
 * Connected tool servers through the public API: a real MCP server on loopback, the fake model
 * server asking for its tools, chat turns (v2) and artifact generation (v1) running them.
 */
let model: FakeModelServer;
let mcp: TestMcpServer;
let t: ChatTestApp;

beforeAll(async () => {
  model = await startFakeModelServer();
  mcp = await startMcpServer();
  t = await startChatApp({
    env: { OUTBOUND_ALLOW_PRIVATE: 'true' },
    deps: { toolFamilies: { integrations: integrationTools } },
  });
});
afterEach(async () => {
  model.reset();
  await t.deps.mcp.configure(DEFAULT_MCP_POOL_OPTIONS);
});
afterAll(async () => {
  await t?.close();
  await mcp?.close();
  await model?.close();
});

async function orgWithTools(name = 'Desk', url = mcp.url): Promise<TestOrg> {
  const org = await createOrg(t);
  await addModel(t, org.organizationId, { baseUrl: model.baseUrl, makeDefault: true });
  const res = await call(t, 'POST', '/api/v1/integrations', { key: org.orgKey, body: { name, url } });
  expectStatus(res, 201);
  return org;
}

async function newChat(org: TestOrg, body: Record<string, unknown> = {}): Promise<number> {
  const res = await call(t, 'POST', '/api/v2/chats', {
    key: org.orgKey,
    body: { project_id: org.projectId, ...body },
  });
  expectStatus(res, 201);
  return res.body.response.chat.id;
}

const send = (org: TestOrg, chatId: number, content: string) =>
  call(t, 'POST', `/api/v2/chats/${chatId}/messages`, { key: org.orgKey, body: { content } });

describe('chat turns with connected tool servers', () => {
  it('streams and stores a tool call whose result (text and structured) reaches the model', async () => {
    const org = await orgWithTools();
    const chatId = await newChat(org);
    model.enqueue(
      { toolCalls: [{ id: 'call_echo', name: 'desk__echo', arguments: { text: 'ping' } }] },
      { chunks: ['The server ', 'said ping.'] },
    );
    const res = await postStream(t.baseUrl, `/api/v2/chats/${chatId}/messages`, org.orgKey, {
      content: 'Echo ping please',
      stream: true,
    });
    expect(eventKinds(res.events)).toEqual(['tool_start', 'tool_result', 'content', 'done']);
    expect(res.events[0].data).toEqual({
      tool_call_id: 'call_echo',
      tool_name: 'desk__echo',
      parameters: { text: 'ping' },
    });
    const result = {
      content: [{ type: 'text', text: 'Echo: ping' }],
      structured_content: { echoed: 'ping', length: 4 },
    };
    expect(res.events[1].data).toEqual({
      tool_call_id: 'call_echo',
      tool_name: 'desk__echo',
      result,
      error: null,
      execution_time_ms: expect.any(Number),
    });
    const { message } = res.events.at(-1)!.data;
    expect(message.content).toBe(streamedText(res.events));
    expect(message.tool_executions).toEqual([
      {
        id: expect.any(Number),
        tool_name: 'desk__echo',
        tool_call_id: 'call_echo',
        status: 'completed',
        parameters: { text: 'ping' },
        result,
        error: null,
        execution_time_ms: res.events[1].data.execution_time_ms,
      },
    ]);
    const history = await call(t, 'GET', `/api/v2/chats/${chatId}/messages`, { key: org.orgKey });
    expect(history.body.response.messages[1].tool_executions).toEqual(message.tool_executions);
    expect(mcp.calls.at(-1)).toEqual({ name: 'echo', args: { text: 'ping' } });
    expect(model.chatRequests()[1].body.messages.at(-1)).toEqual({
      role: 'tool',
      tool_call_id: 'call_echo',
      content: 'Echo: ping',
    });
  });

  it('a failing tool gives status "failed" and its error while the turn completes', async () => {
    const org = await orgWithTools();
    const chatId = await newChat(org);
    model.enqueue(
      {
        toolCalls: [
          { id: 'call_fail', name: 'desk__fail', arguments: {} },
          { id: 'call_throw', name: 'desk__explode', arguments: {} },
        ],
      },
      { text: 'Both failed, sorry.' },
    );
    const res = await send(org, chatId, 'Try the broken tools');
    expectStatus(res, 200);
    expect(res.body.response.message.content).toBe('Both failed, sorry.');
    expect(
      res.body.response.message.tool_executions.map((e: any) => [
        e.tool_call_id,
        e.status,
        e.result,
        e.error,
      ]),
    ).toEqual([
      ['call_fail', 'failed', null, { message: 'The widget is broken' }],
      ['call_throw', 'failed', null, { message: 'kaboom' }],
    ]);
    const toolMessages = model.chatRequests()[1].body.messages.filter((m: any) => m.role === 'tool');
    expect(toolMessages.map((m: any) => m.content).join(' ')).toContain('The widget is broken');
  });

  it('a hanging tool times out as a failed execution and the turn completes', async () => {
    await t.deps.mcp.configure({ callTimeoutMs: 400 });
    const org = await orgWithTools();
    const chatId = await newChat(org);
    model.enqueue(
      { toolCalls: [{ id: 'call_hang', name: 'desk__hang', arguments: {} }] },
      { text: 'It hung.' },
    );
    const res = await postStream(t.baseUrl, `/api/v2/chats/${chatId}/messages`, org.orgKey, {
      content: 'Run the slow tool',
      stream: true,
    });
    expect(eventKinds(res.events)).toEqual(['tool_start', 'tool_result', 'content', 'done']);
    expect(res.events[1].data).toMatchObject({
      tool_call_id: 'call_hang',
      result: null,
      error: { message: 'The tool did not answer within 400 ms' },
    });
    expect(res.events[1].data.execution_time_ms).toBeGreaterThanOrEqual(350);
    expect(res.events.at(-1)!.data.message.tool_executions[0].status).toBe('failed');
  });

  it('a server that is down does not fail the turn: its tools are left out and the model is told', async () => {
    const org = await orgWithTools('Offline box', await unusedLoopbackUrl());
    await call(t, 'POST', '/api/v1/integrations', { key: org.orgKey, body: { name: 'Desk', url: mcp.url } });
    const chatId = await newChat(org);
    model.enqueue({ text: 'Answered without the offline tools.' });
    const res = await send(org, chatId, 'Hello');
    expectStatus(res, 200);
    expect(res.body.response.message.content).toBe('Answered without the offline tools.');
    const [request] = model.chatRequests();
    const offered = request.body.tools.map((x: any) => x.function.name);
    expect(offered).toContain('desk__echo');
    expect(offered.some((n: string) => n.startsWith('offline-box__'))).toBe(false);
    expect(request.body.messages[0].role).toBe('system');
    expect(request.body.messages[0].content).toContain(
      'The tool server "Offline box" is unavailable right now',
    );
  });

  it('offers the tools to agents that enable integrations, and to chats without an agent, only', async () => {
    const org = await orgWithTools();
    const [withTools, without] = await t.deps.database.db
      .insert(agents)
      .values([
        { organizationId: org.organizationId, name: 'Connected', tools: ['integrations'] },
        { organizationId: org.organizationId, name: 'Offline', tools: ['knowledge'] },
      ])
      .returning();
    const offered = async (agentId?: number) => {
      model.reset();
      const chatId = await newChat(org, agentId ? { agent_id: agentId } : {});
      expectStatus(await send(org, chatId, 'Hi'), 200);
      return (model.chatRequests()[0].body.tools ?? []).map((x: any) => x.function.name);
    };
    expect(await offered()).toContain('desk__add');
    expect(await offered(withTools.id)).toContain('desk__add');
    expect(await offered(without.id)).toEqual([]);
  });
});

describe('artifact generation with connected tool servers', () => {
  it('calls tools while generating (blocking, streaming, fire-and-forget) and refining, recorded in chat_history', async () => {
    const org = await orgWithTools();
    await useFakeModel(t, org, model);
    const type = await createArtifactType(t, org, 'report', 'Report');
    const skill = await createSkill(t, org, {
      name: 'Sum report',
      content: 'Report the sum.',
      typeIds: [type.id],
    });

    model.enqueue(
      { toolCalls: [{ id: 'gen_add', name: 'desk__add', arguments: { a: 20, b: 22 } }] },
      { text: '# Sum\n\nThe answer is 42.' },
    );
    const blocking = await call(
      t,
      'POST',
      `/api/v1/artifact_types/report/artifacts?project_id=${org.projectId}`,
      {
        key: org.orgKey,
        body: { skill_id: skill.id, inputs: [], name: 'Sum' },
      },
    );
    expectStatus(blocking, 201);
    expect(blocking.body.artifact.content).toBe('# Sum\n\nThe answer is 42.');
    expect(blocking.body.artifact.chat_history).toEqual([
      { role: 'user', content: 'Report the sum.' },
      {
        role: 'tool',
        content: expect.stringContaining('42'),
        tool_name: 'desk__add',
        tool_call_id: 'gen_add',
        parameters: { a: 20, b: 22 },
        error: null,
      },
      { role: 'assistant', content: '# Sum\n\nThe answer is 42.' },
    ]);
    expect(mcp.calls.at(-1)).toEqual({ name: 'add', args: { a: 20, b: 22 } });
    expect(model.chatRequests()[1].body.messages.at(-1)).toMatchObject({ role: 'tool', content: '42' });

    model.reset();
    model.enqueue(
      { toolCalls: [{ id: 'ref_echo', name: 'desk__echo', arguments: { text: 'refined' } }] },
      { text: '# Sum\n\nThe answer is still 42.' },
    );
    const refined = await call(
      t,
      'POST',
      `/api/v1/artifact_types/report/artifacts/${blocking.body.artifact.id}/refine`,
      { key: org.orgKey, body: { refine_prompt: 'Check it again' } },
    );
    expectStatus(refined, 200);
    expect(refined.body.artifact.content).toBe('# Sum\n\nThe answer is still 42.');
    expect(refined.body.artifact.chat_history).toEqual(
      expect.arrayContaining([
        expect.objectContaining({
          role: 'tool',
          tool_name: 'desk__echo',
          tool_call_id: 'ref_echo',
          content: expect.stringContaining('Echo: refined'),
          error: null,
        }),
      ]),
    );

    model.reset();
    model.enqueue(
      { toolCalls: [{ id: 'gen_fail', name: 'desk__fail', arguments: {} }] },
      { chunks: ['# Partial\n\n', 'The tool failed.'] },
    );
    const streamed = await postArtifactStream(
      t,
      `/api/v1/artifact_types/report/artifacts/stream?project_id=${org.projectId}`,
      org.orgKey,
      { skill_id: skill.id, inputs: [], name: 'Partial' },
    );
    expect(streamed.status).toBe(200);
    const done = streamed.data.at(-1);
    expect(done.done).toBe(true);
    const read = await call(t, 'GET', `/api/v1/artifact_types/report/artifacts/${done.artifact_id}`, {
      key: org.orgKey,
    });
    expect(read.body.artifact.chat_history[1]).toMatchObject({
      role: 'tool',
      tool_name: 'desk__fail',
      tool_call_id: 'gen_fail',
      error: expect.anything(),
    });
    expect(JSON.stringify(read.body.artifact.chat_history[1].error)).toContain('The widget is broken');

    // Fire-and-forget: the background job runs the same tools.
    model.reset();
    model.enqueue(
      { toolCalls: [{ id: 'bg_add', name: 'desk__add', arguments: { a: 1, b: 2 } }] },
      { text: '# Background\n\nThree.' },
    );
    const accepted = await call(
      t,
      'POST',
      `/api/v1/artifact_types/report/artifacts?project_id=${org.projectId}`,
      {
        key: org.orgKey,
        body: { skill_id: skill.id, inputs: [], name: 'Background', fire_and_forget: true },
      },
    );
    expectStatus(accepted, 200);
    const requestId = accepted.body.api_async_create_event_id;
    const finished = await eventually(async () => {
      const status = await call(t, 'GET', `/api/v1/async_requests/${requestId}`, { key: org.orgKey });
      expect(status.body.async_request.status).toBe('generated');
      return status.body.async_request;
    }, 15_000);
    const background = await call(
      t,
      'GET',
      `/api/v1/artifact_types/report/artifacts/${finished.artifact_id}`,
      {
        key: org.orgKey,
      },
    );
    expect(background.body.artifact.chat_history).toContainEqual(
      expect.objectContaining({ role: 'tool', tool_name: 'desk__add', tool_call_id: 'bg_add', error: null }),
    );
    expect(mcp.calls.at(-1)).toEqual({ name: 'add', args: { a: 1, b: 2 } });
  });
});
