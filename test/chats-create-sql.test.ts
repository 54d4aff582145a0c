/**
 * POST /api/v2/chats without content or agent is one guarded INSERT (src/modules/chats/create-empty.ts);
 * a refusal falls back to createChat's checks. These hold the statement to those checks where the
 * other chat tests do not reach: members' group access, the personal key's user, the model asked
 * for, and that a refusal writes nothing.
 */
import { count, eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chats, modelConfigurations } from '../src/db/schema/index.js';
import { addModel } from './chats-support.js';
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

let t: TestApp;
let org: TestOrg;

beforeAll(async () => {
  t = await buildTestApp();
  org = await createOrg(t);
});
afterAll(async () => {
  await t?.close();
});

async function chatCount(): Promise<number> {
  const [{ n }] = await t.deps.database.db
    .select({ n: count() })
    .from(chats)
    .where(eq(chats.organizationId, org.organizationId));
  return n;
}

describe('creating an empty chat in one statement', () => {
  it("a member's key reaches a project of its group; the chat is the key's and its user's", async () => {
    const member = await createMember(t, org);
    const res = await call(t, 'POST', '/api/v2/chats', {
      key: member.key,
      body: { project_id: org.projectId },
    });
    expectStatus(res, 201);
    expect(res.body.response.chat).toEqual({
      id: expect.any(Number),
      title: 'New chat',
      project_id: org.projectId,
      model_configuration_id: org.modelConfigurationId,
      agent_id: null,
      created_at: expect.stringMatching(TIMESTAMP),
    });
    const [row] = await t.deps.database.db
      .select()
      .from(chats)
      .where(eq(chats.id, res.body.response.chat.id));
    expect(row).toMatchObject({
      userId: member.userId,
      apiKeyId: expect.any(Number),
      title: null,
      agentId: null,
    });
    // Organization keys store no user.
    const byOrg = await call(t, 'POST', '/api/v2/chats', {
      key: org.orgKey,
      body: { project_id: org.projectId },
    });
    const [orgRow] = await t.deps.database.db
      .select()
      .from(chats)
      .where(eq(chats.id, byOrg.body.response.chat.id));
    expect(orgRow.userId).toBeNull();
    // created_at is the stored one, as GET shows it.
    const got = await call(t, 'GET', `/api/v2/chats/${byOrg.body.response.chat.id}`, { key: org.orgKey });
    expect(got.body.response.chat.created_at).toBe(byOrg.body.response.chat.created_at);
  });

  it('pins the model asked for; an embedding model is 400 and a deleted one 404, writing nothing', async () => {
    const other = await addModel(t, org.organizationId, { baseUrl: 'http://127.0.0.1:9/v1', model: 'other' });
    const res = await call(t, 'POST', '/api/v2/chats', {
      key: org.orgKey,
      body: { project_id: org.projectId, model_configuration_id: other },
    });
    expectStatus(res, 201);
    expect(res.body.response.chat.model_configuration_id).toBe(other);

    const before = await chatCount();
    await t.deps.database.db
      .update(modelConfigurations)
      .set({ purpose: 'embedding' })
      .where(eq(modelConfigurations.id, other));
    expectV2Error(
      await call(t, 'POST', '/api/v2/chats', {
        key: org.orgKey,
        body: { project_id: org.projectId, model_configuration_id: other },
      }),
      400,
      'invalid_model_configuration',
    );
    await t.deps.database.db
      .update(modelConfigurations)
      .set({ purpose: 'chat', deletedAt: '2025-01-01 00:00:00+00' })
      .where(eq(modelConfigurations.id, other));
    expectV2Error(
      await call(t, 'POST', '/api/v2/chats', {
        key: org.orgKey,
        body: { project_id: org.projectId, model_configuration_id: other },
      }),
      404,
      'model_configuration_not_found',
    );
    expectV2Error(
      await call(t, 'POST', '/api/v2/chats', { key: org.orgKey, body: { project_id: 999999 } }),
      404,
      'project_not_found',
    );
    expect(await chatCount()).toBe(before);
  });
});
