import { existsSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import { type Browser, chromium } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createArtifactType, createSkill, useFakeModel } from './artifacts-fixtures.js';
import { call, createOrg, expectStatus, startTestServer, type TestApp } from './helpers/app.js';
import { type FakeModelServer, startFakeModelServer } from './helpers/fake-model-server.js';
import { ROOT } from './helpers/server-process.js';

// Debian's chromium (apt-get install -y chromium); without it this file is skipped with a notice.
const CHROMIUM = '/usr/bin/chromium';
const haveChromium = existsSync(CHROMIUM);
if (!haveChromium) console.log(`[notice] ${CHROMIUM} is missing: the share page browser test is skipped.`);

const REPORT = [
  '# Quarterly delivery report',
  '',
  'Milestones by owner, with dates that must stay readable on a phone.',
  '',
  '| Milestone | Owner | Start | Deadline | Status | Budget (EUR) | Notes |',
  '|---|---|---|---|---|---:|---|',
  '| Ownership review | Ownership Committee | 2026-07-01 | 2026-09-30 | In progress | 125,000.00 | Waiting for the external auditors to confirm the reconciliation of every subsidiary account |',
  '| Data migration | Infrastructure | 2026-08-15 | 2026-10-31 | Planned | 48,250.00 | Two weekends of downtime |',
  '| Accessibility audit | Design Systems | 2026-06-01 | 2026-07-15 | Done | 9,900.00 | Passed |',
  '',
  '| Key | Value |',
  '|---|---|',
  '| Identifier | e0526964443b-4f1c-9a7e-2b1d0c3f5a6e |',
  '| Contact | accounts-receivable@example.org |',
  '',
  'A closing paragraph with a long unbroken token: https://example.org/reports/2026/q3/delivery-overview-final.pdf',
].join('\n');

describe.skipIf(!haveChromium)('share pages in a real browser at 390 px', () => {
  let t: TestApp;
  let fake: FakeModelServer;
  let browser: Browser;

  beforeAll(async () => {
    fake = await startFakeModelServer();
    t = await startTestServer();
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: [
        '--headless',
        '--no-sandbox',
        '--disable-gpu',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
        '--no-first-run',
      ],
    });
  });
  afterAll(async () => {
    await browser?.close();
    await t?.close();
    await fake?.close();
  });

  it('scrolls tables sideways and never breaks a word inside a cell', async () => {
    const org = await createOrg(t);
    await useFakeModel(t, org, fake);
    const type = await createArtifactType(t, org, 'report', 'Report');
    const skill = await createSkill(t, org, { name: 'Report', content: 'Write it', typeIds: [type.id] });
    fake.enqueue({ text: REPORT });
    const created = await call(
      t,
      'POST',
      `/api/v1/artifact_types/report/artifacts?project_id=${org.projectId}`,
      {
        key: org.orgKey,
        body: { skill_id: skill.id, inputs: [], name: 'Quarterly delivery report' },
      },
    );
    expectStatus(created, 201);
    const url = `${t.baseUrl}${new URL(created.body.url).pathname}`;

    const page = await browser.newPage({ viewport: { width: 390, height: 844 }, deviceScaleFactor: 2 });
    try {
      const res = await page.goto(url);
      expect(res?.status()).toBe(200);
      const dir = path.join(ROOT, 'test-results');
      mkdirSync(dir, { recursive: true });
      await page.screenshot({ path: path.join(dir, 'share-table-390.png'), fullPage: true });

      // Runs in the page (no DOM types in this Node project: `any`).
      const report = await page.evaluate(() => {
        const { document, getComputedStyle, innerWidth, NodeFilter } = globalThis as any;
        // Lines a piece of text occupies: the distinct tops of its layout boxes.
        const linesOf = (range: any) =>
          new Set([...range.getClientRects()].map((r: any) => Math.round(r.top))).size;
        const splitWords: string[] = [];
        const multiLineShortCells: string[] = [];
        for (const cell of document.querySelectorAll('td, th')) {
          const whole = document.createRange();
          whole.selectNodeContents(cell);
          if (!cell.classList.contains('prose') && linesOf(whole) > 1) {
            multiLineShortCells.push(cell.textContent ?? '');
          }
          // Every word of every cell stays on one line.
          const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
          for (let node = walker.nextNode(); node; node = walker.nextNode()) {
            for (const match of (node.textContent ?? '').matchAll(/\S+/g)) {
              const word = document.createRange();
              word.setStart(node, match.index ?? 0);
              word.setEnd(node, (match.index ?? 0) + match[0].length);
              if (linesOf(word) > 1) splitWords.push(match[0]);
            }
          }
        }
        const scrollers = [...document.querySelectorAll('.table-scroll')].map((el: any) => ({
          scrollWidth: el.scrollWidth,
          clientWidth: el.clientWidth,
          overflowX: getComputedStyle(el).overflowX,
        }));
        return {
          splitWords,
          multiLineShortCells,
          scrollers,
          pageWidth: document.documentElement.scrollWidth,
          viewport: innerWidth,
        };
      });

      expect(report.splitWords).toEqual([]);
      expect(report.multiLineShortCells).toEqual([]);
      expect(report.scrollers).toHaveLength(2);
      // The wide table scrolls inside its wrapper; the page itself does not scroll sideways.
      expect(report.scrollers[0].overflowX).toBe('auto');
      expect(report.scrollers[0].scrollWidth).toBeGreaterThan(report.scrollers[0].clientWidth);
      expect(report.pageWidth).toBeLessThanOrEqual(report.viewport);

      // The wrapper really scrolls: the last column comes into view.
      const scrolled = await page.$eval('.table-scroll', (el: any) => {
        el.scrollLeft = el.scrollWidth;
        return el.scrollLeft;
      });
      expect(scrolled).toBeGreaterThan(0);
    } finally {
      await page.close();
    }
  });
});
