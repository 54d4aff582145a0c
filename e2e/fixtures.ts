import { readFileSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { test as base, expect, type Page } from '@playwright/test';
import { type FakeModelServer, startFakeModelServer } from '../test/helpers/fake-model-server.js';
import { startWebhookReceiver, type WebhookReceiver } from '../test/helpers/webhook-receiver.js';
import { type Service, startService } from './service.js';

export { expect };

export interface Env {
  service: Service;
  model: FakeModelServer;
  receiver: WebhookReceiver;
  /** A call to the service's API (for setting up data and checking what the console did). */
  api(key: string, method: string, path: string, body?: unknown): Promise<any>;
}

/** Words of the last user message in an OpenAI chat request. */
function lastUserText(body: any): string {
  const messages: any[] = body?.messages ?? [];
  const last = [...messages].reverse().find((m) => m.role === 'user');
  if (!last) return '';
  return typeof last.content === 'string'
    ? last.content
    : (last.content ?? []).map((part: any) => part.text ?? '').join(' ');
}

/**
 * How the fake model answers the console's tests, decided per request so that other model calls
 * (artifact generation...) never consume a scripted reply meant for a chat.
 */
function respond(model: FakeModelServer) {
  model.setResponder((request) => {
    const messages: any[] = request.body?.messages ?? [];
    const text = lastUserText(request.body);
    const last = messages[messages.length - 1];
    if (text.includes('search the documents')) {
      if (last?.role === 'tool') return { text: 'The **handbook** says the office opens at nine.' };
      return { toolCalls: [{ name: 'knowledge_search', arguments: { query: 'office hours' } }] };
    }
    if (text.includes('slowly')) {
      const words = Array.from({ length: 40 }, (_, i) => `word${i + 1}`);
      return { chunks: words.map((w) => `${w} `), chunkDelayMs: 150 };
    }
    return {};
  });
}

export const test = base.extend<{ env: Env }, { workerEnv: Env }>({
  workerEnv: [
    // biome-ignore lint/correctness/noEmptyPattern: Playwright's fixture signature
    async ({}, use) => {
      const model = await startFakeModelServer();
      respond(model);
      const receiver = await startWebhookReceiver();
      const service = await startService(model.baseUrl);
      const api = async (key: string, method: string, path: string, body?: unknown) => {
        const res = await fetch(`${service.baseUrl}${path}`, {
          method,
          headers: {
            authorization: `Bearer ${key}`,
            ...(body === undefined ? {} : { 'content-type': 'application/json' }),
          },
          body: body === undefined ? undefined : JSON.stringify(body),
        });
        const text = await res.text();
        if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${text}`);
        return text ? JSON.parse(text) : null;
      };
      await use({ service, model, receiver, api });
      await service.stop();
      await receiver.close();
      await model.close();
    },
    { scope: 'worker', timeout: 180_000 },
  ],
  env: async ({ workerEnv }, use) => use(workerEnv),
  baseURL: async ({ workerEnv }, use) => use(workerEnv.service.baseUrl),
});

export async function signIn(page: Page, key: string) {
  await page.goto('/console/');
  await page.getByLabel('API key').fill(key);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await expect(page.getByRole('button', { name: 'Sign out' })).toBeVisible();
}

/** Goes to a console page through its navigation link (the menu is folded on narrow screens). */
export async function openPage(page: Page, label: string) {
  const toggle = page.getByRole('button', { name: 'Menu' });
  if (await toggle.isVisible()) await toggle.click();
  await page
    .getByRole('navigation', { name: 'Console' })
    .getByRole('link', { name: label, exact: true })
    .click();
  await expect(page.getByRole('heading', { level: 1 })).toBeVisible();
}

/** A full-page screenshot at desktop and phone widths, kept under test-results/screenshots/. */
export async function screenshots(page: Page, name: string) {
  await mkdir('test-results/screenshots', { recursive: true });
  const original = page.viewportSize() ?? { width: 1280, height: 900 };
  for (const width of [1280, 390]) {
    await page.setViewportSize({ width, height: width === 390 ? 844 : 900 });
    await page.waitForTimeout(150);
    // Nothing may stick out sideways at phone width: the page reads without horizontal scrolling.
    if (width === 390) {
      const overflow = await page.evaluate(
        'document.documentElement.scrollWidth - document.documentElement.clientWidth',
      );
      expect(overflow, `${name} scrolls sideways at 390 px`).toBeLessThanOrEqual(0);
    }
    await page.screenshot({ path: `test-results/screenshots/${name}-${width}.png`, fullPage: true });
  }
  await page.setViewportSize(original);
}

const axeSource = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');

export interface AxeViolation {
  id: string;
  impact: string | null;
  help: string;
  nodes: string[];
}

/** axe-core's serious and critical violations on the current page (injected over DevTools, so the CSP stays on). */
export async function seriousViolations(page: Page): Promise<AxeViolation[]> {
  if (!(await page.evaluate('typeof window.axe === "object"'))) await page.evaluate(axeSource);
  const violations = (await page.evaluate(
    `axe.run(document, { resultTypes: ['violations'] }).then((r) => r.violations.map((v) => ({
      id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.slice(0, 5).map((n) => n.target.join(' ')),
    })))`,
  )) as AxeViolation[];
  return violations.filter((v) => v.impact === 'serious' || v.impact === 'critical');
}
