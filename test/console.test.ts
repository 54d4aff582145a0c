import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Fastify, { type FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chromiumPath } from '../e2e/chromium.js';
import { CONSOLE_CSP, CONSOLE_DIST, consoleRoutes } from '../src/modules/console/routes.js';
import { buildTestApp, type TestApp } from './helpers/app.js';

const chromium = chromiumPath();
if (!chromium) {
  console.warn(
    '\n[notice] Chromium not found (/usr/bin/chromium; `apt-get install -y chromium`): the browser tests of the console (`npm run test:e2e`) cannot run here. `npm test` checks the console build and its route only.\n',
  );
}

describe('console route on a build directory', () => {
  let dir: string;
  let app: FastifyInstance;
  beforeAll(async () => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'console-dist-'));
    app = Fastify();
    await app.register(consoleRoutes(dir));
  });
  afterAll(async () => {
    await app.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('answers 503 with how to build while there is no build, then serves one made later', async () => {
    const missing = await app.inject({ url: '/console/projects' });
    expect(missing.statusCode).toBe(503);
    expect(missing.headers['content-type']).toContain('text/html');
    expect(missing.body).toContain('npm run build:console');
    expect(missing.headers['content-security-policy']).toBe(CONSOLE_CSP);

    mkdirSync(path.join(dir, 'assets'));
    writeFileSync(
      path.join(dir, 'index.html'),
      '<!doctype html><script type="module" src="/console/assets/app-1.js"></script>',
    );
    writeFileSync(path.join(dir, 'assets', 'app-1.js'), 'export {};');

    const index = await app.inject({ url: '/console' });
    expect(index.statusCode).toBe(200);
    expect(index.body).toContain('app-1.js');
    expect(index.headers['cache-control']).toBe('no-cache');
    // Every path under /console is the app (its own router reads it).
    const deep = await app.inject({ url: '/console/playground/chat?chat=4' });
    expect(deep.statusCode).toBe(200);
    expect(deep.body).toBe(index.body);

    const asset = await app.inject({ url: '/console/assets/app-1.js' });
    expect(asset.statusCode).toBe(200);
    expect(asset.headers['content-type']).toContain('text/javascript');
    expect(asset.headers['cache-control']).toContain('immutable');
    // A missing asset is not answered with the page (a browser would run HTML as a script).
    expect((await app.inject({ url: '/console/assets/gone.js' })).statusCode).toBe(404);
    // Nothing outside the build is reachable.
    for (const url of [
      '/console/../package.json',
      '/console/%2e%2e/package.json',
      '/console/assets/..%2f..%2fpackage.json',
    ]) {
      const res = await app.inject({ url });
      expect(res.body).not.toContain('"dependencies"');
    }
  });
});

describe('console in the app', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await buildTestApp();
  });
  afterAll(() => t.close());

  it('serves /console with a strict Content-Security-Policy and no key needed', async () => {
    const res = await t.app.inject({ url: '/console/' });
    expect([200, 503]).toContain(res.statusCode);
    const csp = res.headers['content-security-policy'] as string;
    expect(csp).toContain("default-src 'self'");
    expect(csp).toContain("script-src 'self'");
    expect(csp).toContain("connect-src 'self'");
    expect(csp).not.toContain('unsafe-inline');
    expect(csp).not.toContain('unsafe-eval');
    expect(res.headers['x-frame-options']).toBe('DENY');
  });
});

const built = existsSync(path.join(CONSOLE_DIST, 'index.html'));
if (!built) {
  console.warn(
    '\n[notice] console/dist is missing (run `npm run build:console`): the build checks are skipped.\n',
  );
}

describe.skipIf(!built)('console build', () => {
  it('loads its scripts from files (no inline script) that exist', () => {
    const html = readFileSync(path.join(CONSOLE_DIST, 'index.html'), 'utf8');
    const scripts = [...html.matchAll(/<script\b([^>]*)>([\s\S]*?)<\/script>/g)];
    expect(scripts.length).toBeGreaterThan(0);
    for (const [, attributes, body] of scripts) {
      expect(body.trim()).toBe('');
      const src = /src="\/console\/([^"]+)"/.exec(attributes)?.[1];
      expect(src).toBeDefined();
      expect(existsSync(path.join(CONSOLE_DIST, src!))).toBe(true);
    }
    expect(html).not.toMatch(/<style\b/);
    expect(html).not.toMatch(/\son\w+=/);
  });
});
