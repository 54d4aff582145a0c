import { eq } from 'drizzle-orm';
import { type HTMLElement, parse } from 'node-html-parser';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { organizations, projects } from '../src/db/schema/index.js';
import { createArtifactType, createSkill, useFakeModel } from './artifacts-fixtures.js';
import { buildTestApp, call, createOrg, expectStatus, type TestApp, type TestOrg } from './helpers/app.js';
import { type FakeModelServer, startFakeModelServer } from './helpers/fake-model-server.js';

const CONTENT = [
  '# Launch plan',
  '',
  'We ship on **Friday** with `v2`.',
  '',
  '| Step | Owner |',
  '|------|-------|',
  '| Test | Ada   |',
  '',
  '- [x] shipped',
  '',
  '<script>alert("pwned")</script>',
  '',
  '<img src="https://example.com/x.png" onerror="alert(1)">',
  '',
  '[click me](javascript:alert(2)) and [docs](https://example.com/docs)',
  '',
  '<iframe src="https://evil.example"></iframe>',
  '<a href="https://example.com" onclick="steal()" style="color:red">styled</a>',
].join('\n');

describe('share pages', () => {
  let t: TestApp;
  let fake: FakeModelServer;
  let org: TestOrg;
  let slug: string;
  let skillId: number;

  async function makeArtifact(text: string, name?: string) {
    fake.enqueue({ text });
    const res = await call(
      t,
      'POST',
      `/api/v1/artifact_types/${slug}/artifacts?project_id=${org.projectId}`,
      {
        key: org.orgKey,
        body: { skill_id: skillId, inputs: [], ...(name ? { name } : {}) },
      },
    );
    expectStatus(res, 201);
    return res.body as { artifact: any; url: string };
  }

  async function page(url: string) {
    const path = new URL(url).pathname;
    const res = await call(t, 'GET', path);
    return { res, doc: parse(String(res.body)) as HTMLElement };
  }

  beforeAll(async () => {
    fake = await startFakeModelServer();
    t = await buildTestApp({ PUBLIC_BASE_URL: 'https://docs.example.org' });
    org = await createOrg(t, 'Secretive Org');
    await t.deps.database.db
      .update(projects)
      .set({ name: 'Project Nightingale', overview: 'Confidential overview' })
      .where(eq(projects.id, org.projectId));
    await useFakeModel(t, org, fake);
    const type = await createArtifactType(t, org, 'plan', 'Plan');
    slug = type.slug;
    skillId = (await createSkill(t, org, { name: 'Planner', content: 'Plan it.', typeIds: [type.id] })).id;
  });
  afterAll(async () => {
    await t.close();
    await fake.close();
  });
  beforeEach(() => fake.reset());

  it('serves the artifact as a public HTML page without any key', async () => {
    const { url } = await makeArtifact(CONTENT);
    expect(url.startsWith('https://docs.example.org/share/artifacts/')).toBe(true);
    const { res, doc } = await page(url);
    expect(res.status).toBe(200);
    expect(res.headers['content-type']).toMatch(/^text\/html; charset=utf-8/);
    expect(doc.querySelector('title')!.text).toBe('Launch plan');
    expect(doc.querySelector('meta[name="viewport"]')!.getAttribute('content')).toContain(
      'width=device-width',
    );
    const article = doc.querySelector('article')!;
    expect(article.querySelector('h1')!.text).toBe('Launch plan');
    expect(article.querySelector('strong')!.text).toBe('Friday');
    expect(article.querySelector('code')!.text).toBe('v2');
    expect(article.querySelectorAll('td').map((td) => td.text.trim())).toEqual(['Test', 'Ada']);
    const checkbox = article.querySelector('li input')!;
    expect(checkbox.attributes).toEqual({ type: 'checkbox', disabled: '', checked: '' });
    const docs = article.querySelectorAll('a').find((a) => a.text === 'docs')!;
    expect(docs.getAttribute('href')).toBe('https://example.com/docs');
    expect(docs.getAttribute('rel')).toContain('noopener');
  });

  it('never lets content run script: tags escaped, handlers and javascript: URLs dropped, CSP forbids scripts', async () => {
    const { url } = await makeArtifact(CONTENT);
    const { res, doc } = await page(url);
    expect(doc.querySelectorAll('script')).toHaveLength(0);
    expect(doc.querySelectorAll('iframe')).toHaveLength(0);
    // The script tag is shown as text, not executed.
    expect(doc.querySelector('article')!.text).toContain('<script>alert("pwned")</script>');
    for (const element of doc.querySelectorAll('*')) {
      for (const [name, value] of Object.entries(element.attributes)) {
        expect(name.startsWith('on'), `${element.tagName} has ${name}`).toBe(false);
        expect(name).not.toBe('style');
        expect(value.toLowerCase()).not.toContain('javascript:');
      }
    }
    const img = doc.querySelector('article img')!;
    expect(img.getAttribute('src')).toBe('https://example.com/x.png');
    expect(doc.querySelector('article')!.text).toContain('click me');
    const csp = String(res.headers['content-security-policy']);
    expect(csp).toContain("default-src 'none'");
    expect(csp).not.toContain('script-src');
    expect(res.headers['x-content-type-options']).toBe('nosniff');
  });

  it('escapes the name in the title and heading', async () => {
    const { url } = await makeArtifact('Body text', '<b>Bold</b> & "quoted"');
    const { res, doc } = await page(url);
    expect(doc.querySelector('title')!.text).toBe('<b>Bold</b> & "quoted"');
    expect(doc.querySelector('header h1')!.text).toBe('<b>Bold</b> & "quoted"');
    expect(doc.querySelector('header b')).toBeNull();
    expect(String(res.body)).toContain('&lt;b&gt;Bold&lt;/b&gt; &amp; &quot;quoted&quot;');
  });

  it('shows nothing else of the organization', async () => {
    const { url, artifact } = await makeArtifact(CONTENT);
    const { res } = await page(url);
    const html = String(res.body);
    for (const secret of [
      'Secretive Org',
      'Project Nightingale',
      'Confidential overview',
      'Plan it.',
      'Planner',
      org.orgKey,
      'fake-model',
    ]) {
      expect(html).not.toContain(secret);
    }
    expect(html).not.toContain(JSON.stringify(artifact.chat_history[0].content));
  });

  it('reflects edits', async () => {
    const { url, artifact } = await makeArtifact('# Old title\n\nOld body');
    const edit = await call(t, 'PUT', `/api/v1/artifact_types/${slug}/artifacts/${artifact.id}`, {
      key: org.orgKey,
      body: { content: '# Old title\n\nNew *body*' },
    });
    expectStatus(edit, 200);
    const { doc } = await page(url);
    expect(doc.querySelector('article em')!.text).toBe('body');
  });

  it('answers 404 as HTML for unknown, malformed and deleted tokens', async () => {
    const { url, artifact } = await makeArtifact('# Short-lived');
    expect((await page(url)).res.status).toBe(200);
    for (const path of [
      '/share/artifacts/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA',
      '/share/artifacts/x',
      "/share/artifacts/'%20or%201=1",
    ]) {
      const res = await call(t, 'GET', path);
      expect(res.status).toBe(404);
      expect(res.headers['content-type']).toMatch(/^text\/html/);
    }
    expectStatus(
      await call(t, 'DELETE', `/api/v1/artifact_types/${slug}/artifacts/${artifact.id}`, { key: org.orgKey }),
      200,
    );
    const gone = await page(url);
    expect(gone.res.status).toBe(404);
    expect(gone.doc.querySelector('h1')!.text).toBe('Artifact not found');
    expect(String(gone.res.body)).not.toContain('Short-lived');
  });

  it('stops sharing when the organization is deactivated', async () => {
    const other = await createOrg(t);
    await useFakeModel(t, other, fake);
    const type = await createArtifactType(t, other, 'note');
    const skill = await createSkill(t, other, { name: 'N', content: 'x', typeIds: [type.id] });
    fake.enqueue({ text: '# Note' });
    const made = await call(
      t,
      'POST',
      `/api/v1/artifact_types/note/artifacts?project_id=${other.projectId}`,
      {
        key: other.orgKey,
        body: { skill_id: skill.id, inputs: [] },
      },
    );
    expectStatus(made, 201);
    expect((await page(made.body.url)).res.status).toBe(200);
    await t.deps.database.db
      .update(organizations)
      .set({ active: false })
      .where(eq(organizations.id, other.organizationId));
    expect((await page(made.body.url)).res.status).toBe(404);
  });
});
