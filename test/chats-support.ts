/** Shared set-up of the chat tests: an app with chosen tool families, model rows, SSE over real HTTP. */
import { tool } from 'ai';
import { eq } from 'drizzle-orm';
import type { FastifyInstance } from 'fastify';
import { expect } from 'vitest';
import { z } from 'zod';
import { buildApp } from '../src/app.js';
import type { Config } from '../src/config.js';
import { modelConfigurations, organizations } from '../src/db/schema/index.js';
import type { ToolFamilies, ToolScope } from '../src/llm/tools/registry.js';
import type { RootOptions } from '../src/root.js';
import {
  call,
  createOrg,
  createTestRoot,
  expectStatus,
  startTestServer,
  type TestApp,
  type TestOrg,
} from './helpers/app.js';
import { readSse } from './helpers/sse.js';

export interface ChatTestApp extends TestApp {
  /** Closes the chat app and, when it owns them, the base app and database. */
  close(): Promise<void>;
}

/** What a chat test sets on the composition root: tool families (none by default), turn and hub timings. */
export type ChatRootOptions = Pick<RootOptions, 'toolFamilies' | 'turnSettings' | 'streamHub'>;

/** The real app with the test's root options (tool families, turn timings), listening on loopback. */
export async function startChatApp(
  options: { env?: Record<string, string>; deps?: ChatRootOptions } = {},
): Promise<ChatTestApp> {
  return startTestServer(options.env ?? {}, undefined, { toolFamilies: {}, ...options.deps });
}

/**
 * A second app on the same database, with its own root (stream hub, turn runner, pools) as a second
 * process would have; it shares the first one's job queue. Closing the app closes its root.
 */
export async function startSibling(
  t: TestApp,
  options: Omit<RootOptions, 'jobs' | 'secrets' | 'log'> & { config?: Config } = {},
): Promise<{ app: FastifyInstance; baseUrl: string; api: TestApp }> {
  const { config = t.deps.config, database = t.deps.database, ...rest } = options;
  const root = await createTestRoot(config, {
    toolFamilies: {},
    ...rest,
    database,
    jobs: t.deps.jobs,
  });
  const app = await buildApp(root, { logger: false });
  app.addHook('onClose', () => root.close());
  const baseUrl = await app.listen({ port: 0, host: '127.0.0.1' });
  return { app, baseUrl, api: { ...t, app, baseUrl, deps: root } };
}

/** A model configuration row pointing at a test model server (the management API is another module's). */
export async function addModel(
  t: TestApp,
  organizationId: number,
  options: {
    baseUrl: string;
    model?: string;
    provider?: 'openai-compatible' | 'anthropic';
    input?: number;
    output?: number;
    makeDefault?: boolean;
  },
): Promise<number> {
  const [row] = await t.deps.database.db
    .insert(modelConfigurations)
    .values({
      organizationId,
      name: `Test ${options.model ?? 'fake-model'}`,
      provider: options.provider ?? 'openai-compatible',
      model: options.model ?? 'fake-model',
      baseUrl: options.baseUrl,
      creditsPer1kInputTokens: options.input ?? 0,
      creditsPer1kOutputTokens: options.output ?? 0,
    })
    .returning({ id: modelConfigurations.id });
  if (options.makeDefault) {
    await t.deps.database.db
      .update(organizations)
      .set({ defaultModelConfigurationId: row.id })
      .where(eq(organizations.id, organizationId));
  }
  return row.id;
}

export async function balanceOf(t: TestApp, organizationId: number): Promise<number> {
  const [row] = await t.deps.database.db
    .select({ balance: organizations.creditBalance })
    .from(organizations)
    .where(eq(organizations.id, organizationId));
  return Number(row.balance);
}

export interface SseEvent {
  event: string;
  data: any;
}

export interface SseResponse {
  status: number;
  headers: Headers;
  /** Raw text, for asserting the wire format. */
  text: string;
  events: SseEvent[];
  /** A JSON body when the answer was not a stream (request-check refusals). */
  body: any;
}

/** A streaming POST over real HTTP (`readSse`); `until` disconnects once it returns true. */
export async function postStream(
  baseUrl: string,
  path: string,
  key: string,
  body: unknown,
  options: { until?: (events: SseEvent[]) => boolean } = {},
): Promise<SseResponse> {
  const read = await readSse(`${baseUrl}${path}`, { key, body, until: options.until });
  return { ...read, events: read.events.map(({ event, data }) => ({ event, data })) };
}

export const eventNames = (events: SseEvent[]) => events.map((e) => e.event);

/**
 * Event names with each run of `content` events shown once: text deltas that arrive while the
 * process is busy are merged into one event (adaptive coalescing, issue 14), so how many content
 * events a reply makes depends on timing; their order against other events does not.
 */
export const eventKinds = (events: SseEvent[]) =>
  eventNames(events).filter((name, i, all) => name !== 'content' || all[i - 1] !== 'content');
export const streamedText = (events: SseEvent[]) =>
  events
    .filter((e) => e.event === 'content')
    .map((e) => e.data.content as string)
    .join('');

/** Polls until `check` passes (detached turns finish after the response). */
export async function eventually<T>(check: () => Promise<T>, timeoutMs = 5000): Promise<T> {
  const started = Date.now();
  for (;;) {
    try {
      return await check();
    } catch (err) {
      if (Date.now() - started > timeoutMs) throw err;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }
}

export interface RecordedToolCall {
  query: string;
  scope: Pick<ToolScope, 'projectId' | 'chatId' | 'agentId'>;
}

/**
 * A `knowledge` family with the tool the built-in model uses (`knowledge_search`): passages about
 * the handbook, and a failure for the query `explode`.
 */
export function testKnowledgeFamily(calls: RecordedToolCall[] = []): ToolFamilies {
  return {
    knowledge: async (scope) => ({
      tools: {
        knowledge_search: tool({
          description: 'Search the project knowledge base',
          inputSchema: z.object({ query: z.string() }),
          execute: async ({ query }) => {
            calls.push({
              query,
              scope: { projectId: scope.projectId, chatId: scope.chatId, agentId: scope.agentId },
            });
            if (query.includes('explode')) throw new Error('The search index is offline');
            return {
              passages: [
                {
                  document_id: 7,
                  document_name: 'Handbook.pdf',
                  position: 0,
                  score: 0.9,
                  text: 'Holidays are requested through the HR portal.',
                },
              ],
            };
          },
        }),
      },
      notes: ['The knowledge base holds the company handbook.'],
    }),
  };
}

/**
 * The spec's Message fields, plus `status`; assistant messages add `usage` (issue 9), and a freshly
 * produced reply (the `done` event, the blocking answer) its `timing` (issue 19), whose parts add up.
 */
export function expectMessageShape(
  message: any,
  role: 'user' | 'assistant',
  { status = 'completed', fresh = false }: { status?: string; fresh?: boolean } = {},
) {
  if (fresh) expectTiming(message.timing);
  expect(message).toEqual({
    id: expect.any(Number),
    role,
    content: expect.any(String),
    model: role === 'user' ? null : expect.any(String),
    created_at: expect.stringMatching(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/),
    tool_executions: expect.any(Array),
    status,
    ...(role === 'assistant'
      ? {
          usage: {
            input_tokens: expect.any(Number),
            output_tokens: expect.any(Number),
            credits: expect.any(Number),
          },
        }
      : {}),
    ...(fresh ? { timing: expect.any(Object) } : {}),
    // Issue 18: every message carries its citations (`[]` without).
    citations: expect.any(Array),
    attachments: expect.any(Array),
  });
}

/** A reply's `timing`: every part present, none negative, and the parts within the whole. */
export function expectTiming(timing: any) {
  expect(timing).toEqual({
    queued_ms: expect.any(Number),
    overhead_ms: expect.any(Number),
    model_first_token_ms: expect.any(Number),
    total_ms: expect.any(Number),
  });
  expect(timing.queued_ms).toBeGreaterThanOrEqual(0);
  expect(timing.model_first_token_ms).toBeGreaterThanOrEqual(0);
  // Not queued <= overhead: a request sent early (llm/speculative-requests.ts) leaves while the
  // turn is still being written, so the model's time overlaps the queue.
  expect(timing.queued_ms).toBeLessThanOrEqual(timing.total_ms);
  expect(timing.overhead_ms).toBeLessThanOrEqual(timing.total_ms);
  expect(timing.overhead_ms + timing.model_first_token_ms).toBeLessThanOrEqual(timing.total_ms + 0.1);
}

/** A fresh reply as history shows it later: the same message without its `timing`. */
export function asInHistory(message: any) {
  const { timing: _timing, ...rest } = message;
  return rest;
}

/** A fresh organization whose default model is the fake model server at `baseUrl`. */
export async function orgWithModelAt(t: TestApp, baseUrl: string): Promise<TestOrg> {
  const org = await createOrg(t);
  await addModel(t, org.organizationId, { baseUrl, model: 'local-llama', makeDefault: true });
  return org;
}

/** A new empty chat in the organization's project, owned by its organization key. */
export async function emptyChat(t: TestApp, org: TestOrg): Promise<number> {
  const res = await call(t, 'POST', '/api/v2/chats', {
    key: org.orgKey,
    body: { project_id: org.projectId },
  });
  expectStatus(res, 201);
  return res.body.response.chat.id;
}
