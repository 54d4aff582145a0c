import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  asInHistory,
  type ChatTestApp,
  eventKinds,
  orgWithModelAt,
  postStream,
  startChatApp,
  streamedText,
  testKnowledgeFamily,
} from './chats-support.js';
import { call, expectStatus, expectV2Error, type TestOrg } from './helpers/app.js';
import { type FakeModelServer, startFakeModelServer } from './helpers/fake-model-server.js';

/** Issue 18: regenerating the last reply, its versions, and forking a chat, over real HTTP. */
let server: FakeModelServer;
let t: ChatTestApp;
beforeAll(async () => {
  server = await startFakeModelServer();
  t = await startChatApp({ deps: { toolFamilies: testKnowledgeFamily() } });
});
afterEach(() => server.reset());
afterAll(async () => {
  await t.close();
  await server.close();
});

const orgWithFakeModel = () => orgWithModelAt(t, server.baseUrl);

const history = async (key: string, chatId: number) => {
  const res = await call(t, 'GET', `/api/v2/chats/${chatId}/messages`, { key });
  expectStatus(res, 200);
  return res.body.response.messages as any[];
};

/** A chat with two exchanges: Q1/A1, Q2/A2. */
async function twoExchanges(org: TestOrg) {
  server.enqueue({ text: 'A1' }, { text: 'A2' });
  const created = await call(t, 'POST', '/api/v2/chats', {
    key: org.orgKey,
    body: { project_id: org.projectId, content: 'Q1' },
  });
  expectStatus(created, 201);
  const chatId = created.body.response.chat.id as number;
  const second = await call(t, 'POST', `/api/v2/chats/${chatId}/messages`, {
    key: org.orgKey,
    body: { content: 'Q2' },
  });
  expectStatus(second, 200);
  server.reset();
  return { chatId, messages: await history(org.orgKey, chatId) };
}

const conversationSent = (body: any) =>
  body.messages.filter((m: any) => m.role !== 'system').map((m: any) => [m.role, m.content]);

describe('regenerate', () => {
  it('replaces the last reply in history and lists the replaced ones as versions', async () => {
    const org = await orgWithFakeModel();
    const { chatId, messages } = await twoExchanges(org);
    const a2 = messages[3];
    expect(a2).toMatchObject({ role: 'assistant', content: 'A2' });

    server.enqueue({ text: 'A2 again' });
    // No body: its one field (`stream`) is optional.
    const res = await call(t, 'POST', `/api/v2/chats/${chatId}/messages/${a2.id}/regenerate`, {
      key: org.orgKey,
    });
    expectStatus(res, 200);
    const regenerated = res.body.response.message;
    expect(regenerated).toMatchObject({ role: 'assistant', content: 'A2 again', status: 'completed' });
    // The model answered Q2 again, without the reply being replaced.
    expect(conversationSent(server.chatRequests()[0].body)).toEqual([
      ['user', 'Q1'],
      ['assistant', 'A1'],
      ['user', 'Q2'],
    ]);
    const after = await history(org.orgKey, chatId);
    expect(after.map((m) => m.content)).toEqual(['Q1', 'A1', 'Q2', 'A2 again']);
    expect(after[3]).toEqual(asInHistory(regenerated));
    expect(after[2].id).toBe(messages[2].id);

    // Streamed, a second time: both older replies are versions of the newest.
    server.enqueue({ chunks: ['A2 ', 'third'] });
    const streamed = await postStream(
      t.baseUrl,
      `/api/v2/chats/${chatId}/messages/${regenerated.id}/regenerate`,
      org.orgKey,
      { stream: true },
    );
    // Its two deltas may arrive in one read of the model's response: one content event or two.
    expect(eventKinds(streamed.events)).toEqual(['content', 'done']);
    expect(streamedText(streamed.events)).toBe('A2 third');
    const third = streamed.events.at(-1)!.data.message;
    expect(third.content).toBe('A2 third');
    const versions = await call(t, 'GET', `/api/v2/chats/${chatId}/messages/${third.id}/versions`, {
      key: org.orgKey,
    });
    expectStatus(versions, 200);
    expect(versions.body.response.versions.map((m: any) => [m.id, m.content])).toEqual([
      [a2.id, 'A2'],
      [regenerated.id, 'A2 again'],
    ]);
    // Asked about a replaced version: the same list.
    const ofOld = await call(t, 'GET', `/api/v2/chats/${chatId}/messages/${a2.id}/versions`, {
      key: org.orgKey,
    });
    expect(ofOld.body.response.versions).toEqual(versions.body.response.versions);
    const none = await call(t, 'GET', `/api/v2/chats/${chatId}/messages/${messages[1].id}/versions`, {
      key: org.orgKey,
    });
    expect(none.body.response.versions).toEqual([]);
    const chat = await call(t, 'GET', `/api/v2/chats/${chatId}`, { key: org.orgKey });
    expect(chat.body.response.chat.message_count).toBe(4);

    // The conversation goes on from the newest reply.
    server.enqueue({ text: 'A3' });
    await call(t, 'POST', `/api/v2/chats/${chatId}/messages`, { key: org.orgKey, body: { content: 'Q3' } });
    expect(conversationSent(server.chatRequests().at(-1)!.body)).toEqual([
      ['user', 'Q1'],
      ['assistant', 'A1'],
      ['user', 'Q2'],
      ['assistant', 'A2 third'],
      ['user', 'Q3'],
    ]);
  });

  it('is 409 for anything but the last reply, 404 for unknown messages and other keys', async () => {
    const org = await orgWithFakeModel();
    const { chatId, messages } = await twoExchanges(org);
    const regenerate = (id: number, key = org.orgKey, chat = chatId) =>
      call(t, 'POST', `/api/v2/chats/${chat}/messages/${id}/regenerate`, { key, body: {} });
    expectV2Error(await regenerate(messages[1].id), 409, 'not_last_message');
    expectV2Error(await regenerate(messages[2].id), 409, 'not_last_message');
    expectV2Error(await regenerate(999_999), 404);
    expectV2Error(await regenerate(messages[3].id, org.adminKey), 404);
    const other = await twoExchanges(org);
    expectV2Error(await regenerate(other.messages[3].id), 404);
    expectV2Error(
      await call(t, 'GET', `/api/v2/chats/${chatId}/messages/${messages[0].id}/versions`, {
        key: org.orgKey,
      }),
      404,
    );
    expect(server.chatRequests()).toHaveLength(0);
  });

  it('a failed regeneration leaves the old reply and the user message as they were', async () => {
    const org = await orgWithFakeModel();
    const { chatId, messages } = await twoExchanges(org);
    server.setResponder(() => ({ status: 400, errorBody: { error: { message: 'bad request' } } }));
    const res = await call(t, 'POST', `/api/v2/chats/${chatId}/messages/${messages[3].id}/regenerate`, {
      key: org.orgKey,
      body: {},
    });
    expectV2Error(res, 500);
    expect(await history(org.orgKey, chatId)).toEqual(messages);
    const versions = await call(t, 'GET', `/api/v2/chats/${chatId}/messages/${messages[3].id}/versions`, {
      key: org.orgKey,
    });
    expect(versions.body.response.versions).toEqual([]);
  });
});

describe('fork', () => {
  it('copies the history up to the message into a new chat of the calling key', async () => {
    const org = await orgWithFakeModel();
    // The first reply used a tool: its execution is copied with it.
    server.enqueue(
      { toolCalls: [{ name: 'knowledge_search', arguments: { query: 'holidays' } }] },
      { text: 'A1' },
      { text: 'A2' },
    );
    const created = await call(t, 'POST', '/api/v2/chats', {
      key: org.adminKey,
      body: { project_id: org.projectId, content: 'Q1' },
    });
    expectStatus(created, 201);
    const source = created.body.response.chat;
    await call(t, 'POST', `/api/v2/chats/${source.id}/messages`, {
      key: org.adminKey,
      body: { content: 'Q2' },
    });
    const original = await history(org.adminKey, source.id);
    expect(original).toHaveLength(4);

    const res = await call(t, 'POST', `/api/v2/chats/${source.id}/fork`, {
      key: org.adminKey,
      body: { message_id: original[1].id },
    });
    expectStatus(res, 201);
    const fork = res.body.response.chat;
    expect(fork).toEqual({
      ...source,
      id: expect.any(Number),
      created_at: expect.any(String),
    });
    expect(fork.id).not.toBe(source.id);
    const copied = await history(org.adminKey, fork.id);
    expect(copied).toHaveLength(2);
    const strip = (m: any) => ({
      ...m,
      id: 0,
      tool_executions: m.tool_executions.map((e: any) => ({ ...e, id: 0 })),
    });
    expect(copied.map(strip)).toEqual(original.slice(0, 2).map(strip));
    expect(copied[1].tool_executions).toHaveLength(1);
    expect(copied[0].id).not.toBe(original[0].id);

    // Owned by the calling key: another key of the organization does not see it.
    expectV2Error(await call(t, 'GET', `/api/v2/chats/${fork.id}`, { key: org.orgKey }), 404);
    const listed = await call(t, 'GET', '/api/v2/chats', { key: org.adminKey });
    expect(listed.body.response.chats.map((c: any) => c.id)).toContain(fork.id);
    // Nor can it fork the admin's chat.
    expectV2Error(
      await call(t, 'POST', `/api/v2/chats/${source.id}/fork`, {
        key: org.orgKey,
        body: { message_id: original[1].id },
      }),
      404,
    );

    // "Editing" Q2: the fork continues from A1 with a new question; the source is untouched.
    server.reset();
    server.enqueue({ text: 'A2 edited' });
    const sent = await call(t, 'POST', `/api/v2/chats/${fork.id}/messages`, {
      key: org.adminKey,
      body: { content: 'Q2 edited' },
    });
    expectStatus(sent, 200);
    const sentConversation = conversationSent(server.chatRequests()[0].body);
    expect(sentConversation[0]).toEqual(['user', 'Q1']);
    expect(sentConversation.at(-1)).toEqual(['user', 'Q2 edited']);
    expect(JSON.stringify(sentConversation)).not.toContain('"Q2"');
    expect((await history(org.adminKey, source.id)).map((m) => m.content)).toEqual(
      original.map((m) => m.content),
    );
  });

  it('is 404 for a message outside the chat and 400 without message_id', async () => {
    const org = await orgWithFakeModel();
    const { chatId } = await twoExchanges(org);
    const other = await twoExchanges(org);
    expectV2Error(
      await call(t, 'POST', `/api/v2/chats/${chatId}/fork`, {
        key: org.orgKey,
        body: { message_id: other.messages[0].id },
      }),
      404,
    );
    expectV2Error(await call(t, 'POST', `/api/v2/chats/${chatId}/fork`, { key: org.orgKey, body: {} }), 400);
  });
});
