/**
 * Several machines: two server processes and a worker-only process on one PostgreSQL database and
 * one Redis. One turn per chat across processes, one rate-limit budget, each background job once.
 * PostgreSQL only (PGlite serves a single process).
 */

import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { BootstrapResult } from '../src/modules/bootstrap/service.js';
import { busyEventData } from './helpers/app.js';
import {
  type FakeModelServer,
  type RecordedRequest,
  startFakeModelServer,
} from './helpers/fake-model-server.js';
import { sample } from './helpers/metrics.js';
import {
  bootstrapService,
  fakeModelEnv,
  freshPostgresDatabase,
  type HttpResult,
  killAllProcesses,
  postStream,
  request,
  runCli,
  type ServerProcess,
  type ServiceDatabase,
  type ServiceProcess,
  serviceEnv,
  sleep,
  spawnService,
  startServer,
  waitUntil,
} from './helpers/server-process.js';
import { startWebhookReceiver, type WebhookReceiver } from './helpers/webhook-receiver.js';

const RATE_LIMIT = 50;
const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const runs = process.env.TEST_BACKEND === 'postgres' && Boolean(process.env.TEST_DATABASE_URL);

describe.runIf(runs)('several processes on one PostgreSQL and Redis', () => {
  let fake: FakeModelServer;
  let receiver: WebhookReceiver;
  let db: ServiceDatabase;
  let boot: BootstrapResult;
  let servers: ServerProcess[];
  let worker: ServiceProcess;

  beforeAll(async () => {
    const redis = new Redis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 0 });
    await redis.connect().then(
      () => redis.quit(),
      (err) => {
        redis.disconnect();
        throw new Error(`Redis at ${REDIS_URL} is needed by this test: ${err}`);
      },
    );
    fake = await startFakeModelServer();
    receiver = await startWebhookReceiver();
    db = await freshPostgresDatabase();
    const env = serviceEnv({
      ...db.env,
      ...fakeModelEnv(fake.baseUrl),
      REDIS_URL,
      RATE_LIMIT_PER_MINUTE: String(RATE_LIMIT),
      LOG_LEVEL: 'info',
    });

    // Two processes migrating one empty database at once: the advisory lock lets one apply them.
    const migrations = await Promise.all([runCli(['migrate'], env), runCli(['migrate'], env)]);
    expect(
      migrations.map((m) => m.code),
      migrations.map((m) => m.stderr).join('\n'),
    ).toEqual([0, 0]);
    boot = await bootstrapService(env);

    worker = spawnService('worker', 'src/cli.ts', ['worker'], env);
    servers = await Promise.all([
      startServer(env, { name: 'server-a' }),
      startServer(env, { name: 'server-b' }),
    ]);
    await worker.waitForLine((line) => line.includes('worker started'), 60_000);
  });
  afterAll(async () => {
    await killAllProcesses();
    await fake?.close();
    await receiver?.close();
    await db?.drop();
  });

  const api = (
    server: ServerProcess,
    method: string,
    path: string,
    options: { key?: string; body?: unknown } = {},
  ) =>
    request(server.baseUrl, method, path, { key: options.key ?? boot.organization_key, body: options.body });

  /** A fresh organization key: its own rate-limit budget. */
  async function newKey(): Promise<string> {
    const res = await api(servers[0], 'POST', '/api/v1/api_keys', { body: { kind: 'organization' } });
    expect(res.status, JSON.stringify(res.body)).toBe(201);
    return res.body.key;
  }

  const userTextOf = (req: RecordedRequest) =>
    JSON.stringify((req.body?.messages ?? []).filter((m: { role: string }) => m.role === 'user'));

  it('concurrent messages to one chat through both servers: exactly one turn runs, the others get 409', async () => {
    const key = await newKey();
    const [a, b] = servers;
    const chat = await api(a, 'POST', '/api/v2/chats', { key, body: { project_id: boot.project_id } });
    expect(chat.status).toBe(201);
    const chatId = chat.body.response.chat.id as number;
    const path = `/api/v2/chats/${chatId}/messages`;

    // Early model requests the servers sent and dropped (src/llm/speculative-requests.ts).
    const dropped = async () => {
      let total = 0;
      for (const server of servers) {
        const text = await (await fetch(`${server.baseUrl}/metrics`)).text();
        total += sample(text, 'scriptorium_early_model_requests_total', { outcome: 'dropped' });
      }
      return total;
    };
    for (let round = 0; round < 3; round++) {
      fake.reset();
      const droppedBefore = await dropped();
      // Each reply takes about two seconds, so every request of the round arrives while one runs,
      // even on a busy machine.
      const reply = `Reply of round ${round} to the winner, told slowly, one word at a time`;
      fake.setResponder(() => ({ text: reply, chunkDelayMs: 150 }));
      const plain = [a, b, a, b, a, b].map((server, i) =>
        api(server, 'POST', path, { key, body: { content: `Round ${round}, sender ${i}` } }),
      );
      const streamed = [a, b].map((server, i) =>
        postStream(server.baseUrl, path, key, { content: `Round ${round}, streamer ${i}`, stream: true }),
      );
      const answers: HttpResult[] = await Promise.all(plain);
      const streams = await Promise.all(streamed);

      const won =
        answers.filter((r) => r.status === 200).length +
        streams.filter((s) => s.events.at(-1)?.event === 'done').length;
      expect(won, JSON.stringify(answers.map((r) => r.status))).toBe(1);
      for (const refused of answers.filter((r) => r.status !== 200)) {
        expect(refused.status).toBe(409);
        expect(refused.body).toMatchObject({
          status: 'error',
          response: { code: 409, message: expect.any(String) },
        });
      }
      for (const stream of streams.filter((s) => s.events.at(-1)?.event !== 'done')) {
        expect(stream.events).toEqual([
          {
            event: 'error',
            data: busyEventData(chatId),
          },
        ]);
      }
      // One model call, one pair of messages added to the history. The server that ran the chat's
      // last turn may have sent a refused message's request early; it was aborted on the 409 and
      // counted (docs/decisions.md, "The model request before the turn's statement answers").
      // At most one such request per round: only that server knows the chat's next request.
      const droppedNow = (await dropped()) - droppedBefore;
      expect(droppedNow).toBeLessThanOrEqual(1);
      // (An aborted request may be cut before the fake model read all of it, and is then not recorded.)
      expect(fake.chatRequests().length).toBeGreaterThanOrEqual(1);
      expect(fake.chatRequests().length).toBeLessThanOrEqual(1 + droppedNow);
      const history = await api(b, 'GET', `${path}?page_size=100`, { key });
      expect(history.body.response.messages).toHaveLength(2 * (round + 1));
      expect(history.body.response.messages.at(-1).content).toBe(reply);
    }
    const turns = await db.query<{ status: string }>('select status from chat_turns where chat_id = $1', [
      chatId,
    ]);
    expect(turns.map((t) => t.status)).toEqual(['completed', 'completed', 'completed']);
  }, 60_000);

  it('share one rate-limit budget per key through Redis', async () => {
    const key = await newKey();
    const [a, b] = servers;
    const statuses: number[] = [];
    // Ten at a time, alternating servers: each process alone would allow the whole budget.
    for (let sent = 0; sent < RATE_LIMIT; sent += 10) {
      const batch = await Promise.all(
        Array.from({ length: 10 }, (_, i) => api(i % 2 === 0 ? a : b, 'GET', '/api/v2/chats', { key })),
      );
      statuses.push(...batch.map((r) => r.status));
    }
    expect(statuses).toEqual(Array(RATE_LIMIT).fill(200));

    for (const server of [a, b, a, b]) {
      const res = await api(server, 'GET', '/api/v2/chats', { key });
      expect(res.status).toBe(429);
      expect(Number(res.headers.get('retry-after'))).toBeGreaterThan(0);
      expect(res.body).toMatchObject({
        status: 'error',
        response: { code: 429, message: expect.any(String) },
      });
    }
    // Another key still has its own budget on both servers.
    const other = await newKey();
    expect((await api(a, 'GET', '/api/v2/chats', { key: other })).status).toBe(200);
    expect((await api(b, 'GET', '/api/v2/chats', { key: other })).status).toBe(200);
  }, 60_000);

  it('run each background job once: fire-and-forget generations and document processing', async () => {
    const [a, b] = servers;
    const type = await api(a, 'POST', '/api/v1/artifact_types', { body: { name: 'Shared memo' } });
    expect(type.status, JSON.stringify(type.body)).toBe(201);
    const skill = await api(a, 'POST', '/api/v1/skills', {
      body: {
        name: 'Shared memo writer',
        content: 'Write a memo about {custom.topic}.',
        custom_variables: [{ name: 'topic' }],
        artifact_type_ids: [type.body.artifact_type.id],
      },
    });
    expect(skill.status, JSON.stringify(skill.body)).toBe(201);
    const hook = await api(b, 'POST', `/api/v1/projects/${boot.project_id}/webhooks`, {
      body: { url: `${receiver.url}/shared`, events: ['artifact_generated'] },
    });
    expect(hook.status).toBe(201);

    const key = await newKey();
    fake.reset();
    const N = 8;
    const ids: string[] = [];
    for (let n = 0; n < N; n++) {
      const res = await api(
        n % 2 === 0 ? a : b,
        'POST',
        `/api/v1/artifact_types/${type.body.artifact_type.slug}/artifacts?project_id=${boot.project_id}`,
        {
          key,
          body: {
            skill_id: skill.body.skill.id,
            inputs: [{ name: 'topic', value: `topic-${n}` }],
            name: `Memo ${n}`,
            fire_and_forget: true,
          },
        },
      );
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      ids.push(res.body.api_async_create_event_id);
    }

    const documents: number[] = [];
    for (let n = 0; n < 6; n++) {
      const form = new FormData();
      form.append('use_default_group', 'true');
      form.append(
        'document',
        new Blob([`Shared note ${n}: the quarterly numbers, part ${n}.`], { type: 'text/plain' }),
        `note-${n}.txt`,
      );
      const res = await fetch(`${(n % 2 === 0 ? a : b).baseUrl}/api/v1/data_center/documents`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}` },
        body: form,
        signal: AbortSignal.timeout(15_000),
      });
      const body = (await res.json()) as { document: { id: number } };
      expect(res.status, JSON.stringify(body)).toBe(201);
      documents.push(body.document.id);
    }

    await receiver.waitFor(N, { timeoutMs: 40_000, match: (d) => d.path === '/shared' });
    await waitUntil(
      async () => {
        const rows = await db.query<{ n: number }>(
          `select count(*)::int as n from documents where id = any($1) and processing_status = 'completed'`,
          [documents],
        );
        return rows[0].n === documents.length;
      },
      { timeoutMs: 40_000, intervalMs: 250, what: 'every document to be processed' },
    );
    // Time for a duplicate run, if any process were to pick a job up again.
    await sleep(2000);

    // Generation: one model call per request, and one notification each.
    const calls = fake.chatRequests();
    expect(calls).toHaveLength(N);
    for (let n = 0; n < N; n++)
      expect(calls.filter((c) => userTextOf(c).includes(`topic-${n}`))).toHaveLength(1);
    const deliveries = receiver.received.filter((d) => d.path === '/shared');
    expect(deliveries).toHaveLength(N);
    expect(new Set(deliveries.map((d) => d.body.event_data.api_async_create_event_id))).toEqual(new Set(ids));
    expect(new Set(deliveries.map((d) => d.headers['webhook-id'])).size).toBe(N);
    for (const id of ids) {
      const status = await api(a, 'GET', `/api/v1/async_requests/${id}`, { key });
      expect(status.body.async_request).toMatchObject({
        status: 'generated',
        artifact_id: expect.any(Number),
      });
    }
    const artifacts = await db.query<{ n: number }>(
      'select count(*)::int as n from artifacts where project_id = $1',
      [boot.project_id],
    );
    expect(artifacts[0].n).toBe(N);

    // Documents: each processed by exactly one of the three processes.
    const processedBy = new Map<number, string[]>();
    for (const proc of [...servers, worker]) {
      for (const line of proc.lines) {
        if (!line.includes('"document processed"')) continue;
        const { documentId } = JSON.parse(line) as { documentId: number };
        processedBy.set(documentId, [...(processedBy.get(documentId) ?? []), proc.name]);
      }
    }
    for (const id of documents) expect(processedBy.get(id), `document ${id}`).toHaveLength(1);
  }, 90_000);

  it('a tool call waiting for approval in one server is decided through the other', async () => {
    const key = await newKey();
    const [a, b] = servers;
    fake.reset();
    const agent = await api(a, 'POST', '/api/v1/agents', {
      body: {
        name: 'Gated searcher',
        instructions: 'Search first.',
        tools: ['knowledge'],
        tools_requiring_approval: ['knowledge_search'],
      },
    });
    expect(agent.status, JSON.stringify(agent.body)).toBe(201);
    const chat = await api(a, 'POST', '/api/v2/chats', {
      key,
      body: { project_id: boot.project_id, agent_id: agent.body.agent.id },
    });
    const chatId = chat.body.response.chat.id as number;
    fake.enqueue(
      { toolCalls: [{ id: 'call_mp', name: 'knowledge_search', arguments: { query: 'holidays' } }] },
      { text: 'Nothing in the handbook about that.' },
    );
    // Server a runs the turn; its blocking answer comes at once, the turn waiting.
    const sent = await api(a, 'POST', `/api/v2/chats/${chatId}/messages`, {
      key,
      body: { content: 'Holidays?' },
    });
    expect(sent.status, JSON.stringify(sent.body)).toBe(200);
    expect(sent.body.response.message).toMatchObject({
      status: 'requires_action',
      pending_approvals: [{ tool_call_id: 'call_mp', tool_name: 'knowledge_search' }],
    });
    // Server b decides: server a's turn wakes (NOTIFY), runs the tool and finishes; b answers with the reply.
    const decided = await api(b, 'POST', `/api/v2/chats/${chatId}/approvals/call_mp`, {
      key,
      body: { approved: true },
    });
    expect(decided.status, JSON.stringify(decided.body)).toBe(200);
    expect(decided.body.response.message).toMatchObject({
      status: 'completed',
      content: 'Nothing in the handbook about that.',
      tool_executions: [{ tool_call_id: 'call_mp', status: 'completed', error: null }],
    });
    expect(fake.chatRequests()).toHaveLength(2);
    const rows = await db.query<{ status: string; decided_by_api_key_id: number | null }>(
      'select status, decided_by_api_key_id from tool_approvals where chat_id = $1',
      [chatId],
    );
    expect(rows).toEqual([{ status: 'approved', decided_by_api_key_id: expect.any(Number) }]);
  }, 60_000);

  it('every process stops cleanly on SIGTERM', async () => {
    worker.child.kill('SIGTERM');
    const codes = await Promise.all([...servers.map((s) => s.stop()), worker.exited.then((e) => e.code)]);
    expect(codes).toEqual([0, 0, 0]);
  }, 40_000);
});
