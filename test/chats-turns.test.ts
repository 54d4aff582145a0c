import os from 'node:os';
import { tool } from 'ai';
import { and, eq, sql } from 'drizzle-orm';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { type Database, openDatabase } from '../src/db/client.js';
import {
  agentSkills,
  agents,
  artifactTypes,
  chatMessages,
  chatTurns,
  creditLedger,
  projects,
  skillArtifactTypes,
  skills,
} from '../src/db/schema/index.js';
import {
  addModel,
  asInHistory,
  balanceOf,
  type ChatTestApp,
  eventKinds,
  eventNames,
  eventually,
  expectMessageShape,
  postStream,
  type RecordedToolCall,
  startChatApp,
  startSibling,
  streamedText,
  testKnowledgeFamily,
} from './chats-support.js';
import { busyEventData, call, createOrg, expectStatus, expectV2Error, type TestOrg } from './helpers/app.js';
import { backend } from './helpers/database.js';
import {
  type FakeModelServer,
  startFakeAnthropicServer,
  startFakeModelServer,
} from './helpers/fake-model-server.js';
import { readSse } from './helpers/sse.js';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

let server: FakeModelServer;
beforeAll(async () => {
  server = await startFakeModelServer();
});
afterEach(() => server.reset());
afterAll(() => server.close());

/** An organization whose default model is the fake server (model name `local-llama`). */
async function orgWithFakeModel(t: ChatTestApp, prices: { input?: number; output?: number } = {}) {
  const org = await createOrg(t);
  const modelId = await addModel(t, org.organizationId, {
    baseUrl: server.baseUrl,
    model: 'local-llama',
    makeDefault: true,
    ...prices,
  });
  return { ...org, modelConfigurationId: modelId };
}

async function newChat(t: ChatTestApp, org: TestOrg, body: Record<string, unknown> = {}) {
  const res = await call(t, 'POST', '/api/v2/chats', {
    key: org.orgKey,
    body: { project_id: org.projectId, ...body },
  });
  expectStatus(res, 201);
  return res.body.response.chat as { id: number };
}

const historyOf = async (t: ChatTestApp, org: TestOrg, chatId: number) => {
  const res = await call(t, 'GET', `/api/v2/chats/${chatId}/messages`, { key: org.orgKey });
  expectStatus(res, 200);
  return res.body.response.messages as any[];
};

describe('chat turns against a model server', () => {
  let t: ChatTestApp;
  const toolCalls: RecordedToolCall[] = [];
  beforeAll(async () => {
    t = await startChatApp({
      deps: {
        toolFamilies: testKnowledgeFamily(toolCalls),
        turnSettings: { modelIdleMs: 2500, leaseMs: 600 },
      },
    });
  });
  afterAll(() => t.close());

  describe('streaming', () => {
    it('sends content events then done, with headers that stop buffering and the exact wire format', async () => {
      const org = await orgWithFakeModel(t);
      const chat = await newChat(t, org);
      server.enqueue({ chunks: ['Hello', ', ', 'wor', 'ld', '!'] });
      const res = await postStream(t.baseUrl, `/api/v2/chats/${chat.id}/messages`, org.orgKey, {
        content: 'Greet me',
        stream: true,
      });
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toBe('text/event-stream; charset=utf-8');
      expect(res.headers.get('cache-control')).toBe('no-cache, no-transform');
      expect(res.headers.get('x-accel-buffering')).toBe('no');
      expect(res.text).toMatch(/^event: content\ndata: \{"content":"Hello[^"]*"\}\nid: 1\n\nevent: /);
      // The first token is sent as it comes (with what arrived in the same read of the model's
      // response); later ones may be merged while the process is busy.
      expect(eventKinds(res.events)).toEqual(['content', 'done']);
      expect(res.events[0].data.content).toMatch(/^Hello/);
      expect(streamedText(res.events)).toBe('Hello, world!');
      const done = res.events.at(-1)!.data;
      expect(Object.keys(done)).toEqual(['message']);
      expectMessageShape(done.message, 'assistant', { fresh: true });
      expect(done.message).toMatchObject({
        content: 'Hello, world!',
        model: 'local-llama',
        tool_executions: [],
      });
      expect(done.message.content).toBe(streamedText(res.events));
      const history = await historyOf(t, org, chat.id);
      expect(history.at(-1)).toEqual(asInHistory(done.message));
      expect(history.at(-2)).toMatchObject({ role: 'user', content: 'Greet me', model: null });
    });

    it('on create, done carries the chat too; the whole conversation reaches the model', async () => {
      const org = await orgWithFakeModel(t);
      server.enqueue({ text: 'First answer' });
      const res = await postStream(t.baseUrl, '/api/v2/chats', org.orgKey, {
        project_id: org.projectId,
        content: 'First question',
        stream: true,
      });
      const done = res.events.at(-1)!;
      expect(done.event).toBe('done');
      expect(done.data.chat).toEqual({
        id: expect.any(Number),
        title: 'First question',
        project_id: org.projectId,
        model_configuration_id: org.modelConfigurationId,
        agent_id: null,
        created_at: expect.stringMatching(/\.\d{6}Z$/),
      });
      expect(done.data.message.content).toBe('First answer');

      server.enqueue({ text: 'Second answer' });
      const sent = await call(t, 'POST', `/api/v2/chats/${done.data.chat.id}/messages`, {
        key: org.orgKey,
        body: { content: 'Second question' },
      });
      expectStatus(sent, 200);
      const messages = server.chatRequests()[1].body.messages;
      expect(messages.map((m: any) => [m.role, m.content])).toEqual([
        ['system', expect.any(String)],
        ['user', 'First question'],
        ['assistant', 'First answer'],
        ['user', 'Second question'],
      ]);
    });

    it('a client that disconnects mid-stream does not stop the reply: it lands in history', async () => {
      const org = await orgWithFakeModel(t);
      const chat = await newChat(t, org);
      const words = ['One', ' two', ' three', ' four', ' five', ' six', ' seven', ' eight'];
      server.enqueue({ chunks: words, chunkDelayMs: 60 });
      const res = await postStream(
        t.baseUrl,
        `/api/v2/chats/${chat.id}/messages`,
        org.orgKey,
        { content: 'Count', stream: true },
        { until: (events) => events.length >= 1 },
      );
      expect(eventNames(res.events)).toEqual(['content']);
      const history = await eventually(async () => {
        const messages = await historyOf(t, org, chat.id);
        expect(messages).toHaveLength(2);
        return messages;
      });
      expect(history[1]).toMatchObject({ role: 'assistant', content: words.join('') });
      // The turn released its lease: the chat takes the next message.
      server.enqueue({ text: 'Next' });
      expectStatus(
        await call(t, 'POST', `/api/v2/chats/${chat.id}/messages`, {
          key: org.orgKey,
          body: { content: 'Again' },
        }),
        200,
      );
    });
  });

  describe('tools', () => {
    it('runs a tool call round trip: streamed, stored, sent back to the model', async () => {
      const org = await orgWithFakeModel(t);
      const chat = await newChat(t, org);
      server.enqueue(
        { toolCalls: [{ id: 'call_1', name: 'knowledge_search', arguments: { query: 'holidays' } }] },
        { chunks: ['Use ', 'the ', 'portal.'] },
      );
      const res = await postStream(t.baseUrl, `/api/v2/chats/${chat.id}/messages`, org.orgKey, {
        content: 'How do I take holidays?',
        stream: true,
      });
      expect(eventKinds(res.events)).toEqual(['tool_start', 'tool_result', 'content', 'done']);
      expect(streamedText(res.events)).toBe('Use the portal.');
      expect(res.events[0].data).toEqual({
        tool_call_id: 'call_1',
        tool_name: 'knowledge_search',
        parameters: { query: 'holidays' },
      });
      const passages = [
        {
          // Numbered for [n] citations (issue 18).
          marker: 1,
          document_id: 7,
          document_name: 'Handbook.pdf',
          position: 0,
          score: 0.9,
          text: 'Holidays are requested through the HR portal.',
        },
      ];
      expect(res.events[1].data).toEqual({
        tool_call_id: 'call_1',
        tool_name: 'knowledge_search',
        result: { passages },
        error: null,
        execution_time_ms: expect.any(Number),
      });
      expect(Number.isInteger(res.events[1].data.execution_time_ms)).toBe(true);
      const { message } = res.events.at(-1)!.data;
      expect(message.content).toBe('Use the portal.');
      expect(message.content).toBe(streamedText(res.events));
      expect(message.tool_executions).toEqual([
        {
          id: expect.any(Number),
          tool_name: 'knowledge_search',
          tool_call_id: 'call_1',
          status: 'completed',
          parameters: { query: 'holidays' },
          result: { passages },
          error: null,
          execution_time_ms: res.events[1].data.execution_time_ms,
        },
      ]);
      expect((await historyOf(t, org, chat.id))[1].tool_executions).toEqual(message.tool_executions);
      expect(toolCalls.at(-1)).toEqual({
        query: 'holidays',
        scope: { projectId: org.projectId, chatId: chat.id, agentId: null },
      });

      const [first, second] = server.chatRequests();
      expect(first.body.tools.map((tool: any) => tool.function.name)).toEqual(['knowledge_search']);
      expect(second.body.messages.at(-1)).toEqual({
        role: 'tool',
        tool_call_id: 'call_1',
        content: JSON.stringify({ passages }),
      });
    });

    it('a failing tool becomes an error result for the model and a failed execution; the turn completes', async () => {
      const org = await orgWithFakeModel(t);
      const chat = await newChat(t, org);
      server.enqueue(
        { toolCalls: [{ id: 'call_x', name: 'knowledge_search', arguments: { query: 'explode' } }] },
        { text: 'The search is down, sorry.' },
      );
      const res = await call(t, 'POST', `/api/v2/chats/${chat.id}/messages`, {
        key: org.orgKey,
        body: { content: 'Search please' },
      });
      expectStatus(res, 200);
      expect(res.body.response.message.content).toBe('The search is down, sorry.');
      expect(res.body.response.message.tool_executions).toEqual([
        {
          id: expect.any(Number),
          tool_name: 'knowledge_search',
          tool_call_id: 'call_x',
          status: 'failed',
          parameters: { query: 'explode' },
          result: null,
          error: { message: 'The search index is offline' },
          execution_time_ms: expect.any(Number),
        },
      ]);
      const toolMessage = server.chatRequests()[1].body.messages.at(-1);
      expect(toolMessage.role).toBe('tool');
      expect(toolMessage.content).toContain('The search index is offline');
    });

    it('streams a failed tool as tool_result with its error', async () => {
      const org = await orgWithFakeModel(t);
      const chat = await newChat(t, org);
      server.enqueue(
        { toolCalls: [{ id: 'call_y', name: 'knowledge_search', arguments: { query: 'explode now' } }] },
        { text: 'Down.' },
      );
      const res = await postStream(t.baseUrl, `/api/v2/chats/${chat.id}/messages`, org.orgKey, {
        content: 'Search',
        stream: true,
      });
      expect(eventNames(res.events)).toEqual(['tool_start', 'tool_result', 'content', 'done']);
      expect(res.events[1].data).toMatchObject({
        tool_call_id: 'call_y',
        result: null,
        error: { message: 'The search index is offline' },
      });
    });

    it('a tool slower than the model idle limit does not time the turn out; its run time is measured', async () => {
      const org = await orgWithFakeModel(t);
      const chat = await newChat(t, org);
      const slow = await startSibling(t, {
        turnSettings: { modelIdleMs: 300 },
        toolFamilies: {
          knowledge: async () => ({
            tools: {
              slow_lookup: tool({
                description: 'Takes its time',
                inputSchema: z.object({}),
                execute: async () => {
                  await sleep(700);
                  return { found: true };
                },
              }),
            },
            notes: [],
          }),
        },
      });
      try {
        server.enqueue({ toolCalls: [{ name: 'slow_lookup', arguments: {} }] }, { text: 'Found it.' });
        const res = await call(slow.api, 'POST', `/api/v2/chats/${chat.id}/messages`, {
          key: org.orgKey,
          body: { content: 'Look it up' },
        });
        expectStatus(res, 200);
        const [execution] = res.body.response.message.tool_executions;
        expect(execution).toMatchObject({
          tool_name: 'slow_lookup',
          status: 'completed',
          parameters: {},
          result: { found: true },
        });
        expect(execution.execution_time_ms).toBeGreaterThanOrEqual(650);
        expect(execution.execution_time_ms).toBeLessThan(5000);
      } finally {
        await slow.app.close();
      }
    });
  });

  describe('agents, project context and skills', () => {
    it("sends the agent's instructions, the project's name and overview and tool notes as the system prompt", async () => {
      const org = await orgWithFakeModel(t);
      await t.deps.database.db
        .update(projects)
        .set({ name: 'Boatyard', overview: 'We build wooden boats.' })
        .where(eq(projects.id, org.projectId));
      const [agent] = await t.deps.database.db
        .insert(agents)
        .values({
          organizationId: org.organizationId,
          name: 'Pirate',
          instructions: 'Always answer like a pirate.',
          tools: ['knowledge'],
        })
        .returning();
      const [skill] = await t.deps.database.db
        .insert(skills)
        .values({
          organizationId: org.organizationId,
          name: 'Shanty',
          slug: 'shanty',
          content: 'Write a sea shanty.',
          description: 'A song',
        })
        .returning();
      await t.deps.database.db.insert(agentSkills).values({ agentId: agent.id, skillId: skill.id });
      const chat = await newChat(t, org, { agent_id: agent.id });
      expect(chat).toMatchObject({ agent_id: agent.id });
      server.enqueue({ text: 'Arr!' });
      expectStatus(
        await call(t, 'POST', `/api/v2/chats/${chat.id}/messages`, {
          key: org.orgKey,
          body: { content: 'Hi' },
        }),
        200,
      );
      const [request] = server.chatRequests();
      const system = request.body.messages[0];
      expect(system.role).toBe('system');
      expect(system.content.startsWith('Always answer like a pirate.')).toBe(true);
      expect(system.content).toContain('"Boatyard"');
      expect(system.content).toContain('We build wooden boats.');
      expect(system.content).toContain('/shanty: Shanty — A song');
      expect(system.content).toContain('The knowledge base holds the company handbook.');
      expect(request.body.tools.map((tool: any) => tool.function.name)).toEqual(['knowledge_search']);
      expect(request.body.model).toBe('local-llama');
    });

    it('an agent without tools gets none; its own model configuration is pinned on its chats', async () => {
      const org = await orgWithFakeModel(t);
      const agentModel = await addModel(t, org.organizationId, {
        baseUrl: server.baseUrl,
        model: 'agent-model',
      });
      const [agent] = await t.deps.database.db
        .insert(agents)
        .values({
          organizationId: org.organizationId,
          name: 'Plain',
          tools: [],
          modelConfigurationId: agentModel,
        })
        .returning();
      const chat = await newChat(t, org, { agent_id: agent.id });
      expect(chat).toMatchObject({ model_configuration_id: agentModel });
      server.enqueue({ text: 'ok' });
      const res = await call(t, 'POST', `/api/v2/chats/${chat.id}/messages`, {
        key: org.orgKey,
        body: { content: 'Hi' },
      });
      expect(res.body.response.message.model).toBe('agent-model');
      const [request] = server.chatRequests();
      expect(request.body.tools).toBeUndefined();
      expect(request.body.model).toBe('agent-model');
    });

    it('keeps the pinned model when the organization default changes', async () => {
      const org = await orgWithFakeModel(t);
      const chat = await newChat(t, org);
      await addModel(t, org.organizationId, {
        baseUrl: server.baseUrl,
        model: 'newer-model',
        makeDefault: true,
      });
      server.enqueue({ text: 'ok' });
      await call(t, 'POST', `/api/v2/chats/${chat.id}/messages`, {
        key: org.orgKey,
        body: { content: 'Hi' },
      });
      expect(server.chatRequests()[0].body.model).toBe('local-llama');
      const explicit = await newChat(t, org, { model_configuration_id: org.modelConfigurationId });
      expect(explicit).toMatchObject({ model_configuration_id: org.modelConfigurationId });
    });

    it("runs a skill from its slash command: the model gets the skill's prompt with the rest of the message", async () => {
      const org = await orgWithFakeModel(t);
      await t.deps.database.db.insert(skills).values({
        organizationId: org.organizationId,
        name: 'Summarize',
        slug: 'summarize',
        content: 'Summarize the text below in one sentence.',
      });
      const chat = await newChat(t, org);
      server.enqueue({ text: 'A fox jumps.' }, { text: 'Plain.' });
      await call(t, 'POST', `/api/v2/chats/${chat.id}/messages`, {
        key: org.orgKey,
        body: { content: '/summarize The quick brown fox jumps over the lazy dog.' },
      });
      const lastUser = (request: any) => request.body.messages.at(-1);
      expect(lastUser(server.chatRequests()[0])).toEqual({
        role: 'user',
        content: 'Summarize the text below in one sentence.\n\nThe quick brown fox jumps over the lazy dog.',
      });
      // History shows what the user typed; an unknown command is sent as written.
      const history = await historyOf(t, org, chat.id);
      expect(history[0].content).toBe('/summarize The quick brown fox jumps over the lazy dog.');
      await call(t, 'POST', `/api/v2/chats/${chat.id}/messages`, {
        key: org.orgKey,
        body: { content: '/unknown do it' },
      });
      expect(lastUser(server.chatRequests()[1])).toEqual({ role: 'user', content: '/unknown do it' });
      // Earlier skill runs stay expanded in the context of later turns.
      expect(server.chatRequests()[1].body.messages[1].content).toContain('Summarize the text below');
    });
  });

  describe('credits', () => {
    it("charges usage at the model configuration's prices, in the ledger and on the message", async () => {
      const org = await orgWithFakeModel(t, { input: 2, output: 4 });
      const chat = await newChat(t, org);
      const before = await balanceOf(t, org.organizationId);
      server.enqueue({ text: 'Priced reply', usage: { prompt_tokens: 1000, completion_tokens: 500 } });
      const res = await call(t, 'POST', `/api/v2/chats/${chat.id}/messages`, {
        key: org.orgKey,
        body: { content: 'Hi' },
      });
      expectStatus(res, 200);
      const messageId = res.body.response.message.id;
      expect(await balanceOf(t, org.organizationId)).toBeCloseTo(before - 4, 6);
      const [ledger] = await t.deps.database.db
        .select()
        .from(creditLedger)
        .where(eq(creditLedger.reference, `message:${messageId}`));
      expect(ledger).toMatchObject({
        organizationId: org.organizationId,
        kind: 'usage',
        amount: -4,
        projectId: org.projectId,
        modelConfigurationId: org.modelConfigurationId,
        inputTokens: 1000,
        outputTokens: 500,
      });
      expect(ledger.apiKeyId).toEqual(expect.any(Number));
      const [row] = await t.deps.database.db
        .select()
        .from(chatMessages)
        .where(eq(chatMessages.id, messageId));
      expect(row).toMatchObject({ inputTokens: 1000, outputTokens: 500, credits: 4 });
    });

    it('sums the usage of every step of a tool round trip', async () => {
      const org = await orgWithFakeModel(t, { input: 2, output: 4 });
      const chat = await newChat(t, org);
      const before = await balanceOf(t, org.organizationId);
      server.enqueue(
        {
          toolCalls: [{ name: 'knowledge_search', arguments: { query: 'q' } }],
          usage: { prompt_tokens: 100, completion_tokens: 10 },
        },
        { text: 'Done', usage: { prompt_tokens: 200, completion_tokens: 20 } },
      );
      await call(t, 'POST', `/api/v2/chats/${chat.id}/messages`, {
        key: org.orgKey,
        body: { content: 'Hi' },
      });
      expect(await balanceOf(t, org.organizationId)).toBeCloseTo(before - (300 * 2 + 30 * 4) / 1000, 6);
    });
  });

  describe('failures', () => {
    it('500 when the provider keeps failing (after bounded retries); both messages show in history as failed', async () => {
      const org = await orgWithFakeModel(t);
      const chat = await newChat(t, org);
      server.enqueue({ status: 500 }, { status: 500 }, { status: 500 }, { text: 'never' });
      const res = await call(t, 'POST', `/api/v2/chats/${chat.id}/messages`, {
        key: org.orgKey,
        body: { content: 'Hi' },
      });
      expectV2Error(res, 500, 'model_error');
      expect(res.body.response.message).toMatch(/HTTP 500/);
      expect(res.body.response).not.toHaveProperty('chat_id');
      expect(server.chatRequests()).toHaveLength(3);
      const history = await historyOf(t, org, chat.id);
      expect(history.map((m: any) => [m.role, m.content, m.status])).toEqual([
        ['user', 'Hi', 'failed'],
        ['assistant', '', 'failed'],
      ]);
      expectMessageShape(history[0], 'user', { status: 'failed' });
      expectMessageShape(history[1], 'assistant', { status: 'failed' });
      const got = await call(t, 'GET', `/api/v2/chats/${chat.id}`, { key: org.orgKey });
      expect(got.body.response.chat.message_count).toBe(2);
      // Both failed with the reason; the lease is free again, and the failed turn is not sent to the model.
      const rows = await t.deps.database.db
        .select()
        .from(chatMessages)
        .where(eq(chatMessages.chatId, chat.id));
      expect(rows.map((r) => [r.role, r.status])).toEqual([
        ['user', 'failed'],
        ['assistant', 'failed'],
      ]);
      server.enqueue({ text: 'Back' });
      expectStatus(
        await call(t, 'POST', `/api/v2/chats/${chat.id}/messages`, {
          key: org.orgKey,
          body: { content: 'Hi' },
        }),
        200,
      );
      // The model is not given the failed turn.
      const sent = server
        .chatRequests()
        .at(-1)!
        .body.messages.filter((m: any) => m.role !== 'system');
      expect(sent).toEqual([{ role: 'user', content: 'Hi' }]);
    });

    it('retries a 503 and a 429 and then answers', async () => {
      const org = await orgWithFakeModel(t);
      const chat = await newChat(t, org);
      server.enqueue({ status: 503 }, { status: 429 }, { text: 'Recovered' });
      const res = await call(t, 'POST', `/api/v2/chats/${chat.id}/messages`, {
        key: org.orgKey,
        body: { content: 'Hi' },
      });
      expectStatus(res, 200);
      expect(res.body.response.message.content).toBe('Recovered');
      expect(server.chatRequests()).toHaveLength(3);
    });

    it('a failed create keeps the chat and returns chat_id (non-streaming) or chat (streamed error)', async () => {
      const org = await orgWithFakeModel(t);
      server.enqueue({ status: 400, errorBody: { error: { message: 'context length exceeded' } } });
      const res = await call(t, 'POST', '/api/v2/chats', {
        key: org.orgKey,
        body: { project_id: org.projectId, content: 'Hi' },
      });
      expectV2Error(res, 500, 'model_error');
      // The provider's status, never its words (issue 15: a base URL may name any server).
      expect(res.body.response.message).toBe('The model provider failed: the provider answered HTTP 400');
      const chatId = res.body.response.chat_id;
      expect(chatId).toEqual(expect.any(Number));
      expectStatus(await call(t, 'GET', `/api/v2/chats/${chatId}`, { key: org.orgKey }), 200);

      server.enqueue({ status: 400 });
      const streamed = await postStream(t.baseUrl, '/api/v2/chats', org.orgKey, {
        project_id: org.projectId,
        content: 'Hi again',
        stream: true,
      });
      expect(streamed.status).toBe(200);
      expect(streamed.events).toEqual([
        {
          event: 'error',
          data: {
            message: expect.any(String),
            code: 500,
            error: 'model_error',
            chat: expect.objectContaining({ id: expect.any(Number), title: 'Hi again' }),
          },
        },
      ]);
      const list = await call(t, 'GET', '/api/v2/chats', { key: org.orgKey });
      expect(list.body.response.chats.map((c: any) => c.id)).toEqual([
        streamed.events[0].data.chat.id,
        chatId,
      ]);
    });

    it('a stream that dies mid-way: content so far, then an error event; history keeps the partial reply as failed', async () => {
      const org = await orgWithFakeModel(t);
      const chat = await newChat(t, org);
      server.enqueue({ chunks: ['Part', ' one', ' two', ' three'], failAfterChunks: 2 });
      const res = await postStream(t.baseUrl, `/api/v2/chats/${chat.id}/messages`, org.orgKey, {
        content: 'Hi',
        stream: true,
      });
      expect(eventKinds(res.events)).toEqual(['content', 'error']);
      expect(streamedText(res.events)).toBe('Part one');
      expect(res.events.at(-1)!.data).toEqual({
        message: expect.any(String),
        code: 500,
        error: 'model_error',
      });
      expect((await historyOf(t, org, chat.id)).map((m: any) => [m.role, m.content, m.status])).toEqual([
        ['user', 'Hi', 'failed'],
        ['assistant', 'Part one', 'failed'],
      ]);
      const [assistant] = await t.deps.database.db
        .select()
        .from(chatMessages)
        .where(and(eq(chatMessages.chatId, chat.id), eq(chatMessages.role, 'assistant')));
      expect(assistant).toMatchObject({ status: 'failed', content: 'Part one' });
    });

    it('500 when the model stays silent past the idle limit', async () => {
      const org = await orgWithFakeModel(t);
      const chat = await newChat(t, org);
      server.enqueue({ hang: true });
      const res = await call(t, 'POST', `/api/v2/chats/${chat.id}/messages`, {
        key: org.orgKey,
        body: { content: 'Hi' },
      });
      expectV2Error(res, 500, 'model_timeout');
      expect(res.body.response.message).toMatch(/did not respond/);
    });
  });

  describe('one turn per chat', () => {
    let sibling: Awaited<ReturnType<typeof startSibling>>;
    let secondDb: Database | null = null;
    beforeAll(async () => {
      // On PostgreSQL the second app has its own connection pool, as a second process would.
      if (backend === 'postgres') {
        secondDb = await openDatabase({ databaseUrl: t.testDb.url, dataDir: os.tmpdir(), poolSize: 4 });
      }
      sibling = await startSibling(t, {
        database: secondDb ?? t.deps.database,
        toolFamilies: {},
        turnSettings: { leaseMs: 600 },
      });
    });
    afterAll(async () => {
      await sibling.app.close();
      await secondDb?.close();
    });

    it('409 from another app instance while a turn runs, kept past the lease length by renewal', async () => {
      const org = await orgWithFakeModel(t);
      const chat = await newChat(t, org);
      // The model answers only when released: the checks below run while the turn certainly runs.
      let release = () => {};
      const held = new Promise<void>((resolve) => {
        release = resolve;
      });
      server.enqueue({ text: 'Slow answer', holdUntil: held });
      const first = call(t, 'POST', `/api/v2/chats/${chat.id}/messages`, {
        key: org.orgKey,
        body: { content: 'One' },
      });
      await server.waitForRequests(1);

      const refused = await call(sibling.api, 'POST', `/api/v2/chats/${chat.id}/messages`, {
        key: org.orgKey,
        body: { content: 'Two' },
      });
      expectV2Error(refused, 409, 'turn_in_progress');
      const streamed = await postStream(sibling.baseUrl, `/api/v2/chats/${chat.id}/messages`, org.orgKey, {
        content: 'Two',
        stream: true,
      });
      expect(streamed.status).toBe(200);
      expect(streamed.events).toEqual([
        {
          event: 'error',
          data: busyEventData(),
        },
      ]);
      // Longer than the 600 ms lease: only renewal keeps the chat locked.
      await sleep(800);
      expectV2Error(
        await call(sibling.api, 'POST', `/api/v2/chats/${chat.id}/messages`, {
          key: org.orgKey,
          body: { content: 'Three' },
        }),
        409,
        'turn_in_progress',
      );

      release();
      expectStatus(await first, 200);
      server.enqueue({ text: 'Now' });
      const after = await call(sibling.api, 'POST', `/api/v2/chats/${chat.id}/messages`, {
        key: org.orgKey,
        body: { content: 'Four' },
      });
      expectStatus(after, 200);
      const history = await historyOf(t, org, chat.id);
      expect(history.map((m) => m.content)).toEqual(['One', 'Slow answer', 'Four', 'Now']);
    });

    it('takes over the lease of a turn whose process died once it expired; a live lease still refuses', async () => {
      const org = await orgWithFakeModel(t);
      const chat = await newChat(t, org);
      const db = t.deps.database.db;
      const [live] = await db
        .insert(chatTurns)
        .values({
          organizationId: org.organizationId,
          chatId: chat.id,
          status: 'running',
          leaseExpiresAt: sql`now() + interval '1 minute'`,
        })
        .returning();
      expectV2Error(
        await call(t, 'POST', `/api/v2/chats/${chat.id}/messages`, {
          key: org.orgKey,
          body: { content: 'Hi' },
        }),
        409,
        'turn_in_progress',
      );
      await db
        .update(chatTurns)
        .set({ leaseExpiresAt: sql`now() - interval '1 second'` })
        .where(eq(chatTurns.id, live.id));
      server.enqueue({ text: 'Taken over' });
      const res = await call(t, 'POST', `/api/v2/chats/${chat.id}/messages`, {
        key: org.orgKey,
        body: { content: 'Hi' },
      });
      expectStatus(res, 200);
      const [stale] = await db.select().from(chatTurns).where(eq(chatTurns.id, live.id));
      expect(stale.status).toBe('expired');
    });
  });

  describe('shutdown', () => {
    it('lets a running turn finish when the app closes within the grace period', async () => {
      const org = await orgWithFakeModel(t);
      const chat = await newChat(t, org);
      const other = await startSibling(t, { turnSettings: { leaseMs: 600 } });
      server.enqueue({ text: 'Finished before exit', firstTokenDelayMs: 400 });
      const stream = postStream(other.baseUrl, `/api/v2/chats/${chat.id}/messages`, org.orgKey, {
        content: 'Hi',
        stream: true,
      });
      await server.waitForRequests(1);
      await other.app.close();
      const res = await stream;
      expect(eventKinds(res.events)).toEqual(['content', 'done']);
      expect((await historyOf(t, org, chat.id)).map((m) => m.content)).toEqual([
        'Hi',
        'Finished before exit',
      ]);
    });

    it('cancels turns still running when the grace period is over, telling the client and freeing the chat', async () => {
      const org = await orgWithFakeModel(t);
      const chat = await newChat(t, org);
      // 3 s of grace leaves none for turns (3 s are kept to record the cancellation).
      const other = await startSibling(t, { config: { ...t.deps.config, shutdownGraceMs: 3000 } });
      server.enqueue({ hang: true });
      const stream = postStream(other.baseUrl, `/api/v2/chats/${chat.id}/messages`, org.orgKey, {
        content: 'Hi',
        stream: true,
      });
      await server.waitForRequests(1);
      await other.app.close();
      const res = await stream;
      expect(res.events).toEqual([
        {
          event: 'error',
          data: { message: expect.stringMatching(/shut down/), code: 500, error: 'turn_cancelled' },
        },
      ]);
      const rows = await t.deps.database.db
        .select()
        .from(chatMessages)
        .where(eq(chatMessages.chatId, chat.id));
      // The turn was cancelled by the shutdown; for the user, their message failed.
      expect(rows.map((r) => r.status)).toEqual(['failed', 'failed']);
      const turns = await t.deps.database.db.select().from(chatTurns).where(eq(chatTurns.chatId, chat.id));
      expect(turns.map((turn) => turn.status)).toEqual(['cancelled']);
      server.enqueue({ text: 'Back' });
      expectStatus(
        await call(t, 'POST', `/api/v2/chats/${chat.id}/messages`, {
          key: org.orgKey,
          body: { content: 'Hi' },
        }),
        200,
      );
    });
  });
});

describe('reply timeout (504)', () => {
  let t: ChatTestApp;
  beforeAll(async () => {
    t = await startChatApp({ env: { REPLY_TIMEOUT_MS: '400' } });
  });
  afterAll(() => t.close());

  it('non-streaming: 504 after the timeout, and the reply still finishes into history', async () => {
    const org = await orgWithFakeModel(t);
    const chat = await newChat(t, org);
    server.enqueue({ text: 'Late but complete', firstTokenDelayMs: 900 });
    const res = await call(t, 'POST', `/api/v2/chats/${chat.id}/messages`, {
      key: org.orgKey,
      body: { content: 'Hi' },
    });
    expectV2Error(res, 504, 'reply_timeout');
    expect(res.body.response.message).toMatch(/history/);
    await eventually(async () => {
      const history = await historyOf(t, org, chat.id);
      expect(history.map((m) => m.content)).toEqual(['Hi', 'Late but complete']);
    });
  });

  it('on create: 504 with chat_id; streamed, the reply is not cut: done with the chat', async () => {
    const org = await orgWithFakeModel(t);
    server.enqueue({ text: 'Late', firstTokenDelayMs: 900 });
    const res = await call(t, 'POST', '/api/v2/chats', {
      key: org.orgKey,
      body: { project_id: org.projectId, content: 'Hi' },
    });
    expectV2Error(res, 504, 'reply_timeout');
    expect(res.body.response.chat_id).toEqual(expect.any(Number));

    server.enqueue({ text: 'Late again', firstTokenDelayMs: 900 });
    const streamed = await postStream(t.baseUrl, '/api/v2/chats', org.orgKey, {
      project_id: org.projectId,
      content: 'Hi',
      stream: true,
    });
    // REPLY_TIMEOUT_MS bounds non-streaming requests only (spec 4.1, 7.1).
    expect(eventKinds(streamed.events)).toEqual(['content', 'done']);
    expect(streamed.events.at(-1)!.data).toMatchObject({
      message: { content: 'Late again' },
      chat: { id: expect.any(Number) },
    });
    const chatId = streamed.events.at(-1)!.data.chat.id;
    expect((await historyOf(t, org, chatId)).map((m) => m.content)).toEqual(['Hi', 'Late again']);
    await eventually(async () => {
      expect((await historyOf(t, org, res.body.response.chat_id)).map((m) => m.content)).toEqual([
        'Hi',
        'Late',
      ]);
    });
  });
});

describe('streams outlast REPLY_TIMEOUT_MS (it bounds non-streaming requests only)', () => {
  let t: ChatTestApp;
  beforeAll(async () => {
    t = await startChatApp({
      env: { REPLY_TIMEOUT_MS: '400' },
      deps: {
        // A silent model still fails at its idle limit; a slow tool pauses that limit.
        turnSettings: { modelIdleMs: 600 },
        toolFamilies: {
          knowledge: async () => ({
            tools: {
              slow_lookup: tool({
                description: 'Takes its time',
                inputSchema: z.object({}),
                execute: async () => {
                  await sleep(1200);
                  return { found: true };
                },
              }),
            },
            notes: [],
          }),
        },
      },
    });
  });
  afterAll(() => t.close());

  it('a streamed reply three times longer than the reply timeout ends with done', async () => {
    const org = await orgWithFakeModel(t);
    const chat = await newChat(t, org);
    const words = Array.from({ length: 12 }, (_, i) => ` w${i}`);
    server.enqueue({ chunks: words, chunkDelayMs: 100 });
    const started = Date.now();
    const res = await postStream(t.baseUrl, `/api/v2/chats/${chat.id}/messages`, org.orgKey, {
      content: 'Take your time',
      stream: true,
    });
    expect(Date.now() - started).toBeGreaterThan(1000);
    expect(eventNames(res.events).at(-1)).toBe('done');
    expect(streamedText(res.events)).toBe(words.join(''));
  });

  it('a streamed turn running a slow tool ends with done', async () => {
    const org = await orgWithFakeModel(t);
    const chat = await newChat(t, org);
    server.enqueue({ toolCalls: [{ name: 'slow_lookup', arguments: {} }] }, { text: 'Found it.' });
    const res = await postStream(t.baseUrl, `/api/v2/chats/${chat.id}/messages`, org.orgKey, {
      content: 'Look it up',
      stream: true,
    });
    expect(eventKinds(res.events)).toEqual(['tool_start', 'tool_result', 'content', 'done']);
    expect(res.events[1].data.execution_time_ms).toBeGreaterThanOrEqual(1100);
  });

  it('a silent model is still caught by the idle timeout (500), not left open', async () => {
    const org = await orgWithFakeModel(t);
    const chat = await newChat(t, org);
    server.enqueue({ hang: true });
    const res = await postStream(t.baseUrl, `/api/v2/chats/${chat.id}/messages`, org.orgKey, {
      content: 'Hello?',
      stream: true,
    });
    expect(res.events).toEqual([
      {
        event: 'error',
        data: { message: expect.stringMatching(/did not respond/), code: 500, error: 'model_timeout' },
      },
    ]);
  });

  it('an artifact stream longer than the reply timeout ends with done', async () => {
    const org = await orgWithFakeModel(t);
    const [type] = await t.deps.database.db
      .insert(artifactTypes)
      .values({
        organizationId: org.organizationId,
        slug: 'long-memo',
        name: 'Long memo',
        description: 'Long',
      })
      .returning();
    const [skill] = await t.deps.database.db
      .insert(skills)
      .values({
        organizationId: org.organizationId,
        name: 'Memo writer',
        slug: 'memo-writer',
        content: 'Write a memo.',
      })
      .returning();
    await t.deps.database.db
      .insert(skillArtifactTypes)
      .values({ skillId: skill.id, artifactTypeId: type.id });
    const words = Array.from({ length: 12 }, (_, i) => ` para${i}`);
    server.enqueue({ chunks: words, chunkDelayMs: 100 });
    const read = await readSse(
      `${t.baseUrl}/api/v1/artifact_types/long-memo/artifacts/stream?project_id=${org.projectId}`,
      { key: org.orgKey, body: { skill_id: skill.id, inputs: [] } },
    );
    expect(read.status).toBe(200);
    expect(read.events.at(-1)).toMatchObject({ event: 'done', data: { done: true } });
    expect(
      read.events
        .filter((e) => e.event === 'chunk')
        .map((e) => e.data.content)
        .join(''),
    ).toBe(words.join(''));
  });
});

describe('a model failing on every try, streamed', () => {
  let t: ChatTestApp;
  beforeAll(async () => {
    t = await startChatApp();
  });
  afterAll(() => t.close());

  it('ends with an error event of code 500 within a few seconds, even when the provider asks for long waits', async () => {
    const org = await orgWithFakeModel(t);
    const chat = await newChat(t, org);
    // No retry-after-ms; a retry-after of 30 s that bounded retries cut short.
    server.setResponder(() => ({ status: 500, retryAfterMs: null, headers: { 'retry-after': '30' } }));
    const started = Date.now();
    const res = await postStream(t.baseUrl, `/api/v2/chats/${chat.id}/messages`, org.orgKey, {
      content: 'Hi',
      stream: true,
    });
    const took = Date.now() - started;
    expect(res.events).toEqual([
      {
        event: 'error',
        data: {
          message: expect.stringMatching(/provider answered HTTP 500 \(3 attempts\)/),
          code: 500,
          error: 'model_error',
        },
      },
    ]);
    expect(server.chatRequests()).toHaveLength(3);
    // Two retries of at most 2 s each.
    expect(took).toBeLessThan(10_000);
    expect(took).toBeGreaterThanOrEqual(3500);
  });

  it('without retry-after, the retries wait 0.5 s then 1.5 s', async () => {
    const org = await orgWithFakeModel(t);
    const chat = await newChat(t, org);
    server.setResponder(() => ({ status: 503, retryAfterMs: null }));
    const started = Date.now();
    const res = await call(t, 'POST', `/api/v2/chats/${chat.id}/messages`, {
      key: org.orgKey,
      body: { content: 'Hi' },
    });
    const took = Date.now() - started;
    expectV2Error(res, 500, 'model_error');
    expect(server.chatRequests()).toHaveLength(3);
    expect(took).toBeGreaterThanOrEqual(1900);
    expect(took).toBeLessThan(6000);
  });
});

describe('the anthropic provider', () => {
  let t: ChatTestApp;
  let anthropic: FakeModelServer;
  beforeAll(async () => {
    anthropic = await startFakeAnthropicServer();
    t = await startChatApp();
  });
  afterAll(async () => {
    await anthropic.close();
    await t.close();
  });

  it('streams a chat reply through the Messages API', async () => {
    const org = await createOrg(t);
    await addModel(t, org.organizationId, {
      baseUrl: anthropic.baseUrl,
      provider: 'anthropic',
      model: 'claude-test',
      makeDefault: true,
    });
    anthropic.enqueue({ chunks: ['Bonjour', ' à', ' tous'] });
    const res = await postStream(t.baseUrl, '/api/v2/chats', org.orgKey, {
      project_id: org.projectId,
      content: 'Salut',
      stream: true,
    });
    expect(eventKinds(res.events)).toEqual(['content', 'done']);
    expect(streamedText(res.events)).toBe('Bonjour à tous');
    expect(res.events.at(-1)!.data.message).toMatchObject({
      content: 'Bonjour à tous',
      model: 'claude-test',
    });
    const [request] = anthropic.chatRequests();
    expect(request.body.model).toBe('claude-test');
    expect(request.body.messages).toEqual([{ role: 'user', content: [{ type: 'text', text: 'Salut' }] }]);
  });
});
