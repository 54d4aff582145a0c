import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../src/app.js';
import { loadConfig } from '../src/config.js';
import { buildTestApp, call, expectStatus, expectV1Error, type TestApp, testEnv } from './helpers/app.js';

describe('rate limiting (in memory)', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await buildTestApp({ RATE_LIMIT_PER_MINUTE: '3' });
  });
  afterAll(() => t.close());

  it('answers 429 with an integer Retry-After and the family body, with draft RateLimit headers', async () => {
    const key = t.boot.organization_key;
    const first = await call(t, 'GET', '/api/v1/users', { key });
    expect(first.headers['ratelimit-limit']).toBe('3');
    expect(first.headers['ratelimit-remaining']).toBe('2');
    // Seconds until the window (one minute) resets the budget.
    const reset = Number(first.headers['ratelimit-reset']);
    expect(Number.isInteger(reset) && reset > 0 && reset <= 60).toBe(true);
    await call(t, 'GET', '/api/v1/users', { key });
    const third = await call(t, 'GET', '/api/v1/users', { key });
    expect(third.headers['ratelimit-remaining']).toBe('0');
    const limited = await call(t, 'GET', '/api/v1/users', { key });
    expectV1Error(limited, 429, 'rate_limited');
    expect(String(limited.headers['retry-after'])).toMatch(/^\d+$/);
    expect(Number(limited.headers['retry-after'])).toBeLessThanOrEqual(60);
    // Budgets are per key: another key is unaffected.
    expectStatus(await call(t, 'GET', '/api/v1/users', { key: t.boot.personal_key }), 200);
  });

  it('does not limit operations endpoints', async () => {
    for (let i = 0; i < 5; i++) expectStatus(await call(t, 'GET', '/health'), 200);
  });
});

describe.runIf(process.env.REDIS_URL)('rate limiting shared through Redis', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await buildTestApp({ RATE_LIMIT_PER_MINUTE: '4', REDIS_URL: process.env.REDIS_URL! });
  });
  afterAll(() => t.close());

  it('shares one budget between two app instances', async () => {
    // A second app on the same database and Redis, as a second process would be.
    const second = await buildApp(
      {
        ...t.deps,
        config: loadConfig(testEnv({ RATE_LIMIT_PER_MINUTE: '4', REDIS_URL: process.env.REDIS_URL! })),
      },
      { logger: false },
    );
    try {
      // A fresh key so earlier runs against the same Redis do not count.
      const created = await call(t, 'POST', '/api/v1/api_keys', {
        key: t.boot.organization_key,
        body: { kind: 'organization', name: randomBytes(4).toString('hex') },
      });
      const key = created.body.key;
      const hit = (app: typeof second) =>
        app.inject({ method: 'GET', url: '/api/v1/users', headers: { authorization: `Bearer ${key}` } });
      expect((await hit(t.app)).statusCode).toBe(200);
      expect((await hit(second)).statusCode).toBe(200);
      expect((await hit(t.app)).statusCode).toBe(200);
      expect((await hit(second)).statusCode).toBe(200);
      const limited = await hit(t.app);
      expect(limited.statusCode).toBe(429);
      expect((await hit(second)).statusCode).toBe(429);
    } finally {
      await second.close();
    }
  });
});
