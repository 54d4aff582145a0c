/**
 * OpenTelemetry traces from a real server process (tracing must start before the application
 * loads): a streamed chat turn that calls a tool, exported over OTLP/HTTP to a receiver on
 * loopback. PGlite by default; PostgreSQL (the pg instrumentation) with TEST_BACKEND=postgres.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { BootstrapResult } from '../src/modules/bootstrap/service.js';
import { type FakeModelServer, startFakeModelServer } from './helpers/fake-model-server.js';
import { startMcpServer, type TestMcpServer } from './helpers/mcp-server.js';
import { type OtlpReceiver, type ReceivedSpan, startOtlpReceiver } from './helpers/otlp-receiver.js';
import {
  bootstrapService,
  fakeModelEnv,
  killAllProcesses,
  projectDatabase,
  request,
  type ServerProcess,
  type ServiceDatabase,
  serviceEnv,
  startServer,
  waitUntil,
} from './helpers/server-process.js';
import { readSse } from './helpers/sse.js';

const SECRET_WORDS = 'heron colony nests near the weir';

/** A service process exporting its traces to a receiver on loopback, with the fake model; one per describe. */
function useTracedService(extraEnv: Record<string, string> = {}) {
  const service = {} as {
    otlp: OtlpReceiver;
    fake: FakeModelServer;
    db: ServiceDatabase;
    boot: BootstrapResult;
    server: ServerProcess;
  };
  beforeAll(async () => {
    service.otlp = await startOtlpReceiver();
    service.fake = await startFakeModelServer();
    service.db = await projectDatabase();
    const env = serviceEnv({
      ...service.db.env,
      ...fakeModelEnv(service.fake.baseUrl),
      OTEL_EXPORTER_OTLP_ENDPOINT: service.otlp.url,
      OTEL_SERVICE_NAME: 'scriptorium-test',
      OTEL_BSP_SCHEDULE_DELAY: '100',
      ...extraEnv,
    });
    service.boot = await bootstrapService(env);
    service.server = await startServer(env);
  }, 120_000);
  afterAll(async () => {
    await service.server?.stop().catch(() => {});
    await Promise.all([service.otlp?.close(), service.fake?.close(), service.db?.drop()]);
  });
  return service;
}

afterAll(() => killAllProcesses());

describe('traces (OTLP over HTTP)', () => {
  const service = useTracedService();
  let mcp: TestMcpServer;
  let otlp: OtlpReceiver;
  let fake: FakeModelServer;
  let boot: BootstrapResult;
  let server: ServerProcess;
  beforeAll(async () => {
    ({ otlp, fake, boot, server } = service);
    mcp = await startMcpServer();
  });
  afterAll(() => mcp?.close());

  it('a streamed turn with a tool call is one trace: HTTP, turn, model, execute_tool and database spans', async () => {
    const key = boot.organization_key;
    const integration = await request(server.baseUrl, 'POST', '/api/v1/integrations', {
      key,
      body: { name: 'Desk', url: mcp.url },
    });
    expect(integration.status).toBe(201);
    const created = await request(server.baseUrl, 'POST', '/api/v2/chats', {
      key,
      body: { project_id: boot.project_id },
    });
    expect(created.status).toBe(201);
    const chatId = (created.body as any).response.chat.id;

    fake.reset();
    fake.enqueue(
      { toolCalls: [{ name: 'desk__echo', arguments: { text: SECRET_WORDS } }] },
      { text: `The desk said ${SECRET_WORDS}`, usage: { prompt_tokens: 120, completion_tokens: 9 } },
    );
    // The client's own trace: the service continues it (W3C traceparent accepted).
    const traceId = randomBytes(16).toString('hex');
    const clientSpanId = randomBytes(8).toString('hex');
    const res = await readSse(`${server.baseUrl}/api/v2/chats/${chatId}/messages`, {
      key,
      body: { content: `Tell me about the ${SECRET_WORDS}`, stream: true },
      headers: { traceparent: `00-${traceId}-${clientSpanId}-01` },
    });
    expect(res.events.map((e) => e.event)).toContain('tool_result');
    expect(res.events.at(-1)?.event).toBe('done');

    const inTrace = () => otlp.spans.filter((s) => s.traceId === traceId);
    const find = (predicate: (s: ReceivedSpan) => boolean) => inTrace().find(predicate);
    await waitUntil(
      () =>
        Boolean(
          find((s) => s.name.startsWith('invoke_agent')) &&
            find((s) => s.name.startsWith('execute_tool')) &&
            inTrace().filter((s) => s.name === 'chat fake-model').length === 2,
        ),
      { timeoutMs: 15_000, what: 'the turn spans at the receiver' },
    );
    expect(otlp.rejected).toEqual([]);
    const spans = inTrace();
    const byId = new Map(spans.map((s) => [s.spanId, s]));
    const ancestors = (span: ReceivedSpan) => {
      const chain: ReceivedSpan[] = [];
      for (let p = byId.get(span.parentSpanId); p; p = byId.get(p.parentSpanId)) chain.push(p);
      return chain;
    };

    // HTTP: the request's server span, child of the client's span.
    const http = spans.find(
      (s) =>
        s.kind === 2 &&
        String(s.attributes['url.path'] ?? s.attributes['http.target'] ?? '').includes(
          `/chats/${chatId}/messages`,
        ),
    );
    expect(http, spans.map((s) => s.name).join(', ')).toBeDefined();
    expect(http!.parentSpanId).toBe(clientSpanId);
    expect(http!.service).toBe('scriptorium-test');

    // The turn, under the HTTP span.
    const turn = find((s) => s.name === 'invoke_agent chat')!;
    expect(ancestors(turn)).toContain(http);
    expect(turn.attributes).toMatchObject({
      'gen_ai.operation.name': 'invoke_agent',
      'gen_ai.provider.name': 'openai-compatible',
      'gen_ai.request.model': 'fake-model',
      'gen_ai.conversation.id': String(chatId),
      'gen_ai.usage.input_tokens': expect.any(Number),
      'gen_ai.usage.output_tokens': expect.any(Number),
      'gen_ai.response.finish_reasons': ['tool-calls', 'stop'],
    });

    // Two model calls (the tool call, then the answer), each a GenAI `chat` span under the turn.
    const models = spans.filter((s) => s.name === 'chat fake-model');
    for (const model of models) {
      expect(model.parentSpanId).toBe(turn.spanId);
      expect(model.kind).toBe(3);
      expect(model.attributes).toMatchObject({
        'gen_ai.operation.name': 'chat',
        'gen_ai.provider.name': 'openai-compatible',
        'gen_ai.request.model': 'fake-model',
        'gen_ai.usage.input_tokens': expect.any(Number),
        'gen_ai.usage.output_tokens': expect.any(Number),
      });
    }
    expect(models.map((m) => m.attributes['gen_ai.response.finish_reasons']).sort()).toEqual([
      ['stop'],
      ['tool-calls'],
    ]);
    expect(
      models.find((m) => m.attributes['gen_ai.response.finish_reasons']?.toString() === 'stop')!.attributes,
    ).toMatchObject({
      'gen_ai.usage.input_tokens': 120,
      'gen_ai.usage.output_tokens': 9,
    });

    // The tool call.
    const tool = find((s) => s.name === 'execute_tool desk__echo')!;
    expect(tool.attributes).toMatchObject({
      'gen_ai.operation.name': 'execute_tool',
      'gen_ai.tool.name': 'desk__echo',
    });
    expect(ancestors(tool)).toContain(turn);

    // Database statements inside the trace (PGlite's spans, or the pg instrumentation's).
    const statements = spans.filter(
      (s) => s.attributes['db.system.name'] === 'postgresql' || s.attributes['db.system'] === 'postgresql',
    );
    expect(statements.length).toBeGreaterThan(0);
    expect(statements.some((s) => ancestors(s).includes(turn))).toBe(true);

    // traceparent reached the model server (on each call, from a span under the model call) and
    // the MCP server (from a span under the tool call).
    const modelCalls = fake.chatRequests();
    expect(modelCalls).toHaveLength(2);
    for (const call of modelCalls) {
      const [, trace, parent] = String(call.headers.traceparent).split('-');
      expect(trace).toBe(traceId);
      const outbound = byId.get(parent);
      expect(outbound && ancestors(outbound).some((s) => s.name === 'chat fake-model')).toBe(true);
    }
    const toolCall = mcp.requests.find((r) => JSON.stringify(r.rpc ?? '').includes('tools/call'));
    expect(String(toolCall?.headers.traceparent)).toMatch(new RegExp(`^00-${traceId}-`));

    // No message content in any span by default (OTEL_RECORD_CONTENT is unset).
    const exported = JSON.stringify(otlp.spans);
    expect(exported).not.toContain('heron');
    expect(exported).not.toContain('gen_ai.input.messages');
  }, 60_000);

  it('an artifact generation is a generate_content span with its usage and finish reasons', async () => {
    const key = boot.organization_key;
    const type = await request(server.baseUrl, 'POST', '/api/v1/artifact_types', {
      key,
      body: { name: 'Memo' },
    });
    expect(type.status, JSON.stringify(type.body)).toBe(201);
    const { id: typeId, slug } = type.body.artifact_type;
    const skill = await request(server.baseUrl, 'POST', '/api/v1/skills', {
      key,
      body: { name: 'Writer', content: 'Write a memo.', artifact_type_ids: [typeId] },
    });
    expect(skill.status, JSON.stringify(skill.body)).toBe(201);
    fake.enqueue({ text: 'A short memo.' });
    const generated = await request(
      server.baseUrl,
      'POST',
      `/api/v1/artifact_types/${slug}/artifacts?project_id=${boot.project_id}`,
      { key, body: { skill_id: skill.body.skill.id, inputs: [] } },
    );
    expect(generated.status, JSON.stringify(generated.body)).toBe(201);
    const find = () => otlp.spans.find((s) => s.name === 'generate_content fake-model');
    await waitUntil(() => Boolean(find()), { timeoutMs: 15_000, what: 'the generation span' });
    expect(find()!.attributes).toMatchObject({
      'gen_ai.operation.name': 'generate_content',
      'gen_ai.response.finish_reasons': ['stop'],
      'gen_ai.usage.input_tokens': expect.any(Number),
      'gen_ai.usage.output_tokens': expect.any(Number),
    });

    // A fire-and-forget generation runs as a job: the root of a trace of its own, not a child of
    // the request that queued it (or of whatever request woke the worker).
    fake.enqueue({ text: 'A later memo.' });
    const queued = await request(
      server.baseUrl,
      'POST',
      `/api/v1/artifact_types/${slug}/artifacts?project_id=${boot.project_id}`,
      { key, body: { skill_id: skill.body.skill.id, inputs: [], fire_and_forget: true } },
    );
    expect(queued.status, JSON.stringify(queued.body)).toBe(200);
    const job = () => otlp.spans.find((s) => s.name === 'job artifacts-async');
    await waitUntil(() => Boolean(job()), { timeoutMs: 15_000, what: 'the job span' });
    expect(job()!.parentSpanId || null).toBeNull();
    // No request served (a server span) is in the job's trace.
    expect(otlp.spans.filter((s) => s.kind === 2 && s.traceId === job()!.traceId)).toEqual([]);
  }, 60_000);
});

describe('traces with OTEL_RECORD_CONTENT=true', () => {
  const service = useTracedService({ OTEL_RECORD_CONTENT: 'true' });

  it('records each model step: the prompt, and the reply with its tool calls', async () => {
    const key = service.boot.organization_key;
    const created = await request(service.server.baseUrl, 'POST', '/api/v2/chats', {
      key,
      body: { project_id: service.boot.project_id },
    });
    const chatId = (created.body as any).response.chat.id;
    service.fake.enqueue(
      { toolCalls: [{ name: 'list_skills', arguments: {} }] },
      { text: 'There are no skills yet.' },
    );
    const res = await request(service.server.baseUrl, 'POST', `/api/v2/chats/${chatId}/messages`, {
      key,
      body: { content: 'Which skills are there?' },
    });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    const steps = () => service.otlp.spans.filter((s) => s.name === 'chat fake-model');
    await waitUntil(() => steps().length === 2, { timeoutMs: 15_000, what: 'both model spans' });
    const outputs = steps().map((s) => JSON.parse(String(s.attributes['gen_ai.output.messages'])));
    expect(outputs).toContainEqual([
      { role: 'assistant', tool_calls: [{ id: expect.any(String), name: 'list_skills', arguments: '{}' }] },
    ]);
    expect(outputs).toContainEqual([{ role: 'assistant', text: 'There are no skills yet.' }]);
    for (const step of steps())
      expect(String(step.attributes['gen_ai.input.messages'])).toContain('Which skills');
  }, 60_000);
});
