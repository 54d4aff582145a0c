/**
 * On PostgreSQL, concurrent history reads and empty-chat creations run as one statement per batch
 * (src/modules/chats/prepared.ts, `batchedRow`). These hold every request of a batch to the answer
 * it gets alone: its own page or 404, its own chat or its own refusal, whatever the others asked.
 * On PGlite the same requests run one by one and must give the same answers.
 */
import { eq, inArray } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chatMessages, chats } from '../src/db/schema/index.js';
import { batchStats } from '../src/modules/chats/prepared.js';
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
