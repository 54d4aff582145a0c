import { chromiumPath } from './chromium.js';
import { expect, openPage, screenshots, seriousViolations, signIn, test } from './fixtures.js';

if (!chromiumPath()) {
  console.warn(
    '[notice] Chromium not found (apt-get install -y chromium): the console browser tests are skipped.',
  );
}
test.skip(!chromiumPath(), 'Chromium is not installed');

const ORG_PAGES = [
  'Dashboard',
  'Projects',
  'Groups',
  'Categories',
  'Users',
  'API keys',
  'Artifact types & skills',
  'Agents',
  'Model configurations',
  'Integrations',
  'Documents',
  'Chat',
  'Artifacts',
];

test('sign in and every page: screenshots at 1280 and 390 px, no serious axe violations', async ({
  page,
  env,
}) => {
  const errors: string[] = [];
  page.on('pageerror', (error) => errors.push(String(error)));
  page.on('console', (message) => {
    // The CSP would report a blocked inline script or style here.
    if (message.type() === 'error' && /Content Security Policy/i.test(message.text()))
      errors.push(message.text());
  });

  await page.goto('/console/');
  expect(await seriousViolations(page)).toEqual([]);
  await screenshots(page, 'sign-in');
  await signIn(page, env.service.keys.organization_key);
  await expect(page.getByTestId('who')).toHaveText(/Admin · organization key/);

  for (const label of ORG_PAGES) {
    await openPage(page, label);
    // Lists settle (no spinner left) before the picture and the audit.
    await expect(page.locator('.spinner')).toHaveCount(0);
    const violations = await seriousViolations(page);
    expect(violations, `axe on ${label}: ${JSON.stringify(violations, null, 2)}`).toEqual([]);
    await screenshots(page, label.toLowerCase().replace(/[^a-z]+/g, '-'));
  }
  // The key never shows up in the address bar.
  expect(page.url()).not.toContain(env.service.keys.organization_key);
  expect(errors).toEqual([]);
});

test('a project with a webhook: the secret once, a delivery in its log, redeliver', async ({ page, env }) => {
  await signIn(page, env.service.keys.organization_key);
  await openPage(page, 'Projects');
  await page.getByRole('button', { name: 'New project' }).click();
  await page.getByLabel('Name (required)').fill('Hooked project');
  await page.getByRole('button', { name: 'Create project' }).click();
  const row = page.getByRole('row').filter({ hasText: 'Hooked project' });
  await expect(row).toBeVisible();
  await row.getByRole('button', { name: 'Open' }).click();

  await page.getByLabel('Endpoint URL').fill(`${env.receiver.url}/hooks`);
  await page.getByRole('checkbox', { name: 'artifact_refined' }).uncheck();
  await page.getByRole('button', { name: 'Add webhook' }).click();
  const secret = page.getByRole('textbox', { name: 'Webhook signing secret' });
  await expect(secret).toHaveValue(/^whsec_/);
  await expect(page.getByText('artifact_generated, artifact_generation_failed')).toBeVisible();

  await page.getByRole('button', { name: 'Send test event' }).click();
  const delivery = page.getByTestId('delivery').first();
  await expect(delivery).toContainText('webhook_test');
  await expect(delivery).toContainText('delivered');
  await expect(delivery).toContainText('200');
  await env.receiver.waitFor(1, { match: (d) => d.path === '/hooks' });

  const before = env.receiver.received.filter((d) => d.path === '/hooks').length;
  await delivery.getByRole('button', { name: 'Redeliver' }).click();
  await env.receiver.waitFor(before + 1, { match: (d) => d.path === '/hooks' });
  await screenshots(page, 'project-webhooks');
});

test('documents: several uploads with progress, live status until completed', async ({ page, env }) => {
  await signIn(page, env.service.keys.organization_key);
  await openPage(page, 'Documents');
  await page.getByLabel('Files').setInputFiles([
    {
      name: 'handbook.md',
      mimeType: 'text/markdown',
      buffer: Buffer.from('# Handbook\n\nThe office opens at nine.\n'),
    },
    { name: 'notes.txt', mimeType: 'text/plain', buffer: Buffer.from('Plain notes about the project.\n') },
  ]);
  await page.getByRole('button', { name: 'Upload', exact: true }).click();
  const uploads = page.getByTestId('upload');
  await expect(uploads).toHaveCount(2);
  await expect(uploads.filter({ hasText: 'uploaded' })).toHaveCount(2);
  for (const name of ['handbook.md', 'notes.txt']) {
    await expect(page.getByTestId('document').filter({ hasText: name })).toContainText('completed', {
      timeout: 60_000,
    });
  }
  await screenshots(page, 'documents-uploaded');
});

test('chat: a streamed reply with a tool call, usage per message', async ({ page, env }) => {
  await signIn(page, env.service.keys.organization_key);
  await openPage(page, 'Chat');
  await page.getByLabel('Message').fill('Please search the documents for office hours');
  await page.getByRole('button', { name: 'Send' }).click();
  const tool = page.getByTestId('tool-call').filter({ hasText: 'knowledge_search' });
  await expect(tool).toBeVisible();
  await expect(tool).toContainText('completed');
  const reply = page.getByTestId('message-assistant').last();
  await expect(reply).toContainText('The handbook says the office opens at nine.');
  await expect(reply.locator('strong', { hasText: 'handbook' })).toBeVisible();
  await expect(reply.getByTestId('message-usage')).toContainText('tokens in');
  await tool.locator('summary').click();
  await expect(tool).toContainText('office hours');
  await screenshots(page, 'chat-tool-call');
});

test('chat: reloading mid-reply resumes the stream where it was', async ({ page, env }) => {
  await signIn(page, env.service.keys.organization_key);
  await openPage(page, 'Chat');
  await page.getByLabel('Message').fill('Answer slowly please');
  await page.getByRole('button', { name: 'Send' }).click();
  const streaming = page.getByTestId('streaming-message');
  await expect(streaming).toContainText('word3');
  const resumed: (string | undefined)[] = [];
  page.on('request', (request) => {
    if (/\/api\/v2\/chats\/\d+\/stream$/.test(request.url()))
      resumed.push(request.headers()['last-event-id']);
  });
  await page.reload();
  // Picked up again from the resume point kept in sessionStorage: still streaming after the reload.
  await expect(page.getByTestId('streaming-message')).toContainText('word', { timeout: 15_000 });
  const reply = page.getByTestId('message-assistant').last();
  await expect(reply).toContainText('word40', { timeout: 30_000 });
  const text = (await reply.locator('.markdown').innerText()).trim();
  // Each word exactly once: nothing lost, nothing doubled by the reattachment.
  expect(text.split(/\s+/)).toEqual(Array.from({ length: 40 }, (_, i) => `word${i + 1}`));
  // Reattached after the events it already had, not from the start.
  expect(resumed).toHaveLength(1);
  expect(Number(resumed[0])).toBeGreaterThanOrEqual(3);
  await expect(page.getByTestId('streaming-message')).toHaveCount(0);
});

test('chat: cancel stops the reply and keeps what was written', async ({ page, env }) => {
  await signIn(page, env.service.keys.organization_key);
  await openPage(page, 'Chat');
  await page.getByLabel('Message').fill('Write slowly and I will stop you');
  await page.getByRole('button', { name: 'Send' }).click();
  await expect(page.getByTestId('streaming-message')).toContainText('word2');
  await page.getByRole('button', { name: 'Cancel reply' }).click();
  const reply = page.getByTestId('message-assistant').last();
  await expect(reply).toContainText('cancelled');
  await expect(reply).not.toContainText('word40');
  await expect(page.getByRole('button', { name: 'Send' })).toBeVisible();
});

test('artifacts: skill variables, streamed generation, refinement, share link', async ({ page, env }) => {
  await signIn(page, env.service.keys.organization_key);
  await openPage(page, 'Artifact types & skills');
  const types = page.getByRole('region', { name: 'Artifact types' });
  await types.getByRole('button', { name: 'New artifact type' }).click();
  await types.getByLabel(/^Name/).fill('Briefing');
  await types.getByRole('button', { name: 'Create artifact type' }).click();
  await expect(types.getByRole('row').filter({ hasText: 'briefing' })).toBeVisible();

  const skills = page.getByRole('region', { name: 'Skills' });
  await skills.getByRole('button', { name: 'New skill' }).click();
  await skills.getByLabel('Name (required)').fill('Brief writer');
  await skills
    .getByLabel('Prompt (required)')
    .fill('Write a brief about {custom.topic} for {custom.audience}.');
  await expect(skills.getByText('{custom.topic}', { exact: true })).toBeVisible();
  await expect(skills.getByText('{custom.audience}', { exact: true })).toBeVisible();
  await skills.getByLabel('Description of topic').fill('What the brief is about');
  await skills.getByRole('checkbox', { name: 'Briefing' }).check();
  await skills.getByRole('button', { name: 'Create skill' }).click();
  await expect(skills.getByRole('row').filter({ hasText: 'Brief writer' })).toContainText('topic, audience');

  await openPage(page, 'Artifacts');
  await page.getByLabel('Artifact type').selectOption({ label: 'Briefing' });
  await expect(page.getByLabel('Skill')).toHaveValue(/\d+/);
  await page.getByLabel('topic').fill('Solar panels');
  await page.getByLabel('audience').fill('home owners');
  await page.getByLabel('Name (optional)').fill('Solar brief');
  await page.getByRole('button', { name: 'Generate' }).click();
  const artifact = page.getByTestId('artifact');
  await expect(artifact.getByRole('heading', { name: 'Solar brief' })).toBeVisible();
  const generated = await artifact.locator('.markdown').innerText();
  expect(generated.length).toBeGreaterThan(0);

  await page.getByLabel('Refine: what should change?').fill('Make it shorter');
  await page.getByRole('button', { name: 'Refine' }).click();
  await expect(artifact.getByRole('heading', { name: 'Solar brief' })).toBeVisible();
  await expect(page.getByLabel('Refine: what should change?')).toHaveValue('');

  const share = artifact.getByRole('link', { name: 'Open share link' });
  const href = await share.getAttribute('href');
  expect(href).toMatch(/\/share\/artifacts\/[\w-]+$/);
  const shared = await page.request.get(href!);
  expect(shared.status()).toBe(200);
  await screenshots(page, 'artifact-refined');
});

test('a revoked key: the console signs out on its next call', async ({ page, env }) => {
  const admin = env.service.keys.organization_key;
  const created = await env.api(admin, 'POST', '/api/v1/api_keys', {
    kind: 'organization',
    name: 'soon revoked',
  });
  await signIn(page, created.key);
  await openPage(page, 'Projects');
  await env.api(admin, 'DELETE', `/api/v1/api_keys/${created.api_key.id}`);
  await openPage(page, 'Groups').catch(() => {});
  await expect(page.getByRole('button', { name: 'Sign in' })).toBeVisible();
  await expect(page.getByRole('alert')).toContainText('no longer accepts this key');
  expect(
    await page.evaluate('Object.keys(sessionStorage).filter((k) => k.startsWith("scriptorium."))'),
  ).toEqual([]);
});

test('a member key sees no admin pages', async ({ page, env }) => {
  const admin = env.service.keys.organization_key;
  const { user } = await env.api(admin, 'POST', '/api/v1/users', {
    email: 'member@example.com',
    role: 'member',
  });
  const { key } = await env.api(admin, 'POST', '/api/v1/api_keys', { kind: 'personal', user_id: user.id });
  await signIn(page, key);
  await expect(page.getByTestId('who')).toHaveText(/Member · personal key/);
  const nav = page.getByRole('navigation', { name: 'Console' });
  for (const hidden of ['Users', 'API keys', 'Organizations']) {
    await expect(nav.getByRole('link', { name: hidden, exact: true })).toHaveCount(0);
  }
  await expect(page.getByText('Credits and usage are shown to organization admins.')).toBeVisible();
  await page.goto('/console/users');
  await expect(page.getByRole('heading', { name: 'Not available' })).toBeVisible();
  await openPage(page, 'Projects');
  await expect(page.getByText('Read only for this key')).toBeVisible();
  await expect(page.getByRole('button', { name: 'New project' })).toHaveCount(0);
  await screenshots(page, 'member-projects');
});

test('super admin: organizations, and no flash of one organization under another key', async ({
  page,
  env,
}) => {
  await signIn(page, env.service.keys.super_admin_key);
  await expect(page.getByRole('heading', { name: 'Organizations', level: 1 })).toBeVisible();
  await page.getByRole('button', { name: 'New organization' }).click();
  await page.getByLabel('Name (required)').fill('Second org');
  await page.getByLabel('First admin user email (required)').fill('second@example.com');
  await page.getByRole('button', { name: 'Create organization' }).click();
  const orgKey = await page.getByRole('textbox', { name: /Organization key of Second org/ }).inputValue();
  expect(orgKey).toMatch(/^sk_org_/);
  const row = page.getByRole('row').filter({ hasText: 'Second org' });
  await row.getByLabel('Credits to add to Second org').fill('250');
  await row.getByRole('button', { name: 'Add credits' }).click();
  await expect(row).toContainText('1,250');
  await screenshots(page, 'organizations');

  // The first organization's project list, then the second organization's key in the same tab.
  await page.getByRole('button', { name: 'Sign out' }).click();
  await signIn(page, env.service.keys.organization_key);
  await openPage(page, 'Projects');
  await expect(page.locator('tbody tr').first()).toBeVisible();
  const firstOrgNames = await page.locator('tbody tr td:first-child').allInnerTexts();
  await page.getByRole('button', { name: 'Sign out' }).click();
  // Record every project name the page ever shows from here on.
  await page.evaluate(`window.__seen = new Set();
    new MutationObserver(() => document.querySelectorAll('tbody tr td:first-child').forEach((td) => window.__seen.add(td.textContent)))
      .observe(document.body, { childList: true, subtree: true, characterData: true });`);
  await page.getByLabel('API key').fill(orgKey);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await openPage(page, 'Projects');
  await expect(page.locator('.spinner')).toHaveCount(0);
  const seen = (await page.evaluate('[...window.__seen]')) as string[];
  for (const name of firstOrgNames) expect(seen).not.toContain(name);
});

test('dashboard: usage chart by project and by model, recent chats', async ({ page, env }) => {
  const { keys } = env.service;
  await env.api(keys.organization_key, 'POST', '/api/v2/chats', {
    project_id: keys.project_id,
    content: 'Hello from the dashboard test',
  });
  await signIn(page, keys.organization_key);
  const usage = page.getByRole('region', { name: /Usage, last 30 days/ });
  await expect(
    usage
      .getByRole('img', { name: /Usage per day/ })
      .locator('rect')
      .first(),
  ).toBeVisible();
  await expect(usage.getByTestId('credit-balance')).not.toBeEmpty();
  await expect(usage.getByRole('listitem').filter({ hasText: 'Default project' })).toBeVisible();
  await usage.getByLabel('By').selectOption('model');
  await expect(usage.getByRole('listitem').filter({ hasText: 'openai-compatible' })).toBeVisible();
  await expect(
    page.getByRole('region', { name: 'Recent chats of this key' }).getByRole('link').first(),
  ).toBeVisible();
  expect(await seriousViolations(page)).toEqual([]);
  await screenshots(page, 'dashboard-with-usage');
});
