import { afterAll, beforeAll, describe, it } from 'vitest';
import {
  buildTestApp,
  call,
  createMember,
  createOrg,
  expectStatus,
  expectV1Error,
  expectV2Error,
  type TestApp,
  type TestOrg,
} from './app.js';

export interface RouteCase {
  method: string;
  /** May use ids of the organization the matrix creates. */
  url: string | ((org: TestOrg) => string);
  body?: unknown;
  /** A management write: members get 403. */
  write?: boolean;
  /** A read open to super admin keys outside /admin too (the audit log, issue 19). */
  superAdminReads?: boolean;
}

interface Keys {
  t: TestApp;
  org: TestOrg;
  revoked: string;
  deactivated: string;
  member: string;
}

async function prepareKeys(): Promise<Keys> {
  const t = await buildTestApp();
  const org = await createOrg(t);
  const revoked = await call(t, 'POST', '/api/v1/api_keys', {
    key: org.orgKey,
    body: { kind: 'organization' },
  });
  await call(t, 'DELETE', `/api/v1/api_keys/${revoked.body.api_key.id}`, { key: org.orgKey });
  const gone = await createOrg(t);
  expectStatus(
    await call(t, 'DELETE', `/api/v1/admin/organizations/${gone.organizationId}`, {
      key: t.boot.super_admin_key,
    }),
    200,
  );
  const member = await createMember(t, org);
  return { t, org, revoked: revoked.body.key, deactivated: gone.orgKey, member: member.key };
}

/**
 * The boring matrix for every route of a family (spec 5, DESIGN.md 4): missing and malformed keys
 * are 401 everywhere; invalid, revoked and deactivated-organization keys are 401 on v1 and 403 on
 * v2; super admin keys are 403 outside /admin (but for the reads open to them); members writing
 * management resources get 403.
 */
export function describeAuthMatrix(family: 'v1' | 'v2', routes: RouteCase[]) {
  const expectError = family === 'v1' ? expectV1Error : expectV2Error;
  const badKeyStatus = family === 'v1' ? 401 : 403;

  describe(`${family} authentication matrix`, () => {
    let k: Keys;
    beforeAll(async () => {
      k = await prepareKeys();
    });
    afterAll(() => k.t.close());

    for (const route of routes) {
      const label = `${route.method} ${typeof route.url === 'string' ? route.url : route.url.toString().replace(/^.*=>\s*/, '')}`;
      const send = (key: string | null, headers: Record<string, string> = {}) =>
        call(k.t, route.method, typeof route.url === 'string' ? route.url : route.url(k.org), {
          key,
          body: route.body,
          headers,
        });

      it(`${label}: missing key -> 401`, async () => expectError(await send(null), 401));
      it(`${label}: malformed Authorization header -> 401`, async () =>
        expectError(await send(null, { authorization: 'Basic dXNlcjpwYXNz' }), 401));
      it(`${label}: unknown key -> ${badKeyStatus}`, async () =>
        expectError(await send('sk_org_not-a-real-key'), badKeyStatus, 'invalid_api_key'));
      it(`${label}: revoked key -> ${badKeyStatus}`, async () =>
        expectError(await send(k.revoked), badKeyStatus, 'invalid_api_key'));
      it(`${label}: key of a deactivated organization -> ${badKeyStatus}`, async () =>
        expectError(await send(k.deactivated), badKeyStatus, 'invalid_api_key'));
      if (route.superAdminReads) {
        it(`${label}: super admin key -> 200 (a read open to super admins)`, async () =>
          expectStatus(await send(k.t.boot.super_admin_key), 200));
      } else {
        it(`${label}: super admin key outside /admin -> 403`, async () =>
          expectError(await send(k.t.boot.super_admin_key), 403, 'forbidden'));
      }
      if (route.write) {
        it(`${label}: member writing -> 403`, async () =>
          expectError(await send(k.member), 403, 'forbidden'));
      }
    }
  });
}
