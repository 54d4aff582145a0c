/**
 * History is written as JSON by PostgreSQL (src/modules/chats/history-page.ts) instead of
 * `presentMessage` and Fastify's serializer. These tests store messages of every kind directly and
 * hold the endpoint's text to what the presenter gives for the rows `historyMessage` selects:
 * same messages, same fields (null vs absent), same values, same key order.
 */
import { and, asc, eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chatAttachments, chatMessages, toolExecutions } from '../src/db/schema/index.js';
import { historyMessage, presentMessages } from '../src/modules/chats/service.js';
import { emptyChat } from './chats-support.js';
import { buildTestApp, call, createOrg, expectStatus, type TestApp, type TestOrg } from './helpers/app.js';

let t: TestApp;
let org: TestOrg;
let chatId: number;

type NewMessage = typeof chatMessages.$inferInsert;

beforeAll(async () => {
  t = await buildTestApp();
  org = await createOrg(t);
  chatId = await emptyChat(t, org);
  const db = t.deps.database.db;
  const base = { organizationId: org.organizationId, chatId };
  const insert = async (values: Partial<NewMessage> & Pick<NewMessage, 'role' | 'status'>) => {
    const [row] = await db
      .insert(chatMessages)
      .values({ ...base, ...values })
      .returning({ id: chatMessages.id });
    return row.id;
  };
  // A plain exchange, with quotes, newlines, a tab, a control character and non-ASCII to escape.
  const user = await insert({
    role: 'user',
    status: 'completed',
    content: 'Say "hi"\n\tplease \u0001 – ünï 🙂',
  });
  await db.insert(chatAttachments).values([
    {
      ...base,
      messageId: user,
      position: 1,
      type: 'image',
      mediaType: 'image/png',
      sizeBytes: 3,
      data: Buffer.from([1, 2, 3]),
    },
    {
      ...base,
      messageId: user,
      position: 0,
      type: 'document',
      documentId: null,
      name: 'Notes "v2".pdf',
      mediaType: 'application/pdf',
      sizeBytes: 1234,
    },
    {
      ...base,
      messageId: user,
      position: 2,
      type: 'document',
      documentId: null,
      name: null,
      mediaType: 'text/plain',
      sizeBytes: 5,
    },
  ]);
  const reply = await insert({
    role: 'assistant',
    status: 'completed',
    content: 'Hi [1]',
    model: 'fake-model',
    inputTokens: 12,
    outputTokens: 34,
    credits: 0.000123,
    citations: [{ marker: 1, document_id: 7, document_name: 'Doc', chunk_id: null, quote: 'a "quote"' }],
    parsed: { answer: [1, 2.5, null, 'x'] },
  });
  await db.insert(toolExecutions).values([
    {
      organizationId: org.organizationId,
      messageId: reply,
      toolName: 'knowledge_search',
      toolCallId: 'call_2',
      status: 'failed',
      parameters: { query: 'x', nested: { deep: [true] } },
      result: null,
      error: { message: 'it broke: "badly"' },
      executionTimeMs: 5,
    },
    {
      organizationId: org.organizationId,
      messageId: reply,
      toolName: 'calc',
      toolCallId: 'call_1',
      status: 'completed',
      parameters: {},
      result: { value: 42, text: 'ok' },
      executionTimeMs: 0,
    },
  ]);
  // A reply a cancel stopped (history, `cancelled: true`), and one stopped by a shutdown (not history).
  await insert({ role: 'user', status: 'completed', content: 'Tell me more' });
  await insert({
    role: 'assistant',
    status: 'cancelled',
    content: 'Partial',
    model: 'fake-model',
    credits: 2,
  });
  await insert({ role: 'assistant', status: 'cancelled', content: 'Cut', model: 'm', error: 'shutdown' });
  // A failed turn: both messages shown as failed; a reply still generating is not history.
  await insert({ role: 'user', status: 'failed', content: 'Again' });
  await insert({ role: 'assistant', status: 'failed', content: '', model: null, error: 'model error' });
  await insert({ role: 'assistant', status: 'generating', content: 'Typing' });
  // A regenerated reply: the replaced version and a failed regeneration are not history.
  const replaced = await insert({ role: 'assistant', status: 'completed', content: 'Old', model: 'm' });
  const current = await insert({
    role: 'assistant',
    status: 'completed',
    content: 'New',
    model: 'm',
    parsed: null,
  });
  await db.update(chatMessages).set({ replacedById: current }).where(eq(chatMessages.id, replaced));
  await insert({ role: 'assistant', status: 'failed', content: '', regeneratesId: current });
});

afterAll(async () => {
  await t?.close();
});

/** What the presenter gives for the rows `historyMessage` selects, through JSON as a client reads it. */
async function expected(limit: number, offset: number) {
  const db = t.deps.database.db;
  const where = and(eq(chatMessages.chatId, chatId), historyMessage);
  const rows = await db
    .select()
    .from(chatMessages)
    .where(where)
    .orderBy(asc(chatMessages.id))
    .limit(limit)
    .offset(offset);
  const all = await db.select({ id: chatMessages.id }).from(chatMessages).where(where);
  return { messages: JSON.parse(JSON.stringify(await presentMessages(db, rows))), total: all.length };
}

describe('history written by PostgreSQL', () => {
  it('gives what the presenter gives, message by message, key order included', async () => {
    const res = await call(t, 'GET', `/api/v2/chats/${chatId}/messages`, { key: org.orgKey });
    expectStatus(res, 200);
    expect(res.headers['content-type']).toBe('application/json; charset=utf-8');
    const { messages, total } = await expected(50, 0);
    expect(total).toBe(7);
    expect(res.body).toEqual({
      status: 'ok',
      response: { messages, pagination: { page: 1, page_size: 50, total_count: 7, total_pages: 1 } },
    });
    for (const [i, message] of res.body.response.messages.entries()) {
      expect(Object.keys(message)).toEqual(Object.keys(messages[i]));
      for (const [j, execution] of message.tool_executions.entries())
        expect(Object.keys(execution)).toEqual(Object.keys(messages[i].tool_executions[j]));
      for (const [j, attachment] of message.attachments.entries())
        expect(Object.keys(attachment)).toEqual(Object.keys(messages[i].attachments[j]));
    }
    const [user, reply, , cancelled, failedUser, failedReply] = res.body.response.messages;
    // Spot checks of what the comparison covers, so a presenter change cannot hide a regression here.
    expect(user.content).toBe('Say "hi"\n\tplease \u0001 – ünï 🙂');
    expect(user.model).toBeNull();
    expect(user).not.toHaveProperty('usage');
    expect(user.attachments.map((a: any) => a.name ?? a.type)).toEqual(['Notes "v2".pdf', 'image', '']);
    expect(user.attachments[1]).not.toHaveProperty('document_id');
    expect(reply.usage).toEqual({ input_tokens: 12, output_tokens: 34, credits: 0.000123 });
    expect(reply.tool_executions.map((e: any) => e.tool_call_id)).toEqual(['call_2', 'call_1']);
    expect(reply.tool_executions[0].error).toEqual({ message: 'it broke: "badly"' });
    expect(reply.parsed).toEqual({ answer: [1, 2.5, null, 'x'] });
    expect(reply.created_at).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/);
    expect(cancelled).toMatchObject({ status: 'cancelled', cancelled: true });
    expect([failedUser.status, failedReply.status]).toEqual(['failed', 'failed']);
    expect(failedReply).not.toHaveProperty('cancelled');
    expect(failedReply).not.toHaveProperty('parsed');
  });

  it('pages: the page asked for, the count of all, and an empty page past the end', async () => {
    const res = await call(t, 'GET', `/api/v2/chats/${chatId}/messages?page=2&page_size=3`, {
      key: org.orgKey,
    });
    expectStatus(res, 200);
    const { messages } = await expected(3, 3);
    expect(res.body.response).toEqual({
      messages,
      pagination: { page: 2, page_size: 3, total_count: 7, total_pages: 3 },
    });
    const past = await call(t, 'GET', `/api/v2/chats/${chatId}/messages?page=9&page_size=3`, {
      key: org.orgKey,
    });
    expect(past.body.response).toEqual({
      messages: [],
      pagination: { page: 9, page_size: 3, total_count: 7, total_pages: 3 },
    });
  });

  it('an empty chat has an empty page; another key or an archived chat is 404', async () => {
    const empty = await emptyChat(t, org);
    const res = await call(t, 'GET', `/api/v2/chats/${empty}/messages`, { key: org.orgKey });
    expect(res.body).toEqual({
      status: 'ok',
      response: { messages: [], pagination: { page: 1, page_size: 50, total_count: 0, total_pages: 0 } },
    });
    expect((await call(t, 'GET', `/api/v2/chats/${chatId}/messages`, { key: org.adminKey })).status).toBe(
      404,
    );
    expectStatus(await call(t, 'DELETE', `/api/v2/chats/${empty}`, { key: org.orgKey }), 204);
    expect((await call(t, 'GET', `/api/v2/chats/${empty}/messages`, { key: org.orgKey })).status).toBe(404);
  });
});
