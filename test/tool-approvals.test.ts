/**
 * Tool approval (issue 17): an agent's `tools_requiring_approval` holds those tool calls until the
 * chat's key decides through POST /api/v2/chats/:id/approvals/:tool_call_id, from any process.
 * Approved, the tool runs; denied or not decided within APPROVAL_TIMEOUT_MS, it does not, and the
 * model reads the denial. Real HTTP, the real database, the fake model server.
 */
import { eq } from 'drizzle-orm';
import { Webhook as StandardWebhook } from 'standardwebhooks';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { toolApprovals } from '../src/db/schema/index.js';
import {
  addModel,
  type ChatTestApp,
  eventNames,
  eventually,
  type RecordedToolCall,
  startChatApp,
  streamedText,
  testKnowledgeFamily,
} from './chats-support.js';
import { call, createOrg, expectStatus, expectV2Error, type TestOrg, TIMESTAMP } from './helpers/app.js';
import { type FakeModelServer, startFakeModelServer } from './helpers/fake-model-server.js';
import { readSse } from './helpers/sse.js';
import { startWebhookReceiver, type WebhookReceiver } from './helpers/webhook-receiver.js';
import { type SecondProcess, startSecondProcess } from './streams-support.js';

/** Event names with consecutive `content` events as one (text deltas may be merged). */
const runsOf = (events: { event: string; data: unknown }[]) =>
  eventNames(events).filter((name, i, names) => name !== 'content' || names[i - 1] !== 'content');

describe('tool approval', () => {
  let t: ChatTestApp;
  let fake: FakeModelServer;
  let second: SecondProcess;
  let receiver: WebhookReceiver;
  let org: TestOrg;
  let agentId: number;
  const toolCalls: RecordedToolCall[] = [];

  beforeAll(async () => {
    fake = await startFakeModelServer();
    receiver = await startWebhookReceiver();
    const families = testKnowledgeFamily(toolCalls);
    t = await startChatApp({
      env: { OUTBOUND_ALLOW_PRIVATE: 'true', WEBHOOK_RETRY_BASE_MS: '100' },
      deps: { toolFamilies: families },
    });
    second = await startSecondProcess(t, { toolFamilies: families });
    org = await createOrg(t);
    await addModel(t, org.organizationId, { baseUrl: fake.baseUrl, makeDefault: true });
    const agent = await call(t, 'POST', '/api/v1/agents', {
      key: org.orgKey,
      body: {
        name: 'Careful',
        instructions: 'Ask before searching.',
        tools: ['knowledge'],
        tools_requiring_approval: ['knowledge_search'],
      },
    });
    expectStatus(agent, 201);
    agentId = agent.body.agent.id;
  });
  afterEach(() => {
    fake.reset();
    toolCalls.length = 0;
  });
  afterAll(async () => {
    await second?.close();
    await t?.close();
    await fake?.close();
    await receiver?.close();
  });

  /** A JSON request over real HTTP to either process. */
  async function http(baseUrl: string, method: string, path: string, body?: unknown, key = org.orgKey) {
    const res = await fetch(`${baseUrl}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${key}`,
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    return { status: res.status, body: text ? JSON.parse(text) : null };
  }

  async function newChat(agent: number | null = agentId): Promise<number> {
    const res = await call(t, 'POST', '/api/v2/chats', {
      key: org.orgKey,
      body: { project_id: org.projectId, ...(agent === null ? {} : { agent_id: agent }) },
    });
    expectStatus(res, 201);
    return res.body.response.chat.id;
  }

  /** The model asks for the gated tool, then answers with what it read back. */
  function scriptToolCall(id: string, query = 'holidays') {
    fake.enqueue(
      { text: 'Let me look. ', toolCalls: [{ id, name: 'knowledge_search', arguments: { query } }] },
      { text: 'Holidays go through the HR portal.' },
    );
  }

  const approvalRow = async (toolCallId: string) => {
    const [row] = await t.deps.database.db
      .select()
      .from(toolApprovals)
      .where(eq(toolApprovals.toolCallId, toolCallId));
    return row;
  };

  /** What the model read back as the tool's result on its second request. */
  const toolMessageOfSecondRequest = () =>
    fake.chatRequests()[1].body.messages.find((m: { role: string }) => m.role === 'tool');

  it('agents: tools_requiring_approval defaults to [], is settable and shown, and is checked', async () => {
    const created = await call(t, 'POST', '/api/v1/agents', {
      key: org.orgKey,
      body: { name: 'Plain', instructions: '' },
    });
    expectStatus(created, 201);
    expect(created.body.agent.tools_requiring_approval).toEqual([]);
    const id = created.body.agent.id;
    const updated = await call(t, 'PUT', `/api/v1/agents/${id}`, {
      key: org.orgKey,
      body: { tools_requiring_approval: ['*'] },
    });
    expectStatus(updated, 200);
    expect(updated.body.agent.tools_requiring_approval).toEqual(['*']);
    const read = await call(t, 'GET', `/api/v1/agents/${id}`, { key: org.orgKey });
    expect(read.body.agent.tools_requiring_approval).toEqual(['*']);
    const deduped = await call(t, 'PUT', `/api/v1/agents/${id}`, {
      key: org.orgKey,
      body: { tools_requiring_approval: ['desk__echo', 'knowledge_search', 'desk__echo'] },
    });
    expect(deduped.body.agent.tools_requiring_approval).toEqual(['desk__echo', 'knowledge_search']);

    const mixed = await call(t, 'PUT', `/api/v1/agents/${id}`, {
      key: org.orgKey,
      body: { tools_requiring_approval: ['*', 'knowledge_search'] },
    });
    expectStatus(mixed, 422);
    expect(mixed.body.error.details.tools_requiring_approval).toBeDefined();
    for (const bad of ['knowledge_search', [1], null]) {
      const res = await call(t, 'PUT', `/api/v1/agents/${id}`, {
        key: org.orgKey,
        body: { tools_requiring_approval: bad },
      });
      expectStatus(res, 400);
    }
    // Well-formed but breaking a rule (v1: 422).
    for (const bad of [[''], ['  ']]) {
      const res = await call(t, 'PUT', `/api/v1/agents/${id}`, {
        key: org.orgKey,
        body: { tools_requiring_approval: bad },
      });
      expectStatus(res, 422);
    }
    const list = await call(t, 'GET', '/api/v1/agents', { key: org.orgKey });
    expect(list.body.agents.find((a: any) => a.id === agentId).tools_requiring_approval).toEqual([
      'knowledge_search',
    ]);
  });

  it('streamed: tool_start then approval_required, the turn waits; approved from a second process, the tool runs', async () => {
    const chatId = await newChat();
    scriptToolCall('call_stream');
    let decided: Promise<{ status: number; body: any }> | null = null;
    const streamed = await readSse(`${t.baseUrl}/api/v2/chats/${chatId}/messages`, {
      key: org.orgKey,
      body: { content: 'When are the holidays?', stream: true },
      onProgress: (events) => {
        if (decided || !events.some((e) => e.event === 'approval_required')) return;
        // Another process decides; it answers once the turn has finished.
        decided = http(second.baseUrl, 'POST', `/api/v2/chats/${chatId}/approvals/call_stream`, {
          approved: true,
          reason: 'fine',
        });
      },
    });
    expect(streamed.ended).toBe('end');
    const events = streamed.events;
    expect(eventNames(events)).toEqual([
      ...eventNames(events).slice(0, eventNames(events).indexOf('tool_start')),
      'tool_start',
      'approval_required',
      'tool_result',
      ...eventNames(events).slice(eventNames(events).indexOf('tool_result') + 1),
    ]);
    expect(eventNames(events).at(-1)).toBe('done');
    const required = events.find((e) => e.event === 'approval_required')!;
    expect(required.data).toEqual({
      tool_call_id: 'call_stream',
      tool_name: 'knowledge_search',
      parameters: { query: 'holidays' },
      expires_at: expect.stringMatching(TIMESTAMP),
    });
    // About APPROVAL_TIMEOUT_MS (default ten minutes) from now.
    const expiresIn = Date.parse(required.data.expires_at) - Date.now();
    expect(expiresIn).toBeGreaterThan(8 * 60_000);
    expect(expiresIn).toBeLessThanOrEqual(10 * 60_000 + 5_000);
    expect(events.find((e) => e.event === 'tool_result')!.data).toMatchObject({
      tool_call_id: 'call_stream',
      error: null,
      result: { passages: [expect.objectContaining({ document_name: 'Handbook.pdf' })] },
    });
    expect(streamedText(events)).toBe('Let me look. Holidays go through the HR portal.');
    expect(toolCalls).toHaveLength(1);
    expect(toolMessageOfSecondRequest().content).toContain('Handbook.pdf');

    // The second process's answer: the finished reply, as a send-message gives it.
    const answer = await decided!;
    expect(answer.status, JSON.stringify(answer.body)).toBe(200);
    expect(answer.body.response.message).toMatchObject({
      role: 'assistant',
      status: 'completed',
      content: 'Let me look. Holidays go through the HR portal.',
      tool_executions: [{ tool_call_id: 'call_stream', status: 'completed', error: null }],
    });
    // Recorded with the deciding key, and in the audit log.
    const row = await approvalRow('call_stream');
    expect(row).toMatchObject({ status: 'approved', reason: 'fine', decidedByApiKeyId: expect.any(Number) });
    const audit = await call(t, 'GET', '/api/v1/audit_events?resource_type=tool_approval', {
      key: org.orgKey,
    });
    expectStatus(audit, 200);
    expect(audit.body.audit_events[0]).toMatchObject({
      action: 'tool_approval.approved',
      resource: { type: 'tool_approval', id: row.id },
      actor: { api_key_id: row.decidedByApiKeyId, kind: 'organization' },
      changed_fields: ['reason', 'status'],
    });
    // Deciding again: no longer pending.
    expectV2Error(
      await call(t, 'POST', `/api/v2/chats/${chatId}/approvals/call_stream`, {
        key: org.orgKey,
        body: { approved: false },
      }),
      409,
      'approval_not_pending',
    );
  });

  it('blocking: 200 at once with requires_action and pending_approvals; a denial reaches the model and the tool never runs', async () => {
    const chatId = await newChat();
    scriptToolCall('call_deny', 'salaries');
    const sent = await call(t, 'POST', `/api/v2/chats/${chatId}/messages`, {
      key: org.orgKey,
      body: { content: 'Show me the salaries' },
    });
    expectStatus(sent, 200);
    const waiting = sent.body.response.message;
    expect(waiting).toMatchObject({
      role: 'assistant',
      status: 'requires_action',
      content: 'Let me look. ',
      tool_executions: [],
      pending_approvals: [
        {
          tool_call_id: 'call_deny',
          tool_name: 'knowledge_search',
          parameters: { query: 'salaries' },
          expires_at: expect.stringMatching(TIMESTAMP),
        },
      ],
      // The turn's timing so far, as on every blocking reply (issue 19).
      timing: {
        queued_ms: expect.any(Number),
        overhead_ms: expect.any(Number),
        model_first_token_ms: expect.any(Number),
        total_ms: expect.any(Number),
      },
    });
    expect(sent.headers['server-timing']).toMatch(/total;dur=/);
    // The chat is still busy: its turn holds the lease while it waits.
    expectV2Error(
      await call(t, 'POST', `/api/v2/chats/${chatId}/messages`, { key: org.orgKey, body: { content: 'x' } }),
      409,
    );

    const denied = await call(t, 'POST', `/api/v2/chats/${chatId}/approvals/call_deny`, {
      key: org.orgKey,
      body: { approved: false, reason: 'Salaries are confidential' },
    });
    expectStatus(denied, 200);
    const message = denied.body.response.message;
    expect(message).toMatchObject({
      id: waiting.id,
      status: 'completed',
      content: 'Let me look. Holidays go through the HR portal.',
      tool_executions: [
        {
          tool_call_id: 'call_deny',
          tool_name: 'knowledge_search',
          status: 'denied',
          parameters: { query: 'salaries' },
          result: null,
          error: { message: expect.stringContaining('Salaries are confidential') },
          execution_time_ms: 0,
        },
      ],
    });
    expect(toolCalls).toHaveLength(0);
    // The model read the denial as the tool's result, and went on.
    expect(JSON.stringify(toolMessageOfSecondRequest())).toContain('Salaries are confidential');
    const history = await call(t, 'GET', `/api/v2/chats/${chatId}/messages`, { key: org.orgKey });
    expect(history.body.response.messages.at(-1)).toMatchObject({
      id: waiting.id,
      status: 'completed',
      tool_executions: [{ status: 'denied' }],
    });
    expect(await approvalRow('call_deny')).toMatchObject({ status: 'denied' });
  });

  it('two gated calls in one step: deciding one answers requires_action for the other, then the reply', async () => {
    const chatId = await newChat();
    fake.enqueue(
      {
        toolCalls: [
          { id: 'call_one', name: 'knowledge_search', arguments: { query: 'one' } },
          { id: 'call_two', name: 'knowledge_search', arguments: { query: 'two' } },
        ],
      },
      { text: 'Both done.' },
    );
    const sent = await call(t, 'POST', `/api/v2/chats/${chatId}/messages`, {
      key: org.orgKey,
      body: { content: 'Search twice' },
    });
    expectStatus(sent, 200);
    expect(sent.body.response.message.status).toBe('requires_action');
    await eventually(async () => {
      expect(await approvalRow('call_two')).toMatchObject({ status: 'pending' });
    });
    const first = await call(t, 'POST', `/api/v2/chats/${chatId}/approvals/call_one`, {
      key: org.orgKey,
      body: { approved: true },
    });
    expectStatus(first, 200);
    expect(first.body.response.message).toMatchObject({
      status: 'requires_action',
      pending_approvals: [{ tool_call_id: 'call_two', parameters: { query: 'two' } }],
    });
    const second = await call(t, 'POST', `/api/v2/chats/${chatId}/approvals/call_two`, {
      key: org.orgKey,
      body: { approved: false },
    });
    expectStatus(second, 200);
    expect(second.body.response.message).toMatchObject({ status: 'completed', content: 'Both done.' });
    const executions = second.body.response.message.tool_executions.map((e: any) => [
      e.tool_call_id,
      e.status,
    ]);
    expect(executions.sort()).toEqual([
      ['call_one', 'completed'],
      ['call_two', 'denied'],
    ]);
    expect(toolCalls.map((c) => c.query)).toEqual(['one']);
    // The model read both results: the search's, and the denial.
    const toolMessages = fake
      .chatRequests()[1]
      .body.messages.filter((m: { role: string }) => m.role === 'tool')
      .map((m: any) => [m.tool_call_id, JSON.stringify(m.content)]);
    expect(toolMessages).toEqual([
      ['call_one', expect.stringContaining('Handbook.pdf')],
      ['call_two', expect.stringContaining('denied')],
    ]);
  });

  it('refuses what cannot be decided: unknown call 404, another key 404, bad bodies 400', async () => {
    const chatId = await newChat();
    scriptToolCall('call_checks');
    const sent = await call(t, 'POST', `/api/v2/chats/${chatId}/messages`, {
      key: org.orgKey,
      body: { content: 'Holidays?' },
    });
    expect(sent.body.response.message.status).toBe('requires_action');
    const path = `/api/v2/chats/${chatId}/approvals/call_checks`;

    expectV2Error(
      await call(t, 'POST', `/api/v2/chats/${chatId}/approvals/call_nope`, {
        key: org.orgKey,
        body: { approved: true },
      }),
      404,
      'approval_not_found',
    );
    // Only the key that owns the chat: another key of the organization does not see it.
    const other = await call(t, 'POST', '/api/v1/api_keys', {
      key: org.orgKey,
      body: { kind: 'organization' },
    });
    expectV2Error(await call(t, 'POST', path, { key: other.body.key, body: { approved: true } }), 404);
    expectV2Error(await call(t, 'POST', path, { key: null, body: { approved: true } }), 401);
    for (const body of [
      {},
      { approved: 'true' },
      { approved: true, stream: 'yes' },
      { approved: true, reason: 5 },
    ]) {
      expectV2Error(await call(t, 'POST', path, { key: org.orgKey, body }), 400);
    }
    expect(await approvalRow('call_checks')).toMatchObject({ status: 'pending' });

    const approved = await call(t, 'POST', path, { key: org.orgKey, body: { approved: true } });
    expectStatus(approved, 200);
    expect(approved.body.response.message.status).toBe('completed');
    expect(toolCalls).toHaveLength(1);
  });

  it('reattaching while waiting: GET /stream replays up to approval_required, and a streamed decision carries the rest', async () => {
    const chatId = await newChat();
    scriptToolCall('call_reattach');
    const sent = await call(t, 'POST', `/api/v2/chats/${chatId}/messages`, {
      key: org.orgKey,
      body: { content: 'Holidays?' },
    });
    expect(sent.body.response.message.status).toBe('requires_action');

    // From the other process: the stored events, then it stays open (the turn waits).
    const reattached = await readSse(`${second.baseUrl}/api/v2/chats/${chatId}/stream`, {
      key: org.orgKey,
      until: (events) => events.some((e) => e.event === 'approval_required'),
    });
    expect(reattached.ended).toBe('aborted');
    expect(runsOf(reattached.events)).toEqual(['content', 'tool_start', 'approval_required']);
    expect(streamedText(reattached.events)).toBe('Let me look. ');

    // A reader attached while it waits gets the rest once decided.
    const live = readSse(`${t.baseUrl}/api/v2/chats/${chatId}/stream`, { key: org.orgKey });
    await eventually(async () =>
      expect(await approvalRow('call_reattach')).toMatchObject({ status: 'pending' }),
    );
    const decided = await readSse(`${second.baseUrl}/api/v2/chats/${chatId}/approvals/call_reattach`, {
      key: org.orgKey,
      body: { approved: true, stream: true },
    });
    expect(decided.status).toBe(200);
    expect(eventNames(decided.events)[0]).toBe('tool_result');
    expect(eventNames(decided.events).at(-1)).toBe('done');
    expect(decided.events.at(-1)!.data.message).toMatchObject({ status: 'completed' });
    const whole = await live;
    expect(eventNames(whole.events)).toContain('approval_required');
    expect(eventNames(whole.events).at(-1)).toBe('done');
    expect(streamedText(whole.events)).toBe('Let me look. Holidays go through the HR portal.');
  });

  it('a cancel while waiting stops the turn; the call is no longer pending (409)', async () => {
    const chatId = await newChat();
    scriptToolCall('call_cancel');
    const sent = await call(t, 'POST', `/api/v2/chats/${chatId}/messages`, {
      key: org.orgKey,
      body: { content: 'Holidays?' },
    });
    expect(sent.body.response.message.status).toBe('requires_action');
    const cancelled = await call(t, 'POST', `/api/v2/chats/${chatId}/cancel`, { key: org.orgKey });
    expectStatus(cancelled, 200);
    expect(cancelled.body.response.message).toMatchObject({ status: 'cancelled', content: 'Let me look. ' });
    expect(await approvalRow('call_cancel')).toMatchObject({ status: 'cancelled' });
    expectV2Error(
      await call(t, 'POST', `/api/v2/chats/${chatId}/approvals/call_cancel`, {
        key: org.orgKey,
        body: { approved: true },
      }),
      409,
      'approval_not_pending',
    );
    expect(toolCalls).toHaveLength(0);
  });

  it('a wait longer than the lease and the idle limit: the turn keeps its chat, and finishes once approved', async () => {
    // A process whose lease lasts 1.5 s (renewed every 0.5 s), as does its model idle limit.
    const short = await startSecondProcess(t, {
      toolFamilies: testKnowledgeFamily(toolCalls),
      turnSettings: { leaseMs: 1_500, modelIdleMs: 1_500 },
    });
    try {
      const chatId = await newChat();
      scriptToolCall('call_long');
      const sent = await http(short.baseUrl, 'POST', `/api/v2/chats/${chatId}/messages`, {
        content: 'Holidays?',
      });
      expect(sent.status, JSON.stringify(sent.body)).toBe(200);
      expect(sent.body.response.message.status).toBe('requires_action');
      await new Promise((resolve) => setTimeout(resolve, 4_000));
      const [turn] = await t.deps.database
        .query<{ status: string; live: boolean }>(
          'select status, lease_expires_at > now() as live from chat_turns where chat_id = $1',
          [chatId],
        )
        .then((r) => r.rows);
      expect(turn).toEqual({ status: 'running', live: true });
      const approved = await http(t.baseUrl, 'POST', `/api/v2/chats/${chatId}/approvals/call_long`, {
        approved: true,
      });
      expect(approved.status, JSON.stringify(approved.body)).toBe(200);
      expect(approved.body.response.message).toMatchObject({
        status: 'completed',
        tool_executions: [{ status: 'completed' }],
      });
    } finally {
      await short.close();
    }
  });

  it('a turn whose process died: its calls can no longer be decided (409), and its chat frees up as dead turns do', async () => {
    // Its lease is long (no renewal soon); the test then lets it run out, as a killed process's would.
    const dying = await startSecondProcess(t, {
      toolFamilies: testKnowledgeFamily(toolCalls),
      turnSettings: { leaseMs: 600_000 },
    });
    try {
      const chatId = await newChat();
      scriptToolCall('call_dead');
      const sent = await http(dying.baseUrl, 'POST', `/api/v2/chats/${chatId}/messages`, {
        content: 'Holidays?',
      });
      expect(sent.body.response.message.status).toBe('requires_action');
      await t.deps.database.query(
        "update chat_turns set lease_expires_at = now() - interval '1 second' where chat_id = $1",
        [chatId],
      );
      expectV2Error(
        await call(t, 'POST', `/api/v2/chats/${chatId}/approvals/call_dead`, {
          key: org.orgKey,
          body: { approved: true },
        }),
        409,
        'approval_not_pending',
      );
      expect(toolCalls).toHaveLength(0);
    } finally {
      await dying.close();
    }
  });

  it('a process shutting down does not hold its grace period for a waiting turn: the turn fails, its call is cancelled', async () => {
    // A grace period longer than the test's timeout: waiting it out would fail the test.
    const leaving = await startSecondProcess(t, {
      toolFamilies: testKnowledgeFamily(toolCalls),
      config: { ...t.deps.config, shutdownGraceMs: 120_000 },
    });
    const chatId = await newChat();
    scriptToolCall('call_shutdown');
    const sent = await http(leaving.baseUrl, 'POST', `/api/v2/chats/${chatId}/messages`, {
      content: 'Holidays?',
    });
    expect(sent.body.response.message.status).toBe('requires_action');
    await leaving.close();
    expect(await approvalRow('call_shutdown')).toMatchObject({ status: 'cancelled' });
    const { rows } = await t.deps.database.query<{ status: string }>(
      'select status from chat_turns where chat_id = $1',
      [chatId],
    );
    // As any turn a shutdown stops: the turn records the shutdown, its messages failed.
    expect(rows).toEqual([{ status: 'cancelled' }]);
    const history = await call(t, 'GET', `/api/v2/chats/${chatId}/messages`, { key: org.orgKey });
    expect(history.body.response.messages.map((m: any) => [m.role, m.status])).toEqual([
      ['user', 'failed'],
      ['assistant', 'failed'],
    ]);
    expect(toolCalls).toHaveLength(0);
  });

  it('if_busy enqueue (blocking) answers requires_action too, for a turn started at once and for a queued one', async () => {
    const chatId = await newChat();
    scriptToolCall('call_enq');
    const first = await call(t, 'POST', `/api/v2/chats/${chatId}/messages`, {
      key: org.orgKey,
      body: { content: 'Holidays?', if_busy: 'enqueue' },
    });
    expectStatus(first, 200);
    expect(first.body.response.message).toMatchObject({
      status: 'requires_action',
      pending_approvals: [{ tool_call_id: 'call_enq' }],
    });
    // A second message queues behind the waiting turn; once that one is approved, it runs and pauses too.
    fake.enqueue(
      {
        text: 'Again. ',
        toolCalls: [{ id: 'call_enq2', name: 'knowledge_search', arguments: { query: 'x' } }],
      },
      { text: 'Done again.' },
    );
    const second = call(t, 'POST', `/api/v2/chats/${chatId}/messages`, {
      key: org.orgKey,
      body: { content: 'And again?', if_busy: 'enqueue' },
    });
    await eventually(async () => {
      const queue = await call(t, 'GET', `/api/v2/chats/${chatId}/queue`, { key: org.orgKey });
      expect(queue.body.response.queued).toHaveLength(1);
    });
    expectStatus(
      await call(t, 'POST', `/api/v2/chats/${chatId}/approvals/call_enq`, {
        key: org.orgKey,
        body: { approved: true },
      }),
      200,
    );
    const queued = await second;
    expectStatus(queued, 200);
    expect(queued.body.response.message).toMatchObject({
      status: 'requires_action',
      content: 'Again. ',
      pending_approvals: [{ tool_call_id: 'call_enq2' }],
    });
    expectStatus(
      await call(t, 'POST', `/api/v2/chats/${chatId}/approvals/call_enq2`, {
        key: org.orgKey,
        body: { approved: true },
      }),
      200,
    );
  });

  it('create with content (blocking) answers 201 with the waiting reply', async () => {
    scriptToolCall('call_create');
    const created = await call(t, 'POST', '/api/v2/chats', {
      key: org.orgKey,
      body: { project_id: org.projectId, agent_id: agentId, content: 'Holidays?' },
    });
    expectStatus(created, 201);
    expect(created.body.response.message).toMatchObject({
      status: 'requires_action',
      pending_approvals: [{ tool_call_id: 'call_create', tool_name: 'knowledge_search' }],
    });
    const chatId = created.body.response.chat.id;
    const approved = await call(t, 'POST', `/api/v2/chats/${chatId}/approvals/call_create`, {
      key: org.orgKey,
      body: { approved: true },
    });
    expectStatus(approved, 200);
    expect(approved.body.response.message.status).toBe('completed');
  });

  it('a chat without a gating agent runs its tools at once', async () => {
    const chatId = await newChat(null);
    fake.enqueue(
      { toolCalls: [{ id: 'call_free', name: 'knowledge_search', arguments: { query: 'q' } }] },
      { text: 'Done.' },
    );
    const sent = await call(t, 'POST', `/api/v2/chats/${chatId}/messages`, {
      key: org.orgKey,
      body: { content: 'Search' },
    });
    expectStatus(sent, 200);
    expect(sent.body.response.message).toMatchObject({
      status: 'completed',
      tool_executions: [{ status: 'completed' }],
    });
    expect(sent.body.response.message).not.toHaveProperty('pending_approvals');
  });

  it('chat_approval_required reaches project webhooks, signed (standardwebhooks)', async () => {
    const hook = await call(t, 'POST', `/api/v1/projects/${org.projectId}/webhooks`, {
      key: org.orgKey,
      body: { url: `${receiver.url}/approvals`, events: ['chat_approval_required'] },
    });
    expectStatus(hook, 201);
    const { secret } = hook.body.webhook;
    const chatId = await newChat();
    scriptToolCall('call_hook');
    const sent = await call(t, 'POST', `/api/v2/chats/${chatId}/messages`, {
      key: org.orgKey,
      body: { content: 'Holidays?' },
    });
    const waiting = sent.body.response.message;
    const [delivery] = await receiver.waitFor(1, { match: (d) => d.path === '/approvals' });
    const headers = Object.fromEntries(Object.entries(delivery.headers).map(([k, v]) => [k, String(v)]));
    expect(new StandardWebhook(secret).verify(delivery.raw, headers)).toEqual({
      event_name: 'chat_approval_required',
      event_data: {
        chat_id: chatId,
        message_id: waiting.id,
        project_id: org.projectId,
        tool_call_id: 'call_hook',
        tool_name: 'knowledge_search',
        parameters: { query: 'holidays' },
        expires_at: waiting.pending_approvals[0].expires_at,
      },
    });
    expectStatus(
      await call(t, 'POST', `/api/v2/chats/${chatId}/approvals/call_hook`, {
        key: org.orgKey,
        body: { approved: true },
      }),
      200,
    );
  });
});

describe('tool approval timeout', () => {
  let t: ChatTestApp;
  let fake: FakeModelServer;
  const toolCalls: RecordedToolCall[] = [];

  beforeAll(async () => {
    fake = await startFakeModelServer();
    t = await startChatApp({
      env: { APPROVAL_TIMEOUT_MS: '400' },
      deps: { toolFamilies: testKnowledgeFamily(toolCalls) },
    });
  });
  afterAll(async () => {
    await t?.close();
    await fake?.close();
  });

  it('undecided within APPROVAL_TIMEOUT_MS: denied, the tool does not run, the model is told, the turn finishes', async () => {
    const org = await createOrg(t);
    await addModel(t, org.organizationId, { baseUrl: fake.baseUrl, makeDefault: true });
    const agent = await call(t, 'POST', '/api/v1/agents', {
      key: org.orgKey,
      body: { name: 'Everything gated', instructions: '', tools_requiring_approval: ['*'] },
    });
    expectStatus(agent, 201);
    const chat = await call(t, 'POST', '/api/v2/chats', {
      key: org.orgKey,
      body: { project_id: org.projectId, agent_id: agent.body.agent.id },
    });
    const chatId = chat.body.response.chat.id;
    fake.enqueue(
      { toolCalls: [{ id: 'call_late', name: 'knowledge_search', arguments: { query: 'q' } }] },
      { text: 'I could not search.' },
    );
    const streamed = await readSse(`${t.baseUrl}/api/v2/chats/${chatId}/messages`, {
      key: org.orgKey,
      body: { content: 'Search', stream: true },
    });
    expect(runsOf(streamed.events)).toEqual([
      'tool_start',
      'approval_required',
      'tool_result',
      'content',
      'done',
    ]);
    const result = streamed.events.find((e) => e.event === 'tool_result')!.data;
    expect(result).toMatchObject({
      result: null,
      error: { message: expect.stringContaining('not approved within 400 ms') },
    });
    const done = streamed.events.at(-1)!.data.message;
    expect(done).toMatchObject({
      status: 'completed',
      content: 'I could not search.',
      tool_executions: [{ status: 'denied', error: { message: expect.stringContaining('not approved') } }],
    });
    expect(toolCalls).toHaveLength(0);
    const toolMessage = fake.chatRequests()[1].body.messages.find((m: { role: string }) => m.role === 'tool');
    expect(JSON.stringify(toolMessage)).toContain('not approved within');
    expectV2Error(
      await call(t, 'POST', `/api/v2/chats/${chatId}/approvals/call_late`, {
        key: org.orgKey,
        body: { approved: true },
      }),
      409,
      'approval_not_pending',
    );
  });
});
