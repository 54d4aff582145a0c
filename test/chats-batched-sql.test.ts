/**
 * On PostgreSQL, concurrent history reads and empty-chat creations run as one statement per batch
 * (src/modules/chats/prepared.ts, `batchedRow`). These hold every request of a batch to the answer
 * it gets alone: its own page or 404, its own chat or its own refusal, whatever the others asked.
 * On PGlite the same requests run one by one and must give the same answers.
 */
import { and, count, desc, eq, inArray, isNull } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { OrgPrincipal } from '../src/core/principal.js';
import type { Db } from '../src/db/client.js';
import { chatMessages, chats } from '../src/db/schema/index.js';
import { batchStats } from '../src/modules/chats/prepared.js';
import { presentChat } from '../src/modules/chats/presenter.js';
import { emptyChat } from './chats-support.js';
import {
  type ApiResponse,
  buildTestApp,
  call,
  createMember,
  createOrg,
  expectStatus,
  expectV2Error,
  type TestApp,
  type TestOrg,
} from './helpers/app.js';

let t: TestApp;
let org: TestOrg;
let other: TestOrg;
let chatId: number;
let emptyId: number;
let otherChatId: number;

const onPostgres = () => t.deps.database.pool !== null;

beforeAll(async () => {
  t = await buildTestApp();
  org = await createOrg(t);
  other = await createOrg(t);
  chatId = await emptyChat(t, org);
  emptyId = await emptyChat(t, org);
  otherChatId = await emptyChat(t, other);
  const db = t.deps.database.db;
  for (let i = 0; i < 5; i++)
    await db.insert(chatMessages).values([
      { organizationId: org.organizationId, chatId, role: 'user', status: 'completed', content: `Q${i}` },
      {
        organizationId: org.organizationId,
        chatId,
        role: 'assistant',
        status: 'completed',
        content: `A${i} "quoted"`,
        model: 'm',
        outputTokens: i,
      },
    ]);
  await db.insert(chatMessages).values({
    organizationId: other.organizationId,
    chatId: otherChatId,
    role: 'user',
    status: 'completed',
    content: 'Elsewhere',
  });
});

afterAll(async () => {
  await t?.close();
});

describe('concurrent history reads', () => {
  it('each gets the page it gets alone, or its 404, in one batch', async () => {
    const requests: [string, string][] = [
      [org.orgKey, `/api/v2/chats/${chatId}/messages`],
      [org.orgKey, `/api/v2/chats/${chatId}/messages?page=2&page_size=3`],
      [org.orgKey, `/api/v2/chats/${chatId}/messages?page=9&page_size=3`],
      [org.orgKey, `/api/v2/chats/${emptyId}/messages`],
      // Another organization's chat, a chat that does not exist, and another key of the same org.
      [org.orgKey, `/api/v2/chats/${otherChatId}/messages`],
      [org.orgKey, '/api/v2/chats/2147483000/messages'],
      [org.adminKey, `/api/v2/chats/${chatId}/messages`],
      [other.orgKey, `/api/v2/chats/${otherChatId}/messages`],
    ];
    const alone: ApiResponse[] = [];
    for (const [key, url] of requests) alone.push(await call(t, 'GET', url, { key }));
    expect(alone.map((res) => res.status)).toEqual([200, 200, 200, 200, 404, 404, 404, 200]);
    expect(alone[0].body.response.messages).toHaveLength(10);
    expect(alone[1].body.response.messages.map((m: any) => m.content)).toEqual([
      'A1 "quoted"',
      'Q2',
      'A2 "quoted"',
    ]);
    expect(alone[7].body.response.messages.map((m: any) => m.content)).toEqual(['Elsewhere']);

    const before = batchStats(t.deps.database, 'history_page')?.batched ?? 0;
    // Three rounds of every request at once, in shuffled orders.
    const order = [...requests.keys(), ...[...requests.keys()].reverse(), ...requests.keys()];
    const together = await Promise.all(
      order.map((i) => call(t, 'GET', requests[i][1], { key: requests[i][0] })),
    );
    for (const [k, res] of together.entries()) {
      const expected = alone[order[k]];
      expect(res.status).toBe(expected.status);
      expect(res.body).toEqual(expected.body);
    }
    if (onPostgres()) expect(batchStats(t.deps.database, 'history_page')!.batched).toBeGreaterThan(before);
  });
});

describe('concurrent empty-chat creations', () => {
  it('each gets its own chat or its own refusal, in one batch', async () => {
    const member = await createMember(t, org);
    // A project of a group without the member: 401 for the member, fine for the organization key.
    const group = await call(t, 'POST', '/api/v1/groups', { key: org.orgKey, body: { name: 'Others' } });
    expectStatus(group, 201);
    const hidden = await call(t, 'POST', '/api/v1/projects', {
      key: org.orgKey,
      body: { name: 'Hidden', group_ids: [group.body.group.id] },
    });
    expectStatus(hidden, 201);
    const hiddenId = hidden.body.project.id as number;
    const asks: { key: string; project: number; status: number; code?: string }[] = [
      ...Array.from({ length: 6 }, () => ({ key: org.orgKey, project: org.projectId, status: 201 })),
      { key: member.key, project: org.projectId, status: 201 },
      { key: member.key, project: hiddenId, status: 401, code: 'project_access_denied' },
      { key: org.orgKey, project: hiddenId, status: 201 },
      { key: other.orgKey, project: org.projectId, status: 404, code: 'project_not_found' },
      { key: other.orgKey, project: other.projectId, status: 201 },
      { key: org.adminKey, project: 999999, status: 404, code: 'project_not_found' },
    ];
    const before = batchStats(t.deps.database, 'create_empty_chat')?.batched ?? 0;
    const results = await Promise.all(
      asks.map((ask) =>
        call(t, 'POST', '/api/v2/chats', { key: ask.key, body: { project_id: ask.project } }),
      ),
    );
    const ids: number[] = [];
    for (const [i, res] of results.entries()) {
      const ask = asks[i];
      if (ask.status !== 201) {
        expectV2Error(res, ask.status, ask.code);
        continue;
      }
      expectStatus(res, 201);
      expect(res.body.response.chat.project_id).toBe(ask.project);
      ids.push(res.body.response.chat.id);
      // The chat is the asking key's: readable with it, 404 with another.
      expectStatus(await call(t, 'GET', `/api/v2/chats/${res.body.response.chat.id}`, { key: ask.key }), 200);
    }
    expect(new Set(ids).size).toBe(ids.length);
    const rows = await t.deps.database.db.select().from(chats).where(inArray(chats.id, ids));
    expect(rows).toHaveLength(ids.length);
    // Each chat its own creation time, as when created alone (the list orders by it). Only on
    // PostgreSQL: PGlite's clock counts milliseconds, so two chats created alone in the same
    // millisecond share a time there too (the list then orders them by id).
    if (onPostgres()) expect(new Set(rows.map((row) => row.createdAt)).size).toBe(rows.length);
    for (const row of rows) expect(row.updatedAt).toBe(row.createdAt);
    const memberRows = rows.filter((row) => row.userId === member.userId);
    expect(memberRows.map((row) => row.projectId)).toEqual([org.projectId]);
    if (onPostgres())
      expect(batchStats(t.deps.database, 'create_empty_chat')!.batched).toBeGreaterThan(before);
  });

  it('a parameter PostgreSQL refuses fails only its own request', async () => {
    // 2^31 is past int4: alone it is a 400; in a batch it must not take the others with it.
    const asks = [org.projectId, 2 ** 31, org.projectId, org.projectId];
    const results = await Promise.all(
      asks.map((project) =>
        call(t, 'POST', '/api/v2/chats', { key: org.orgKey, body: { project_id: project } }),
      ),
    );
    expect(results.map((res) => res.status)).toEqual([201, 400, 201, 201]);
    const [first] = await t.deps.database.db
      .select()
      .from(chats)
      .where(eq(chats.id, results[0].body.response.chat.id));
    expect(first.apiKeyId).toBeGreaterThan(0);
  });
});

describe('the chat list written by PostgreSQL', () => {
  it('gives what listChats and the presenter give, key order included, alone and in a batch', async () => {
    const lister = await createOrg(t);
    const db = t.deps.database.db;
    const agent = await call(t, 'POST', '/api/v1/agents', {
      key: lister.orgKey,
      body: { name: 'Agent', instructions: 'Be brief' },
    });
    expectStatus(agent, 201);
    const second = await call(t, 'POST', '/api/v1/projects', {
      key: lister.orgKey,
      body: { name: 'Second', use_default_group: true },
    });
    expectStatus(second, 201);
    const ids: number[] = [];
    for (let i = 0; i < 5; i++) ids.push(await emptyChat(t, lister));
    const inSecond = await call(t, 'POST', '/api/v2/chats', {
      key: lister.orgKey,
      body: { project_id: second.body.project.id },
    });
    expectStatus(inSecond, 201);
    // A title to escape, an agent, an archived chat (not listed), and another key's chat (not listed).
    await db.update(chats).set({ title: 'Say "hi"\n\t– ünï 🙂' }).where(eq(chats.id, ids[1]));
    await db.update(chats).set({ agentId: agent.body.agent.id }).where(eq(chats.id, ids[2]));
    expectStatus(await call(t, 'DELETE', `/api/v2/chats/${ids[3]}`, { key: lister.orgKey }), 204);
    await call(t, 'POST', '/api/v2/chats', { key: lister.adminKey, body: { project_id: lister.projectId } });

    const {
      rows: [{ id: keyId }],
    } = await t.deps.database.query<{ id: number }>('select api_key_id as id from chats where id = $1', [
      ids[0],
    ]);
    const principal = {
      kind: 'organization',
      keyId,
      organizationId: lister.organizationId,
      userId: null,
      role: 'admin',
    } as OrgPrincipal;
    const expected = async (query: { page: number; page_size: number; project_id?: number }) => {
      const { rows, total } = await listChats(db, principal, query);
      return {
        status: 'ok',
        response: {
          chats: JSON.parse(JSON.stringify(rows.map((row) => presentChat(row)))),
          pagination: {
            page: query.page,
            page_size: query.page_size,
            total_count: total,
            total_pages: Math.ceil(total / query.page_size),
          },
        },
      };
    };
    const urls: [string, { page: number; page_size: number; project_id?: number }][] = [
      ['/api/v2/chats', { page: 1, page_size: 50 }],
      ['/api/v2/chats?page=2&page_size=2', { page: 2, page_size: 2 }],
      ['/api/v2/chats?page=9&page_size=2', { page: 9, page_size: 2 }],
      [
        `/api/v2/chats?project_id=${second.body.project.id}`,
        { page: 1, page_size: 50, project_id: second.body.project.id },
      ],
      ['/api/v2/chats?project_id=999999', { page: 1, page_size: 50, project_id: 999999 }],
    ];
    const first = await expected(urls[0][1]);
    expect(first.response.pagination.total_count).toBe(5);
    expect(first.response.chats.map((c: any) => c.title)).toContain('Say "hi"\n\t– ünï 🙂');
    expect(first.response.chats.map((c: any) => c.agent_id)).toContain(agent.body.agent.id);
    const alone = await call(t, 'GET', urls[0][0], { key: lister.orgKey });
    expectStatus(alone, 200);
    expect(alone.headers['content-type']).toBe('application/json; charset=utf-8');
    expect(alone.body).toEqual(first);
    for (const [i, chat] of alone.body.response.chats.entries())
      expect(Object.keys(chat)).toEqual(Object.keys(first.response.chats[i]));
    const together = await Promise.all(urls.map(([url]) => call(t, 'GET', url, { key: lister.orgKey })));
    for (const [i, res] of together.entries()) expect(res.body).toEqual(await expected(urls[i][1]));
  });
});

/**
 * The chat list as Drizzle reads it (the list's former service function): what the statement of
 * list-page.ts must give, the key's own chats, not archived, of one project when asked, newest first.
 */
async function listChats(
  db: Db,
  principal: OrgPrincipal,
  query: { page: number; page_size: number; project_id?: number },
) {
  const where = and(
    eq(chats.organizationId, principal.organizationId),
    eq(chats.apiKeyId, principal.keyId),
    isNull(chats.archivedAt),
    query.project_id === undefined ? undefined : eq(chats.projectId, query.project_id),
  );
  const [rows, [{ total }]] = await Promise.all([
    db
      .select()
      .from(chats)
      .where(where)
      .orderBy(desc(chats.createdAt), desc(chats.id))
      .limit(query.page_size)
      .offset((query.page - 1) * query.page_size),
    db.select({ total: count() }).from(chats).where(where),
  ]);
  return { rows, total };
}
