import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../src/config.js';
import { buildTestApp, type TestApp } from './helpers/app.js';

const APP = 'https://app.example.com';

describe('CORS_ORIGINS', () => {
  let t: TestApp;
  let plain: TestApp;
  beforeAll(async () => {
    t = await buildTestApp({ CORS_ORIGINS: `${APP}, http://localhost:5173` });
    plain = await buildTestApp();
  });
  afterAll(async () => {
    await t.close();
    await plain.close();
  });

  const preflight = (app: TestApp, origin: string) =>
    app.app.inject({
      method: 'OPTIONS',
      url: '/api/v2/chats',
      headers: {
        origin,
        'access-control-request-method': 'POST',
        'access-control-request-headers': 'authorization, content-type, idempotency-key',
      },
    });

  it('answers the preflight of an allowed origin without a key', async () => {
    const res = await preflight(t, APP);
    expect(res.statusCode).toBe(204);
    expect(res.headers['access-control-allow-origin']).toBe(APP);
    expect(String(res.headers['access-control-allow-methods'])).toContain('POST');
    expect(String(res.headers['access-control-allow-headers']).toLowerCase()).toContain('idempotency-key');
  });

  it('adds the headers to real requests of allowed origins only', async () => {
    const allowed = await t.app.inject({
      method: 'GET',
      url: '/api/v1/projects',
      headers: { origin: 'http://localhost:5173', authorization: `Bearer ${t.boot.organization_key}` },
    });
    expect(allowed.statusCode).toBe(200);
    expect(allowed.headers['access-control-allow-origin']).toBe('http://localhost:5173');
    expect(String(allowed.headers['access-control-expose-headers'])).toContain('Retry-After');
    const other = await t.app.inject({
      method: 'GET',
      url: '/api/v1/projects',
      headers: { origin: 'https://evil.example', authorization: `Bearer ${t.boot.organization_key}` },
    });
    expect(other.headers['access-control-allow-origin']).toBeUndefined();
    expect(
      (await preflight(t, 'https://evil.example')).headers['access-control-allow-origin'],
    ).toBeUndefined();
  });

  it('is off by default', async () => {
    const res = await preflight(plain, APP);
    expect(res.headers['access-control-allow-origin']).toBeUndefined();
    expect(res.statusCode).not.toBe(204);
  });

  it('refuses a value that is not a list of origins', () => {
    for (const value of ['app.example.com', 'https://app.example.com/path', 'ftp://x', '*']) {
      expect(() => loadConfig({ CORS_ORIGINS: value }), value).toThrow(ConfigError);
    }
    expect(loadConfig({ CORS_ORIGINS: 'https://a.example, https://b.example:8443/' }).corsOrigins).toEqual([
      'https://a.example',
      'https://b.example:8443',
    ]);
  });
});
