import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildTestApp, call, createMember, createOrg, type TestApp, type TestOrg } from './helpers/app.js';

// Tables that background work (document processing, deliveries, detached turns) or bookkeeping may
// change at any moment: left out of the "a rejected request changes nothing" fingerprint.
const VOLATILE =
  /document|chunk|webhook|async|job|deliver|idempotency|api_keys|embedding|turn|stream_event|lease/;

async function tableNames(t: TestApp): Promise<string[]> {
  const { rows } = await t.deps.database.query<{ name: string }>(
    `select table_name as name from information_schema.tables
     where table_schema = 'public' and table_type = 'BASE TABLE' and table_name not like '%drizzle%'`,
  );
  return rows.map((r) => r.name).filter((name) => !VOLATILE.test(name));
}

async function fingerprint(t: TestApp, tables: string[]): Promise<string> {
  const parts = tables.map(
    (name) => `(select md5(coalesce(string_agg(x::text, '|' order by x::text), '')) from "${name}" x)`,
  );
  const { rows } = await t.deps.database.query<{ f: string }>(
    `select concat_ws(',', ${parts.join(', ')}) as f`,
  );
  return rows[0].f;
}

const fieldNames = [
  'page',
  'page_size',
  'project_id',
  'include_archived',
  'group_by',
  'from',
  'to',
  'processing_status',
  'after',
  'x',
];

describe('fuzz: malformed input on every route', () => {
  let t: TestApp;
  let org: TestOrg;
  let memberKey: string;
  beforeAll(async () => {
    t = await buildTestApp({ OUTBOUND_ALLOW_PRIVATE: 'false' });
    org = await createOrg(t);
    memberKey = (await createMember(t, org)).key;
  });
  afterAll(() => t.close());

  it('never answers 5xx, answers errors in the family shape, and rejected requests change nothing', async () => {
    const spec = (await call(t, 'GET', '/openapi.json')).body;
    const routes = Object.entries(spec.paths as Record<string, Record<string, unknown>>).flatMap(
      ([path, ops]) =>
        Object.keys(ops)
          .filter((m) => ['get', 'post', 'put', 'delete', 'patch'].includes(m))
          .map((method) => ({ method: method.toUpperCase(), path })),
    );
    expect(routes.length).toBeGreaterThan(10);
    const tables = await tableNames(t);

    // Path parameters, already encoded for the URL: some are not valid percent-encoding at all,
    // some pass the router's length limit (the probe's 134 escapes from the envelope).
    const param = fc.oneof(
      fc.constant(String(org.projectId)),
      fc.integer({ min: -5, max: 5 }).map(String),
      fc.constant('99999999999999'),
      fc.string({ maxLength: 12 }).map(encodeURIComponent),
      fc.constant('1.5'),
      fc.constantFrom('%C0%AF', '%', '%zz', '%E0%A4%A', '%ff', 'a%', '%00', '%2'),
      fc.integer({ min: 99, max: 1200 }).map((n) => 'a'.repeat(n)),
      fc.integer({ min: 99, max: 1200 }).map((n) => '9'.repeat(n)),
    );
    const query = fc.dictionary(
      fc.constantFrom(...fieldNames),
      fc.oneof(fc.string({ maxLength: 10 }), fc.integer().map(String)),
      {
        maxKeys: 3,
      },
    );
    const body = fc.oneof(
      fc.jsonValue({ maxDepth: 3 }).map((v) => ({ payload: JSON.stringify(v), type: 'application/json' })),
      fc.string({ maxLength: 40 }).map((s) => ({ payload: s, type: 'application/json' })),
      fc.object({ maxDepth: 2 }).map((v) => ({ payload: JSON.stringify(v), type: 'application/json' })),
      fc
        .string({ maxLength: 60 })
        .map((s) => ({ payload: `--x\r\n${s}\r\n--x--`, type: 'multipart/form-data; boundary=x' })),
      fc.constant({ payload: undefined, type: undefined }),
    );
    const key = fc.oneof(
      { weight: 6, arbitrary: fc.constant(org.orgKey) },
      { weight: 1, arbitrary: fc.constant(memberKey) },
      { weight: 1, arbitrary: fc.constant(null) },
      { weight: 1, arbitrary: fc.constant('sk_org_garbage') },
    );

    await fc.assert(
      fc.asyncProperty(fc.constantFrom(...routes), param, query, body, key, async (route, p, q, b, k) => {
        const url =
          route.path.replace(/\{[^}]+\}/g, () => p) +
          (Object.keys(q).length ? `?${new URLSearchParams(q).toString()}` : '');
        const before = await fingerprint(t, tables);
        const res = await t.app.inject({
          method: route.method as any,
          url,
          headers: {
            ...(k ? { authorization: `Bearer ${k}` } : {}),
            ...(b.type && route.method !== 'GET' && route.method !== 'DELETE'
              ? { 'content-type': b.type }
              : {}),
          },
          ...(b.payload !== undefined && route.method !== 'GET' && route.method !== 'DELETE'
            ? { payload: b.payload }
            : {}),
        });
        const context = `${route.method} ${url} -> ${res.statusCode} ${res.body.slice(0, 300)}`;
        expect(res.statusCode, context).toBeLessThan(500);
        if (res.statusCode >= 400 && url.startsWith('/api/')) {
          const parsed = res.json();
          if (url.startsWith('/api/v2')) {
            expect(parsed, context).toMatchObject({
              status: 'error',
              response: { code: res.statusCode, error: expect.any(String), message: expect.any(String) },
            });
          } else {
            expect(parsed, context).toEqual({
              error: { message: expect.any(String), code: expect.any(String), details: expect.any(Object) },
            });
          }
          expect(await fingerprint(t, tables), `database changed by a rejected request: ${context}`).toBe(
            before,
          );
        }
      }),
      { numRuns: 300 },
    );
  });

  it('answers router errors in the family envelope: bad percent-encoding, over-long parameters', async () => {
    // A fresh organization: the property run above may, by chance, revoke or delete what it finds
    // (an API key id between -5 and 5 is a valid target for DELETE /api_keys/:id).
    const org = await createOrg(t);
    const long = (n: number) => '7'.repeat(n);
    for (const [url, status, code] of [
      ['/api/v2/chats/%C0%AF', 400, 'invalid_request'],
      ['/api/v2/chats/%E0%A4%A/messages', 400, 'invalid_request'],
      ['/api/v1/projects/%C0%AF', 400, 'invalid_request'],
      ['/api/v1/data_center/documents/%', 400, 'invalid_request'],
      [`/api/v2/chats/${long(101)}`, 400, 'invalid_request'],
      [`/api/v1/projects/${long(101)}`, 400, 'invalid_request'],
      [`/api/v2/chats/${long(1001)}`, 414, 'uri_too_long'],
      [`/api/v1/projects/${long(1001)}`, 414, 'uri_too_long'],
    ] as const) {
      const res = await call(t, 'GET', url, { key: url.startsWith('/api/v2') ? org.adminKey : org.orgKey });
      const context = `${url.slice(0, 60)} -> ${res.status} ${JSON.stringify(res.body).slice(0, 200)}`;
      expect(res.status, context).toBe(status);
      expect(String(res.headers['content-type']), context).toContain('application/json');
      if (url.startsWith('/api/v2')) {
        expect(res.body, context).toEqual({
          status: 'error',
          response: { code: status, error: code, message: expect.any(String) },
        });
      } else {
        expect(res.body, context).toEqual({
          error: { message: expect.any(String), code, details: expect.any(Object) },
        });
      }
      // Neither Fastify's code nor the path comes back.
      expect(JSON.stringify(res.body), context).not.toMatch(/FST_|7777777/);
    }
  });
});
