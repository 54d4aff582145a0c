import { eq, sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { documents, idempotencyKeys, users } from '../src/db/schema/index.js';
import { multipartBody } from './fixtures/knowledge-helpers.js';
import { buildTestApp, call, createOrg, expectStatus, expectV1Error, type TestApp } from './helpers/app.js';

describe('Idempotency-Key on POST', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await buildTestApp();
  });
  afterAll(() => t.close());

  const createUser = (key: string, idem: string, email: string) =>
    call(t, 'POST', '/api/v1/users', { key, body: { email }, headers: { 'idempotency-key': idem } });

  it('replays the first response to a repeat with the same body, creating nothing twice', async () => {
    const org = await createOrg(t);
    const first = await createUser(org.orgKey, 'k-1', 'once@example.com');
    expectStatus(first, 201);
    const again = await createUser(org.orgKey, 'k-1', 'once@example.com');
    expectStatus(again, 201);
    expect(again.body).toEqual(first.body);
    expect(again.headers['idempotent-replayed']).toBe('true');
    const rows = await t.deps.database.db.select().from(users).where(eq(users.email, 'once@example.com'));
    expect(rows).toHaveLength(1);
  });

  it('replays client errors too, but answers 422 when the body differs', async () => {
    const org = await createOrg(t);
    const bad = await createUser(org.orgKey, 'k-2', 'dup@example.com');
    expectStatus(bad, 201);
    const mismatch = await createUser(org.orgKey, 'k-2', 'other@example.com');
    expectV1Error(mismatch, 422, 'idempotency_key_reused');
  });

  it('the same JSON body with its keys in another order is the same request', async () => {
    const org = await createOrg(t);
    const post = (body: string) =>
      call(t, 'POST', '/api/v1/users', {
        key: org.orgKey,
        body,
        headers: { 'idempotency-key': 'k-order', 'content-type': 'application/json' },
      });
    const first = await post('{"email":"order@example.com","name":"Order"}');
    expectStatus(first, 201);
    const again = await post('{ "name": "Order", "email": "order@example.com" }');
    expectStatus(again, 201);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.body).toEqual(first.body);
  });

  it('an upload is held to its file and fields, not to its length: another file of the same size is 422', async () => {
    const org = await createOrg(t);
    const send = (content: string, group: 'default' | number = 'default') => {
      const { payload, contentType } = multipartBody([
        ['document', { filename: 'fruit.txt', content, contentType: 'text/plain' }],
        group === 'default' ? ['use_default_group', 'true'] : ['group_ids[]', String(group)],
      ]);
      return call(t, 'POST', '/api/v1/data_center/documents', {
        key: org.orgKey,
        payload,
        headers: { 'content-type': contentType, 'idempotency-key': 'up-1' },
      });
    };
    const apples = 'The first document is about apples.';
    const grapes = 'The other document is about grapes.';
    expect(apples.length).toBe(grapes.length);
    const first = await send(apples);
    expectStatus(first, 201);
    const repeat = await send(apples);
    expectStatus(repeat, 201);
    expect(repeat.headers['idempotent-replayed']).toBe('true');
    expect(repeat.body).toEqual(first.body);
    expectV1Error(await send(grapes), 422, 'idempotency_key_reused');
    expectV1Error(await send(apples, org.defaultGroupId), 422, 'idempotency_key_reused');
    const stored = await t.deps.database.db
      .select({ id: documents.id })
      .from(documents)
      .where(eq(documents.organizationId, org.organizationId));
    expect(stored).toHaveLength(1);
  });

  it('keys are per API key', async () => {
    const org = await createOrg(t);
    expectStatus(await createUser(org.orgKey, 'shared', 'a@example.com'), 201);
    const other = await createUser(org.adminKey, 'shared', 'b@example.com');
    expectStatus(other, 201);
    expect(other.headers['idempotent-replayed']).toBeUndefined();
  });

  it('answers 409 while the first request is still running, and takes over one whose process died', async () => {
    const org = await createOrg(t);
    expectStatus(await createUser(org.orgKey, 'k-3', 'running@example.com'), 201);
    // Put the stored request back in flight, as if its first attempt were still running.
    await t.deps.database.db
      .update(idempotencyKeys)
      .set({ state: 'running', statusCode: null, lockedUntil: sql`now() + interval '1 hour'` })
      .where(eq(idempotencyKeys.key, 'k-3'));
    expectV1Error(
      await createUser(org.orgKey, 'k-3', 'running@example.com'),
      409,
      'idempotency_request_in_progress',
    );
    // Its lock expires (the process died): the repeat runs the request again.
    await t.deps.database.db
      .update(idempotencyKeys)
      .set({ lockedUntil: sql`now() - interval '1 second'` })
      .where(eq(idempotencyKeys.key, 'k-3'));
    const takeover = await createUser(org.orgKey, 'k-3', 'running@example.com');
    expectV1Error(takeover, 409, 'already_exists');
  });

  it('rejects an over-long key', async () => {
    const org = await createOrg(t);
    expectV1Error(await createUser(org.orgKey, 'x'.repeat(256), 'long@example.com'), 400);
  });
});

describe('Idempotency-Key storage', () => {
  it('keeps stored responses encrypted, since they may hold a secret shown once', async () => {
    const t = await buildTestApp();
    try {
      const org = await createOrg(t);
      const res = await call(t, 'POST', '/api/v1/api_keys', {
        key: org.orgKey,
        body: { kind: 'organization' },
        headers: { 'idempotency-key': 'secret-1' },
      });
      expectStatus(res, 201);
      const [row] = await t.deps.database.db
        .select()
        .from(idempotencyKeys)
        .where(eq(idempotencyKeys.key, 'secret-1'));
      expect(row.responseBody).not.toContain(res.body.key);
      const replay = await call(t, 'POST', '/api/v1/api_keys', {
        key: org.orgKey,
        body: { kind: 'organization' },
        headers: { 'idempotency-key': 'secret-1' },
      });
      expect(replay.body.key).toBe(res.body.key);
    } finally {
      await t.close();
    }
  });

  it('answers 400 for a NUL character instead of a database error', async () => {
    const t = await buildTestApp();
    try {
      const org = await createOrg(t);
      expectV1Error(
        await call(t, 'POST', '/api/v1/users', {
          key: org.orgKey,
          body: { email: 'a@b.co', name: 'nul\u0000' },
        }),
        400,
      );
    } finally {
      await t.close();
    }
  });
});
