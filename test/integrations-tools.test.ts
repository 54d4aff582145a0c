import { stepCountIs, streamText, type Tool } from 'ai';
import { and, asc, eq, exists, or, sql } from 'drizzle-orm';
import { afterAll, afterEach, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import type { ServiceContext } from '../src/core/context.js';
import { integrationProjects, integrations, projects } from '../src/db/schema/index.js';
import { createLanguageModel } from '../src/llm/providers.js';
import { toolFamilies } from '../src/llm/tools/index.js';
import { collectTools, type ToolScope } from '../src/llm/tools/registry.js';
import { DEFAULT_MCP_POOL_OPTIONS } from '../src/mcp/client-pool.js';
import { PROVIDER_TOOL_NAME } from '../src/mcp/tool-names.js';
import { integrationsForProject } from '../src/modules/integrations/service.js';
import { buildTestApp, call, createOrg, expectStatus, type TestApp, type TestOrg } from './helpers/app.js';
import { type FakeModelServer, LOOPBACK_MODELS, startFakeModelServer } from './helpers/fake-model-server.js';
import { startMcpServer, type TestMcpServer, unusedLoopbackUrl } from './helpers/mcp-server.js';

interface LogEntry {
  level: string;
  obj: unknown;
  msg?: string;
}

/**
 * The integrations tool family as the chat turn runner and artifact generation use it:
 * `collectTools` for a scope, then `streamText` with the real openai-compatible provider against
 * the fake model server, which asks for the tool calls.
 */
describe('integrations tool family', () => {
  let t: TestApp;
  let org: TestOrg;
  let mcp: TestMcpServer;
  let model: FakeModelServer;
  let logs: LogEntry[];

  beforeAll(async () => {
    t = await buildTestApp({ OUTBOUND_ALLOW_PRIVATE: 'true' });
    org = await createOrg(t);
    mcp = await startMcpServer();
    model = await startFakeModelServer();
  });
  afterEach(async () => {
    model.reset();
    // Each test starts from fresh connections and the default timeouts.
    await t.deps.mcp.configure(DEFAULT_MCP_POOL_OPTIONS);
    for (const i of (await call(t, 'GET', '/api/v1/integrations?page_size=100', { key: org.orgKey })).body
      .integrations) {
      await call(t, 'DELETE', `/api/v1/integrations/${i.id}`, { key: org.orgKey });
    }
  });
  afterAll(async () => {
    await t?.close();
    await mcp?.close();
    await model?.close();
  });

  function scope(projectId = org.projectId): ToolScope {
    logs = [];
    const log = t.app.log;
    const record =
      (level: string) =>
      (obj: unknown, msg?: string): void => {
        logs.push({ level, obj, msg });
      };
    const ctx: ServiceContext = {
      db: t.deps.database.db,
      database: t.deps.database,
      config: t.deps.config,
      secrets: t.deps.secrets,
      models: t.deps.models,
      mcp: t.deps.mcp,
      vectors: t.deps.vectors,
      metrics: t.deps.metrics,
      requestId: null,
      principal: {
        kind: 'organization',
        keyId: 0,
        organizationId: org.organizationId,
        userId: null,
        role: 'admin',
      },
      log: Object.assign(Object.create(log), { warn: record('warn'), error: record('error') }),
    };
    return { ctx, projectId, chatId: null, agentId: null };
  }

  async function integration(body: Record<string, unknown>): Promise<{ id: number; slug: string }> {
    const res = await call(t, 'POST', '/api/v1/integrations', { key: org.orgKey, body });
    expectStatus(res, 201);
    return res.body.integration;
  }

  const languageModel = () =>
    createLanguageModel({
      provider: 'openai-compatible',
      model: 'fake',
      baseUrl: model.baseUrl,
      apiKey: null,
      outbound: LOOPBACK_MODELS,
    });

  async function run(tools: Record<string, Tool>, prompt = 'Use the tool') {
    const result = streamText({ model: languageModel(), prompt, tools, stopWhen: stepCountIs(3) });
    const parts: any[] = [];
    for await (const part of result.fullStream) parts.push(part);
    return { parts, text: await result.text };
  }

  it('integrationsForProject (one hand-written statement) returns what the Drizzle query returned', async () => {
    // The query as it was written with Drizzle, kept here as the reference.
    const drizzleRows = (organizationId: number, projectId: number) =>
      t.deps.database.db
        .select()
        .from(integrations)
        .where(
          and(
            eq(integrations.organizationId, organizationId),
            eq(integrations.enabled, true),
            or(
              eq(integrations.allProjects, true),
              exists(
                t.deps.database.db
                  .select({ one: sql`1` })
                  .from(integrationProjects)
                  .where(
                    and(
                      eq(integrationProjects.integrationId, integrations.id),
                      eq(integrationProjects.projectId, projectId),
                    ),
                  ),
              ),
            ),
          ),
        )
        .orderBy(asc(integrations.id));
    const other = await call(t, 'POST', '/api/v1/projects', {
      key: org.orgKey,
      body: { name: 'Other', use_default_group: true },
    });
    expectStatus(other, 201);
    const otherProject = other.body.project.id;
    const everywhere = await integration({
      name: 'Everywhere',
      url: mcp.url,
      headers: { 'X-Token': 'secret' },
    });
    const listed = await integration({ name: 'Listed', url: mcp.url, project_ids: [org.projectId] });
    await integration({ name: 'Elsewhere', url: mcp.url, project_ids: [otherProject] });
    await integration({ name: 'Off', url: mcp.url, enabled: false });
    // Another organization's integration on every project never shows (tenant isolation).
    const stranger = await createOrg(t);
    const foreign = await call(t, 'POST', '/api/v1/integrations', {
      key: stranger.orgKey,
      body: { name: 'Foreign', url: mcp.url },
    });
    expectStatus(foreign, 201);

    const ctx = scope().ctx;
    const mine = await integrationsForProject(ctx, org.projectId);
    expect(mine.map((row) => row.id)).toEqual([everywhere.id, listed.id]);
    expect(mine).toEqual(await drizzleRows(org.organizationId, org.projectId));
    expect(mine[0].headersEncrypted).toEqual(expect.any(String));
    expect(mine[0].headerNames).toEqual(['X-Token']);
    const theirs = await integrationsForProject(ctx, otherProject);
    expect(theirs.map((row) => row.name)).toEqual(['Everywhere', 'Elsewhere']);
    expect(theirs).toEqual(await drizzleRows(org.organizationId, otherProject));
    // Even given the other organization's project, only this organization's integrations.
    const cross = await integrationsForProject(ctx, stranger.projectId);
    expect(cross.map((row) => row.name)).toEqual(['Everywhere']);
    expect(cross).toEqual(await drizzleRows(org.organizationId, stranger.projectId));
    await call(t, 'DELETE', `/api/v1/integrations/${foreign.body.integration.id}`, { key: stranger.orgKey });
  });

  it('offers every tool of the server, namespaced, and runs a call whose result reaches the model', async () => {
    await integration({ name: 'Desk', url: mcp.url });
    const set = await collectTools(toolFamilies, ['integrations'], scope());
    expect(Object.keys(set.tools).sort()).toEqual([
      'desk__add',
      'desk__echo',
      'desk__explode',
      'desk__fail',
      'desk__hang',
    ]);
    expect(set.notes).toEqual([]);

    model.enqueue(
      { toolCalls: [{ id: 'call_1', name: 'desk__echo', arguments: { text: 'hello there' } }] },
      { text: 'The server said hello.' },
    );
    const { parts, text } = await run(set.tools);
    expect(text).toBe('The server said hello.');
    const result = parts.find((p) => p.type === 'tool-result');
    expect(result).toMatchObject({
      toolCallId: 'call_1',
      toolName: 'desk__echo',
      input: { text: 'hello there' },
      output: {
        content: [{ type: 'text', text: 'Echo: hello there' }],
        structured_content: { echoed: 'hello there', length: 11 },
      },
    });
    expect(mcp.calls.at(-1)).toEqual({ name: 'echo', args: { text: 'hello there' } });

    // What the model was offered, and what it read back.
    const [first, second] = model.chatRequests();
    const offered = first.body.tools.find((x: any) => x.function.name === 'desk__echo').function;
    expect(offered.description).toContain('Echoes the text back');
    expect(offered.parameters).toMatchObject({ type: 'object', properties: { text: { type: 'string' } } });
    expect(second.body.messages.at(-1)).toEqual({
      role: 'tool',
      tool_call_id: 'call_1',
      content: 'Echo: hello there',
    });
  });

  it('turns isError results and thrown tool errors into tool errors while the stream completes', async () => {
    await integration({ name: 'Desk', url: mcp.url });
    const set = await collectTools(toolFamilies, ['integrations'], scope());
    model.enqueue(
      {
        toolCalls: [
          { id: 'call_fail', name: 'desk__fail', arguments: {} },
          { id: 'call_explode', name: 'desk__explode', arguments: {} },
        ],
      },
      { text: 'Both tools failed.' },
    );
    const { parts, text } = await run(set.tools);
    expect(text).toBe('Both tools failed.');
    const errors = parts.filter((p) => p.type === 'tool-error');
    expect(errors.map((e) => [e.toolCallId, (e.error as Error).message])).toEqual([
      ['call_fail', 'The widget is broken'],
      ['call_explode', 'kaboom'],
    ]);
    expect(parts.filter((p) => p.type === 'tool-result')).toEqual([]);
    const followUp = model.chatRequests()[1].body.messages;
    expect(JSON.stringify(followUp)).toContain('The widget is broken');
    expect(JSON.stringify(followUp)).toContain('kaboom');
  });

  it('times out a hanging tool, cancels it on the server, and the stream completes', async () => {
    await t.deps.mcp.configure({ callTimeoutMs: 300 });
    await integration({ name: 'Desk', url: mcp.url });
    const set = await collectTools(toolFamilies, ['integrations'], scope());
    model.enqueue(
      { toolCalls: [{ id: 'call_hang', name: 'desk__hang', arguments: {} }] },
      { text: 'The tool timed out.' },
    );
    const cancelledBefore = mcp.cancelledHangs();
    const started = Date.now();
    const { parts, text } = await run(set.tools);
    expect(Date.now() - started).toBeLessThan(5000);
    expect(text).toBe('The tool timed out.');
    const error = parts.find((p) => p.type === 'tool-error');
    expect((error.error as Error).message).toBe('The tool did not answer within 300 ms');
    await expect.poll(() => mcp.cancelledHangs()).toBe(cancelledBefore + 1);
  });

  it('leaves out a server that is down, with a note and a log line, and keeps the others', async () => {
    await integration({ name: 'Offline box', url: await unusedLoopbackUrl() });
    await integration({ name: 'Desk', url: mcp.url });
    const set = await collectTools(toolFamilies, ['integrations'], scope());
    expect(Object.keys(set.tools)).toContain('desk__echo');
    expect(Object.keys(set.tools).some((n) => n.startsWith('offline-box__'))).toBe(false);
    expect(set.notes).toEqual([
      'The tool server "Offline box" is unavailable right now, so its tools cannot be used in this reply.',
    ]);
    expect(logs).toContainEqual({
      level: 'warn',
      obj: expect.objectContaining({
        integration: 'Offline box',
        reason: 'connection failed (ECONNREFUSED)',
      }),
      msg: 'tool server unavailable for this turn',
    });
    model.enqueue({ text: 'Fine without it.' });
    expect((await run(set.tools)).text).toBe('Fine without it.');
  });

  it('skips a server that just failed for a short while; the tools endpoint always tries again', async () => {
    const refusing = await startMcpServer({ requireAuthorization: 'Bearer never-given' });
    onTestFinished(() => refusing.close());
    const created = await integration({ name: 'Refusing', url: refusing.url });
    const first = await collectTools(toolFamilies, ['integrations'], scope());
    expect(first.notes).toHaveLength(1);
    const attempts = refusing.requests.length;
    expect(attempts).toBeGreaterThan(0);

    const second = await collectTools(toolFamilies, ['integrations'], scope());
    expect(second.notes).toEqual(first.notes);
    expect(refusing.requests.length).toBe(attempts);

    const res = await call(t, 'GET', `/api/v1/integrations/${created.id}/tools`, { key: org.orgKey });
    expect(res.status).toBe(502);
    expect(refusing.requests.length).toBeGreaterThan(attempts);

    await t.deps.mcp.configure({ retryDownAfterMs: 0 });
    const before = refusing.requests.length;
    await collectTools(toolFamilies, ['integrations'], scope());
    expect(refusing.requests.length).toBeGreaterThan(before);
  });

  it('offers only enabled integrations that apply to the project', async () => {
    const [otherProject] = await t.deps.database.db
      .insert(projects)
      .values({ organizationId: org.organizationId, name: 'Elsewhere' })
      .returning();
    await integration({ name: 'Everywhere', url: mcp.url });
    await integration({ name: 'Here', url: mcp.url, project_ids: [org.projectId] });
    await integration({ name: 'There', url: mcp.url, project_ids: [otherProject.id] });
    await integration({ name: 'Switched off', url: mcp.url, enabled: false });
    const prefixes = (names: string[]) => [...new Set(names.map((n) => n.split('__')[0]))].sort();

    const here = await collectTools(toolFamilies, ['integrations'], scope(org.projectId));
    expect(prefixes(Object.keys(here.tools))).toEqual(['everywhere', 'here']);
    const there = await collectTools(toolFamilies, ['integrations'], scope(otherProject.id));
    expect(prefixes(Object.keys(there.tools))).toEqual(['everywhere', 'there']);
    // Another organization's project sees none of them.
    const other = await createOrg(t);
    const foreign = scope(other.projectId);
    foreign.ctx.principal = { ...foreign.ctx.principal, organizationId: other.organizationId };
    expect(Object.keys((await collectTools(toolFamilies, ['integrations'], foreign)).tools)).toEqual([]);
  });

  it('keeps tools of same-named servers apart and every name within provider limits', async () => {
    const own = await startMcpServer();
    onTestFinished(() => own.close());
    const a = await integration({ name: 'Twin', url: own.url });
    const b = await integration({ name: 'Twin', url: own.url });
    expect([a.slug, b.slug]).toEqual(['twin', 'twin-2']);
    own.addTool('weird.name/with spaces', 'A tool with characters providers refuse');
    own.addTool(`very_${'long_'.repeat(15)}name`, 'A tool with a long name');
    const set = await collectTools(toolFamilies, ['integrations'], scope());
    const names = Object.keys(set.tools);
    expect(names).toEqual(expect.arrayContaining(['twin__echo', 'twin-2__echo']));
    expect(names.filter((n) => n.startsWith('twin__'))).toHaveLength(7);
    expect(names.filter((n) => n.startsWith('twin-2__'))).toHaveLength(7);
    for (const name of names) expect(name).toMatch(PROVIDER_TOOL_NAME);

    const weird = names.find((n) => n.startsWith('twin-2__weird_name_with_spaces_'))!;
    model.enqueue({ toolCalls: [{ id: 'call_w', name: weird, arguments: { value: 'v' } }] }, { text: 'ok' });
    const { parts } = await run(set.tools);
    expect(parts.find((p) => p.type === 'tool-result').output.content).toEqual([
      { type: 'text', text: 'weird.name/with spaces: v' },
    ]);
  });

  it('reuses the tool list within its TTL and refreshes it on tools/list_changed', async () => {
    const own = await startMcpServer();
    onTestFinished(() => own.close());
    await integration({ name: 'Cached', url: own.url });
    await collectTools(toolFamilies, ['integrations'], scope());
    const listed = own.listCount();
    const again = await collectTools(toolFamilies, ['integrations'], scope());
    expect(own.listCount()).toBe(listed);
    expect(Object.keys(again.tools)).not.toContain('cached__late_arrival');

    own.addTool('late_arrival', 'Registered after the client connected');
    await expect
      .poll(async () => Object.keys((await collectTools(toolFamilies, ['integrations'], scope())).tools))
      .toContain('cached__late_arrival');
    expect(own.listCount()).toBeGreaterThan(listed);
  });

  it('lists again once the TTL has passed', async () => {
    await t.deps.mcp.configure({ toolsTtlMs: 0 });
    await integration({ name: 'Fresh', url: mcp.url });
    await collectTools(toolFamilies, ['integrations'], scope());
    const listed = mcp.listCount();
    await collectTools(toolFamilies, ['integrations'], scope());
    expect(mcp.listCount()).toBe(listed + 1);
  });

  it('reconnects after an edit, sending the new headers', async () => {
    const guarded = await startMcpServer({ requireAuthorization: 'Bearer right' });
    try {
      const created = await integration({
        name: 'Guarded',
        url: guarded.url,
        headers: { Authorization: 'Bearer wrong' },
      });
      const before = await collectTools(toolFamilies, ['integrations'], scope());
      expect(before.notes).toHaveLength(1);
      const updated = await call(t, 'PUT', `/api/v1/integrations/${created.id}`, {
        key: org.orgKey,
        body: { headers: { Authorization: 'Bearer right' } },
      });
      expectStatus(updated, 200);
      const after = await collectTools(toolFamilies, ['integrations'], scope());
      expect(after.notes).toEqual([]);
      model.enqueue(
        { toolCalls: [{ id: 'c', name: 'guarded__add', arguments: { a: 2, b: 3 } }] },
        { text: 'five' },
      );
      const { parts } = await run(after.tools);
      expect(parts.find((p) => p.type === 'tool-result').output.content).toEqual([
        { type: 'text', text: '5' },
      ]);
      expect(guarded.requests.at(-1)?.headers.authorization).toBe('Bearer right');
    } finally {
      await guarded.close();
    }
  });

  it('calls tools of an older HTTP+SSE server', async () => {
    const old = await startMcpServer({ transport: 'sse' });
    try {
      await integration({ name: 'Legacy', url: old.url });
      const set = await collectTools(toolFamilies, ['integrations'], scope());
      model.enqueue(
        { toolCalls: [{ id: 'c', name: 'legacy__echo', arguments: { text: 'old school' } }] },
        { text: 'done' },
      );
      const { parts } = await run(set.tools);
      expect(parts.find((p) => p.type === 'tool-result').output.structured_content).toEqual({
        echoed: 'old school',
        length: 10,
      });
    } finally {
      await old.close();
    }
  });

  it('reconnects when the server forgot the session (it restarted)', async () => {
    const created = await integration({ name: 'Restarting', url: mcp.url });
    await collectTools(toolFamilies, ['integrations'], scope());
    const initializations = () => mcp.requests.filter((r) => r.rpc.includes('initialize')).length;
    const before = initializations();
    // Closing every server session makes the next request with the old session id a 404.
    await mcp.dropSessions();
    // The tool list still comes from the cache; the call meets the 404 and reconnects once.
    const set = await collectTools(toolFamilies, ['integrations'], scope());
    model.enqueue(
      { toolCalls: [{ id: 'c', name: 'restarting__add', arguments: { a: 1, b: 1 } }] },
      { text: 'two' },
    );
    const { parts } = await run(set.tools);
    expect(parts.find((p) => p.type === 'tool-result')?.output.content).toEqual([
      { type: 'text', text: '2' },
    ]);
    expect(initializations()).toBe(before + 1);
    expect(await t.deps.mcp.transportOf(created.id)).toBe('streamable-http');
  });
});
