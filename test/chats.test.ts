import { and, eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  agentGroups,
  agents,
  chatMessages,
  chats,
  creditLedger,
  groups,
  organizations,
  projectGroups,
  projects,
} from '../src/db/schema/index.js';
import {
  asInHistory,
  type ChatTestApp,
  eventNames,
  expectMessageShape,
  postStream,
  type RecordedToolCall,
  startChatApp,
  streamedText,
  testKnowledgeFamily,
} from './chats-support.js';
import {
  buildTestApp,
  call,
  createMember,
  createOrg,
  expectStatus,
  expectV2Error,
  type TestApp,
  type TestOrg,
  TIMESTAMP,
} from './helpers/app.js';
import { describeAuthMatrix } from './helpers/auth-matrix.js';

describeAuthMatrix('v2', [
  { method: 'POST', url: '/api/v2/chats', body: { project_id: 1 } },
  { method: 'GET', url: '/api/v2/chats' },
  { method: 'GET', url: '/api/v2/chats/1' },
  { method: 'DELETE', url: '/api/v2/chats/1' },
  { method: 'POST', url: '/api/v2/chats/1/messages', body: { content: 'hi' } },
  { method: 'GET', url: '/api/v2/chats/1/messages' },
  { method: 'GET', url: '/api/v2/chats/1/stream' },
  { method: 'POST', url: '/api/v2/chats/1/cancel' },
  { method: 'POST', url: '/api/v2/chats/1/messages/2/regenerate', body: {} },
  { method: 'GET', url: '/api/v2/chats/1/messages/2/versions' },
  { method: 'POST', url: '/api/v2/chats/1/fork', body: { message_id: 2 } },
  { method: 'GET', url: '/api/v2/chats/1/attachments/2' },
]);

const NO_PROVIDER = /built-in offline model.*No model provider is configured/s;

async function newChat(t: TestApp, key: string, body: Record<string, unknown>) {
  const res = await call(t, 'POST', '/api/v2/chats', { key, body });
  expectStatus(res, 201);
  return res.body.response.chat as { id: number; title: string; project_id: number };
}

async function addProject(
  t: TestApp,
  org: TestOrg,
  groupIds: number[],
  values: Partial<typeof projects.$inferInsert> = {},
) {
  const [project] = await t.deps.database.db
    .insert(projects)
    .values({ organizationId: org.organizationId, name: 'Other project', ...values })
    .returning({ id: projects.id });
  for (const groupId of groupIds)
    await t.deps.database.db.insert(projectGroups).values({ projectId: project.id, groupId });
  return project.id;
}

async function addAgent(
  t: TestApp,
  org: TestOrg,
  groupIds: number[] = [],
  values: Partial<typeof agents.$inferInsert> = {},
) {
  const [agent] = await t.deps.database.db
    .insert(agents)
    .values({ organizationId: org.organizationId, name: 'Helper', instructions: 'Be brief.', ...values })
    .returning({ id: agents.id });
  for (const groupId of groupIds)
    await t.deps.database.db.insert(agentGroups).values({ agentId: agent.id, groupId });
  return agent.id;
}

async function addGroup(t: TestApp, org: TestOrg) {
  const [group] = await t.deps.database.db
    .insert(groups)
    .values({ organizationId: org.organizationId, name: `Group ${Math.random()}` })
    .returning({ id: groups.id });
  return group.id;
}

describe('chat resources (built-in model, no provider configured)', () => {
  let t: ChatTestApp;
  let org: TestOrg;
  beforeAll(async () => {
    t = await startChatApp();
    org = await createOrg(t);
  });
  afterAll(() => t.close());

  it('creates a chat without content: 201 with only the chat, model pinned to the organization default', async () => {
    const res = await call(t, 'POST', '/api/v2/chats', {
      key: org.orgKey,
      body: { project_id: org.projectId },
    });
    expectStatus(res, 201);
    expect(res.body).toEqual({
      status: 'ok',
      response: {
        chat: {
          id: expect.any(Number),
          title: 'New chat',
          project_id: org.projectId,
          model_configuration_id: org.modelConfigurationId,
          agent_id: null,
          created_at: expect.stringMatching(TIMESTAMP),
        },
      },
    });
    const got = await call(t, 'GET', `/api/v2/chats/${res.body.response.chat.id}`, { key: org.orgKey });
    expectStatus(got, 200);
    expect(got.body).toEqual({
      status: 'ok',
      response: { chat: { ...res.body.response.chat, message_count: 0 } },
    });
  });

  it('creates a chat with content: the built-in model answers and both messages are history', async () => {
    const res = await call(t, 'POST', '/api/v2/chats', {
      key: org.orgKey,
      body: { project_id: org.projectId, content: '  What is   our refund policy?  ' },
    });
    expectStatus(res, 201);
    const { chat, message } = res.body.response;
    expect(chat.title).toBe('What is our refund policy?');
    expect(chat).not.toHaveProperty('message_count');
    expectMessageShape(message, 'assistant', { fresh: true });
    expect(message.model).toBe('scriptorium-offline');
    expect(message.content).toMatch(NO_PROVIDER);
    expect(message.content).toContain('POST /api/v1/model_configurations');
    expect(message.tool_executions).toEqual([]);

    const history = await call(t, 'GET', `/api/v2/chats/${chat.id}/messages`, { key: org.orgKey });
    expectStatus(history, 200);
    const [user, assistant] = history.body.response.messages;
    expectMessageShape(user, 'user');
    expect(user).toMatchObject({ role: 'user', content: '  What is   our refund policy?  ', model: null });
    expect(assistant).toEqual(asInHistory(message));
    expect(user.id).toBeLessThan(assistant.id);
    expect(history.body.response.pagination).toEqual({
      page: 1,
      page_size: 50,
      total_count: 2,
      total_pages: 1,
    });

    const got = await call(t, 'GET', `/api/v2/chats/${chat.id}`, { key: org.orgKey });
    expect(got.body.response.chat.message_count).toBe(2);
  });

  it('sends a message (200) and names an untitled chat after its first message, cut to 60 characters', async () => {
    const chat = await newChat(t, org.orgKey, { project_id: org.projectId });
    const long = `Please tell me everything about the quarterly planning process and its many deadlines`;
    const sent = await call(t, 'POST', `/api/v2/chats/${chat.id}/messages`, {
      key: org.orgKey,
      body: { content: long },
    });
    expectStatus(sent, 200);
    expect(Object.keys(sent.body.response)).toEqual(['message']);
    expectMessageShape(sent.body.response.message, 'assistant', { fresh: true });
    const got = await call(t, 'GET', `/api/v2/chats/${chat.id}`, { key: org.orgKey });
    const title = got.body.response.chat.title as string;
    expect(title.length).toBeLessThanOrEqual(60);
    expect(title).toBe('Please tell me everything about the quarterly planning…');
    // Later messages do not rename it.
    await call(t, 'POST', `/api/v2/chats/${chat.id}/messages`, {
      key: org.orgKey,
      body: { content: 'Other' },
    });
    const again = await call(t, 'GET', `/api/v2/chats/${chat.id}`, { key: org.orgKey });
    expect(again.body.response.chat).toMatchObject({ title, message_count: 4 });
  });

  it('streams a reply from the built-in model word by word over real HTTP', async () => {
    const res = await postStream(t.baseUrl, '/api/v2/chats', org.orgKey, {
      project_id: org.projectId,
      content: 'Hello there',
      stream: true,
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const names = eventNames(res.events);
    expect(names.at(-1)).toBe('done');
    expect(names.slice(0, -1).every((n) => n === 'content')).toBe(true);
    // Word by word (issue 4): the model gives each word a turn of the loop of its own, so an idle
    // process sends each as an event; a busy one (this test process may be) merges some of them
    // (adaptive coalescing, issue 14), so only "several events" is certain here.
    expect(names.length).toBeGreaterThanOrEqual(3);
    expect(res.events[0].data.content.trim().split(/\s+/)).toHaveLength(1);
    const done = res.events.at(-1)!.data;
    expect(done.message.content).toBe(streamedText(res.events));
    expect(done.chat).toMatchObject({
      id: expect.any(Number),
      title: 'Hello there',
      project_id: org.projectId,
    });
  });

  describe('validation (400 in the v2 envelope)', () => {
    let chatId: number;
    beforeAll(async () => {
      chatId = (await newChat(t, org.orgKey, { project_id: org.projectId })).id;
    });

    const createCases: [string, unknown][] = [
      ['missing project_id', { content: 'hi' }],
      ['project_id as a string', { project_id: '1' }],
      ['project_id zero', { project_id: 0 }],
      ['empty content', { project_id: 1, content: '' }],
      ['whitespace content', { project_id: 1, content: '   ' }],
      ['non-string content', { project_id: 1, content: 5 }],
      ['string stream', { project_id: 1, content: 'hi', stream: 'true' }],
      ['string agent_id', { project_id: 1, agent_id: 'x' }],
      ['no body', undefined],
    ];
    for (const [label, body] of createCases) {
      it(`POST /chats: ${label} -> 400`, async () => {
        const withProject =
          body && typeof body === 'object' && (body as any).project_id === 1
            ? { ...body, project_id: org.projectId }
            : body;
        expectV2Error(await call(t, 'POST', '/api/v2/chats', { key: org.orgKey, body: withProject }), 400);
      });
    }

    const sendCases: [string, unknown][] = [
      ['missing content', { stream: false }],
      ['empty content', { content: '' }],
      ['whitespace content', { content: '\n\t ' }],
      ['non-string content', { content: ['hi'] }],
      ['null content', { content: null }],
      ['string stream', { content: 'hi', stream: 'true' }],
      ['numeric stream', { content: 'hi', stream: 1 }],
    ];
    for (const [label, body] of sendCases) {
      it(`POST /chats/:id/messages: ${label} -> 400`, async () => {
        const res = await call(t, 'POST', `/api/v2/chats/${chatId}/messages`, { key: org.orgKey, body });
        expectV2Error(res, 400);
      });
    }

    it('a streaming request with a bad body is refused with an HTTP 400, not a stream', async () => {
      const res = await postStream(t.baseUrl, `/api/v2/chats/${chatId}/messages`, org.orgKey, {
        content: '',
        stream: true,
      });
      expect(res.status).toBe(400);
      expect(res.body).toMatchObject({ status: 'error', response: { code: 400, error: expect.any(String) } });
    });

    const pageCases = [
      'page=0',
      'page=-1',
      'page=abc',
      'page=1.5',
      'page_size=0',
      'page_size=101',
      'page_size=x',
      'page=',
    ];
    for (const query of pageCases) {
      it(`pagination ${query} -> 400 on list and history`, async () => {
        expectV2Error(await call(t, 'GET', `/api/v2/chats?${query}`, { key: org.orgKey }), 400);
        expectV2Error(
          await call(t, 'GET', `/api/v2/chats/${chatId}/messages?${query}`, { key: org.orgKey }),
          400,
        );
      });
    }

    it('project_id filter that is not a positive integer -> 400; a bad chat id in the path -> 400', async () => {
      expectV2Error(await call(t, 'GET', '/api/v2/chats?project_id=abc', { key: org.orgKey }), 400);
      expectV2Error(await call(t, 'GET', '/api/v2/chats/abc', { key: org.orgKey }), 400);
    });

    it('stores nothing for a refused message', async () => {
      const rows = await t.deps.database.db
        .select()
        .from(chatMessages)
        .where(eq(chatMessages.chatId, chatId));
      expect(rows).toEqual([]);
    });
  });

  describe('not found and permissions (404, 401)', () => {
    it("404 for an unknown project, agent or model configuration, and for another organization's", async () => {
      const other = await createOrg(t);
      for (const body of [
        { project_id: 999999 },
        { project_id: other.projectId },
        { project_id: org.projectId, agent_id: 999999 },
        { project_id: org.projectId, agent_id: await addAgent(t, other) },
      ]) {
        const res = await call(t, 'POST', '/api/v2/chats', { key: org.orgKey, body });
        expectV2Error(res, 404);
      }
      expectV2Error(
        await call(t, 'POST', '/api/v2/chats', {
          key: org.orgKey,
          body: { project_id: org.projectId, model_configuration_id: 999999 },
        }),
        404,
        'model_configuration_not_found',
      );
      expectV2Error(
        await call(t, 'POST', '/api/v2/chats', {
          key: org.orgKey,
          body: { project_id: org.projectId, model_configuration_id: other.modelConfigurationId },
        }),
        404,
        'model_configuration_not_found',
      );
      const res = await call(t, 'POST', '/api/v2/chats', { key: org.orgKey, body: { project_id: 999999 } });
      expectV2Error(res, 404, 'project_not_found');
      const deleted = await addAgent(t, org, [], { deletedAt: '2024-01-01 00:00:00+00' });
      expectV2Error(
        await call(t, 'POST', '/api/v2/chats', {
          key: org.orgKey,
          body: { project_id: org.projectId, agent_id: deleted },
        }),
        404,
        'agent_not_found',
      );
    });

    it('404 for unknown chats on every chat endpoint', async () => {
      for (const [method, url, body] of [
        ['GET', '/api/v2/chats/999999', undefined],
        ['DELETE', '/api/v2/chats/999999', undefined],
        ['GET', '/api/v2/chats/999999/messages', undefined],
        ['POST', '/api/v2/chats/999999/messages', { content: 'hi' }],
      ] as const) {
        expectV2Error(await call(t, method, url, { key: org.orgKey, body }), 404, 'chat_not_found');
      }
    });

    it('401 for a project or agent the member may not use; agents without groups are open to all', async () => {
      const member = await createMember(t, org);
      const closedProject = await addProject(t, org, [await addGroup(t, org)]);
      expectV2Error(
        await call(t, 'POST', '/api/v2/chats', { key: member.key, body: { project_id: closedProject } }),
        401,
        'project_access_denied',
      );
      // Admin keys reach it.
      await newChat(t, org.adminKey, { project_id: closedProject });

      const closedAgent = await addAgent(t, org, [await addGroup(t, org)]);
      expectV2Error(
        await call(t, 'POST', '/api/v2/chats', {
          key: member.key,
          body: { project_id: org.projectId, agent_id: closedAgent },
        }),
        401,
        'agent_access_denied',
      );
      const sharedAgent = await addAgent(t, org, [org.defaultGroupId]);
      const openAgent = await addAgent(t, org);
      for (const agentId of [sharedAgent, openAgent]) {
        const chat = await newChat(t, member.key, { project_id: org.projectId, agent_id: agentId });
        expect(chat).toMatchObject({ agent_id: agentId });
      }
    });

    it("401 on sending when the member lost access to the chat's project", async () => {
      const member = await createMember(t, org);
      const group = await addGroup(t, org);
      const project = await addProject(t, org, [group, org.defaultGroupId]);
      const chat = await newChat(t, member.key, { project_id: project });
      await t.deps.database.db
        .delete(projectGroups)
        .where(and(eq(projectGroups.projectId, project), eq(projectGroups.groupId, org.defaultGroupId)));
      expectV2Error(
        await call(t, 'POST', `/api/v2/chats/${chat.id}/messages`, {
          key: member.key,
          body: { content: 'hi' },
        }),
        401,
        'project_access_denied',
      );
      // Reading stays possible: the chat is the key's own.
      expectStatus(await call(t, 'GET', `/api/v2/chats/${chat.id}/messages`, { key: member.key }), 200);
    });

    it('archived projects refuse new chats and messages (404 project_archived); their chats stay readable', async () => {
      const project = await addProject(t, org, [org.defaultGroupId]);
      const chat = await newChat(t, org.orgKey, { project_id: project });
      await t.deps.database.db
        .update(projects)
        .set({ archivedAt: '2025-01-01 00:00:00+00' })
        .where(eq(projects.id, project));
      const refused = await call(t, 'POST', '/api/v2/chats', {
        key: org.orgKey,
        body: { project_id: project },
      });
      expectV2Error(refused, 404, 'project_archived');
      expect(refused.body.response.message).toMatch(/archived/);
      expectV2Error(
        await call(t, 'POST', `/api/v2/chats/${chat.id}/messages`, {
          key: org.orgKey,
          body: { content: 'hi' },
        }),
        404,
        'project_archived',
      );
      expectStatus(await call(t, 'GET', `/api/v2/chats/${chat.id}`, { key: org.orgKey }), 200);
    });
  });

  describe('per-key visibility', () => {
    it('each key sees only its own chats, between two keys of each kind', async () => {
      const o = await createOrg(t);
      const secondOrgKey = await call(t, 'POST', '/api/v1/api_keys', {
        key: o.orgKey,
        body: { kind: 'organization' },
      });
      const secondPersonal = await call(t, 'POST', '/api/v1/api_keys', {
        key: o.orgKey,
        body: { kind: 'personal', user_id: o.adminUserId },
      });
      const member = await createMember(t, o);
      const keys = [o.orgKey, secondOrgKey.body.key, o.adminKey, secondPersonal.body.key, member.key];
      const own = new Map<string, number>();
      for (const key of keys) own.set(key, (await newChat(t, key, { project_id: o.projectId })).id);

      for (const key of keys) {
        const list = await call(t, 'GET', '/api/v2/chats', { key });
        expectStatus(list, 200);
        expect(list.body.response.chats.map((c: any) => c.id)).toEqual([own.get(key)]);
        for (const other of keys) {
          if (other === key) continue;
          const theirs = own.get(other)!;
          expectV2Error(await call(t, 'GET', `/api/v2/chats/${theirs}`, { key }), 404, 'chat_not_found');
          expectV2Error(await call(t, 'GET', `/api/v2/chats/${theirs}/messages`, { key }), 404);
          expectV2Error(
            await call(t, 'POST', `/api/v2/chats/${theirs}/messages`, { key, body: { content: 'x' } }),
            404,
          );
          expectV2Error(await call(t, 'DELETE', `/api/v2/chats/${theirs}`, { key }), 404);
        }
      }
      // Another organization's key neither.
      expectV2Error(await call(t, 'GET', `/api/v2/chats/${own.get(o.orgKey)}`, { key: org.orgKey }), 404);
      // The personal key's chat records its user.
      const [row] = await t.deps.database.db
        .select()
        .from(chats)
        .where(eq(chats.id, own.get(o.adminKey)!));
      expect(row.userId).toBe(o.adminUserId);
    });
  });

  describe('list, get and archive', () => {
    let o: TestOrg;
    let ids: number[];
    let otherProject: number;
    beforeAll(async () => {
      o = await createOrg(t);
      otherProject = await addProject(t, o, [o.defaultGroupId]);
      ids = [];
      for (const projectId of [o.projectId, otherProject, o.projectId, o.projectId]) {
        ids.push((await newChat(t, o.orgKey, { project_id: projectId })).id);
      }
    });

    it('lists newest first with pagination', async () => {
      const page1 = await call(t, 'GET', '/api/v2/chats?page_size=3', { key: o.orgKey });
      expectStatus(page1, 200);
      expect(page1.body.response.chats.map((c: any) => c.id)).toEqual([ids[3], ids[2], ids[1]]);
      expect(page1.body.response.pagination).toEqual({
        page: 1,
        page_size: 3,
        total_count: 4,
        total_pages: 2,
      });
      for (const chat of page1.body.response.chats) {
        expect(Object.keys(chat).sort()).toEqual([
          'agent_id',
          'created_at',
          'id',
          'model_configuration_id',
          'project_id',
          'title',
        ]);
      }
      const page2 = await call(t, 'GET', '/api/v2/chats?page_size=3&page=2', { key: o.orgKey });
      expect(page2.body.response.chats.map((c: any) => c.id)).toEqual([ids[0]]);
      const beyond = await call(t, 'GET', '/api/v2/chats?page=9', { key: o.orgKey });
      expect(beyond.body.response).toEqual({
        chats: [],
        pagination: { page: 9, page_size: 50, total_count: 4, total_pages: 1 },
      });
    });

    it('filters by project_id', async () => {
      const res = await call(t, 'GET', `/api/v2/chats?project_id=${otherProject}`, { key: o.orgKey });
      expect(res.body.response.chats.map((c: any) => c.id)).toEqual([ids[1]]);
      expect(res.body.response.pagination.total_count).toBe(1);
    });

    it('archives: 204 without body, then 404 everywhere, excluded from lists, data kept', async () => {
      const target = ids[2];
      await call(t, 'POST', `/api/v2/chats/${target}/messages`, {
        key: o.orgKey,
        body: { content: 'keep me' },
      });
      const res = await call(t, 'DELETE', `/api/v2/chats/${target}`, { key: o.orgKey });
      expect(res.status).toBe(204);
      expect(res.raw.body).toBe('');
      for (const [method, url, body] of [
        ['GET', `/api/v2/chats/${target}`, undefined],
        ['DELETE', `/api/v2/chats/${target}`, undefined],
        ['GET', `/api/v2/chats/${target}/messages`, undefined],
        ['POST', `/api/v2/chats/${target}/messages`, { content: 'hi' }],
      ] as const) {
        expectV2Error(await call(t, method, url, { key: o.orgKey, body }), 404, 'chat_not_found');
      }
      const list = await call(t, 'GET', '/api/v2/chats', { key: o.orgKey });
      expect(list.body.response.chats.map((c: any) => c.id)).not.toContain(target);
      expect(list.body.response.pagination.total_count).toBe(3);
      const [row] = await t.deps.database.db.select().from(chats).where(eq(chats.id, target));
      expect(row.archivedAt).not.toBeNull();
      const kept = await t.deps.database.db
        .select()
        .from(chatMessages)
        .where(eq(chatMessages.chatId, target));
      expect(kept.map((m) => m.content)).toContain('keep me');
    });
  });

  describe('credits', () => {
    it('402 when the balance is not above zero; a failed create keeps the chat and returns its id', async () => {
      const o = await createOrg(t);
      const chat = await newChat(t, o.orgKey, { project_id: o.projectId });
      await t.deps.database.db
        .update(organizations)
        .set({ creditBalance: 0 })
        .where(eq(organizations.id, o.organizationId));

      const sent = await call(t, 'POST', `/api/v2/chats/${chat.id}/messages`, {
        key: o.orgKey,
        body: { content: 'hi' },
      });
      expectV2Error(sent, 402, 'insufficient_credits');

      const created = await call(t, 'POST', '/api/v2/chats', {
        key: o.orgKey,
        body: { project_id: o.projectId, content: 'hi' },
      });
      expectV2Error(created, 402, 'insufficient_credits');
      const chatId = created.body.response.chat_id;
      expect(chatId).toEqual(expect.any(Number));
      const kept = await call(t, 'GET', `/api/v2/chats/${chatId}`, { key: o.orgKey });
      expectStatus(kept, 200);
      expect(kept.body.response.chat).toMatchObject({ id: chatId, title: 'hi', message_count: 0 });

      // Streaming: the request was accepted, so the refusal is an error event carrying the chat.
      const streamed = await postStream(t.baseUrl, '/api/v2/chats', o.orgKey, {
        project_id: o.projectId,
        content: 'hi',
        stream: true,
      });
      expect(streamed.status).toBe(200);
      expect(streamed.events).toEqual([
        {
          event: 'error',
          data: {
            message: expect.any(String),
            code: 402,
            error: 'insufficient_credits',
            chat: expect.objectContaining({ id: expect.any(Number), title: 'hi' }),
          },
        },
      ]);
      const send = await postStream(t.baseUrl, `/api/v2/chats/${chat.id}/messages`, o.orgKey, {
        content: 'hi',
        stream: true,
      });
      expect(send.events).toEqual([
        { event: 'error', data: { message: expect.any(String), code: 402, error: 'insufficient_credits' } },
      ]);
      // Nothing was charged or stored.
      expect(
        await t.deps.database.db.select().from(chatMessages).where(eq(chatMessages.chatId, chat.id)),
      ).toEqual([]);
    });

    it('charges the built-in model at its configured (zero) price in the ledger', async () => {
      const o = await createOrg(t);
      const created = await call(t, 'POST', '/api/v2/chats', {
        key: o.orgKey,
        body: { project_id: o.projectId, content: 'hi' },
      });
      const messageId = created.body.response.message.id;
      const [row] = await t.deps.database.db
        .select()
        .from(creditLedger)
        .where(eq(creditLedger.reference, `message:${messageId}`));
      expect(row).toMatchObject({
        organizationId: o.organizationId,
        kind: 'usage',
        amount: 0,
        projectId: o.projectId,
      });
      expect(row.inputTokens).toBeGreaterThan(0);
      expect(row.outputTokens).toBeGreaterThan(0);
    });
  });
});

describe('the built-in model with knowledge', () => {
  let t: ChatTestApp;
  let org: TestOrg;
  const calls: RecordedToolCall[] = [];
  beforeAll(async () => {
    t = await startChatApp({ deps: { toolFamilies: testKnowledgeFamily(calls) } });
    org = await createOrg(t);
  });
  afterAll(() => t.close());

  it('searches the knowledge base, quotes the passage and stores the tool execution', async () => {
    const res = await call(t, 'POST', '/api/v2/chats', {
      key: org.orgKey,
      body: { project_id: org.projectId, content: 'How do I request holidays?' },
    });
    expectStatus(res, 201);
    const { chat, message } = res.body.response;
    expect(message.content).toContain(
      'From "Handbook.pdf" [1]: "Holidays are requested through the HR portal."',
    );
    expect(message.tool_executions).toEqual([
      {
        id: expect.any(Number),
        tool_name: 'knowledge_search',
        tool_call_id: 'builtin-call-1',
        status: 'completed',
        parameters: { query: 'How do I request holidays?' },
        result: { passages: [expect.objectContaining({ document_name: 'Handbook.pdf', score: 0.9 })] },
        error: null,
        execution_time_ms: expect.any(Number),
      },
    ]);
    expect(calls).toEqual([
      {
        query: 'How do I request holidays?',
        scope: { projectId: org.projectId, chatId: chat.id, agentId: null },
      },
    ]);
    const history = await call(t, 'GET', `/api/v2/chats/${chat.id}/messages`, { key: org.orgKey });
    expect(history.body.response.messages[1].tool_executions).toEqual(message.tool_executions);
  });

  it('an agent without the knowledge tool answers without searching', async () => {
    const agent = await addAgent(t, org, [], { tools: [] });
    const before = calls.length;
    const res = await call(t, 'POST', '/api/v2/chats', {
      key: org.orgKey,
      body: { project_id: org.projectId, agent_id: agent, content: 'How do I request holidays?' },
    });
    expectStatus(res, 201);
    expect(res.body.response.message.content).toMatch(NO_PROVIDER);
    expect(res.body.response.message.tool_executions).toEqual([]);
    expect(calls.length).toBe(before);
  });
});

describe('rate limits on v2', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await buildTestApp({ RATE_LIMIT_PER_MINUTE: '2' });
  });
  afterAll(() => t.close());

  it('answers 429 in the v2 envelope with Retry-After in seconds', async () => {
    const key = t.boot.organization_key;
    expectStatus(await call(t, 'GET', '/api/v2/chats', { key }), 200);
    expectStatus(await call(t, 'GET', '/api/v2/chats', { key }), 200);
    const limited = await call(t, 'GET', '/api/v2/chats', { key });
    expectV2Error(limited, 429, 'rate_limited');
    expect(String(limited.headers['retry-after'])).toMatch(/^\d+$/);
  });
});
