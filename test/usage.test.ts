import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chargeUsage } from '../src/modules/credits/service.js';
import {
  buildTestApp,
  call,
  createMember,
  createOrg,
  expectStatus,
  expectV1Error,
  type TestApp,
} from './helpers/app.js';
import { describeAuthMatrix } from './helpers/auth-matrix.js';

describeAuthMatrix('v1', [{ method: 'GET', url: '/api/v1/usage' }]);

describe('usage report', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await buildTestApp({ DEFAULT_ORG_CREDITS: '100' });
  });
  afterAll(() => t.close());

  it('sums the ledger per day, project, key and model, and matches the balance', async () => {
    const org = await createOrg(t);
    const other = await createOrg(t);
    const prices = { creditsPer1kInputTokens: 1, creditsPer1kOutputTokens: 2 };
    const charge = (orgId: number, projectId: number, input: number, output: number) =>
      chargeUsage(t.deps.database.db, {
        organizationId: orgId,
        projectId,
        apiKeyId: null,
        modelConfigurationId: org.modelConfigurationId,
        usage: { inputTokens: input, outputTokens: output },
        prices,
        reference: 'test',
      });
    expect(await charge(org.organizationId, org.projectId, 1000, 500)).toBe(2);
    expect(await charge(org.organizationId, org.projectId, 2000, 0)).toBe(2);
    await charge(other.organizationId, other.projectId, 9999, 9999);

    const byProject = await call(t, 'GET', '/api/v1/usage?group_by=project', { key: org.orgKey });
    expectStatus(byProject, 200);
    expect(byProject.body.usage.rows).toEqual([
      { project_id: org.projectId, input_tokens: 3000, output_tokens: 500, credits: 4, requests: 2 },
    ]);
    expect(byProject.body.usage.totals).toEqual({
      input_tokens: 3000,
      output_tokens: 500,
      credits: 4,
      requests: 2,
    });
    expect(byProject.body.usage.credit_balance).toBe(96);

    const byDay = await call(t, 'GET', '/api/v1/usage', { key: org.orgKey });
    expect(byDay.body.usage.rows).toEqual([
      {
        day: expect.stringMatching(/^\d{4}-\d{2}-\d{2}$/),
        input_tokens: 3000,
        output_tokens: 500,
        credits: 4,
        requests: 2,
      },
    ]);
    const byModel = await call(t, 'GET', '/api/v1/usage?group_by=model', { key: org.orgKey });
    expect(byModel.body.usage.rows[0].model_configuration_id).toBe(org.modelConfigurationId);
    // One model's days (the console's chart per model): this model has it all, another none.
    const ofModel = await call(t, 'GET', `/api/v1/usage?model_configuration_id=${org.modelConfigurationId}`, {
      key: org.orgKey,
    });
    expect(ofModel.body.usage.totals.credits).toBe(4);
    const ofOther = await call(
      t,
      'GET',
      `/api/v1/usage?model_configuration_id=${other.modelConfigurationId}`,
      {
        key: org.orgKey,
      },
    );
    expect(ofOther.body.usage.rows).toEqual([]);

    const empty = await call(
      t,
      'GET',
      `/api/v1/usage?project_id=${org.projectId}&to=2000-01-02T00:00:00Z&from=2000-01-01T00:00:00Z`,
      {
        key: org.orgKey,
      },
    );
    expect(empty.body.usage.rows).toEqual([]);
    expect(empty.body.usage.totals.requests).toBe(0);
  });

  it('validates its parameters and is for admins', async () => {
    const org = await createOrg(t);
    expectV1Error(await call(t, 'GET', '/api/v1/usage?group_by=week', { key: org.orgKey }), 400);
    expectV1Error(await call(t, 'GET', '/api/v1/usage?from=yesterday', { key: org.orgKey }), 400);
    expectV1Error(
      await call(t, 'GET', '/api/v1/usage?from=2020-01-02T00:00:00Z&to=2020-01-01T00:00:00Z', {
        key: org.orgKey,
      }),
      400,
    );
    const member = await createMember(t, org);
    const refused = await call(t, 'GET', '/api/v1/usage', { key: member.key });
    expectV1Error(refused, 403);
    // A read, so the refusal speaks of reading (not of changing management resources).
    expect(refused.body.error.message).toBe('Members may not read usage; only organization admins may');
    for (const url of ['/api/v1/users', `/api/v1/users/${org.adminUserId}`, '/api/v1/api_keys']) {
      const res = await call(t, 'GET', url, { key: member.key });
      expectV1Error(res, 403);
      expect(res.body.error.message, url).toMatch(
        /^Members may not read (users|API keys); only organization admins may$/,
      );
    }
  });
});
