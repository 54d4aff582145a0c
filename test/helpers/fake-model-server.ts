/**
 * Real HTTP servers on 127.0.0.1 that speak the OpenAI chat completions / embeddings API and the
 * Anthropic messages API, scriptable per test. Everything goes over loopback so the real AI SDK
 * providers (request building, SSE parsing, retries, aborts) are exercised end to end.
 */
import { createHash } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import type { ModelUrlRule } from '../../src/net/model-base-url.js';

export interface ScriptedToolCall {
  id?: string;
  name: string;
  /** A string is sent verbatim (so tests can send malformed JSON); anything else is JSON-encoded. */
  arguments: unknown;
}

export interface ScriptedReply {
  /** Whole reply text; streamed word by word unless `chunks` is given. */
  text?: string;
  /** Exact text deltas to stream (their concatenation is the reply text). */
  chunks?: string[];
  toolCalls?: ScriptedToolCall[];
  /** Defaults: prompt = words in all messages, completion = words in the reply. */
  usage?: { prompt_tokens: number; completion_tokens: number };
  /** An HTTP status >= 400 answers with an error body instead of a completion. */
  status?: number;
  /** Error body (JSON value, or a string sent verbatim); defaults to the protocol's usual error shape. */
  errorBody?: unknown;
  /**
   * `retry-after-ms` header on error replies. Defaults to 1 so the SDK's retries (429/5xx) take a
   * millisecond instead of its 2 s exponential backoff; null omits the header.
   */
  retryAfterMs?: number | null;
  /** Extra response headers. */
  headers?: Record<string, string>;
  /** Delay before the first SSE event (streaming; headers are sent at once) or before the whole response. */
  firstTokenDelayMs?: number;
  /** Delay between SSE events. */
  chunkDelayMs?: number;
  /**
   * Holds the first SSE event (streaming) or the whole response until this settles, after
   * `firstTokenDelayMs`: a test that needs a turn running while it acts releases it when done,
   * instead of betting on a delay that a loaded machine can outlast.
   */
  holdUntil?: Promise<unknown>;
  /** Read the request and never answer, until the client gives up or the server closes. */
  hang?: boolean;
  /** Streaming: send this many SSE events, then destroy the socket. Non-streaming: destroy without answering. */
  failAfterChunks?: number;
}

export interface RecordedRequest {
  method: string;
  path: string;
  headers: Record<string, string | string[] | undefined>;
  body: any;
}

export type Responder = (req: RecordedRequest) => ScriptedReply;

export interface FakeModelServer {
  /** e.g. http://127.0.0.1:PORT/v1 */
  baseUrl: string;
  /** Every request received (all paths), in arrival order. */
  requests: RecordedRequest[];
  /** Replies for the chat endpoint (/v1/chat/completions or /v1/messages), consumed in order. */
  enqueue(...replies: ScriptedReply[]): void;
  /** Answers chat requests once the queue is empty; null restores the default echo reply. */
  setResponder(fn: Responder | null): void;
  /** Replies for /v1/embeddings (status, errorBody, delays, hang, failAfterChunks apply), consumed in order. */
  enqueueEmbeddings(...replies: ScriptedReply[]): void;
  /** Requests to the chat endpoint only. */
  chatRequests(): RecordedRequest[];
  /** Resolves once at least `count` requests arrived (all paths). */
  waitForRequests(count: number, timeoutMs?: number): Promise<RecordedRequest[]>;
  /** Clears queues, responder and recorded requests. */
  reset(): void;
  /** Stops listening and destroys open sockets so hanging or streaming replies cannot keep a test alive. */
  close(): Promise<void>;
}

export interface FakeModelServerOptions {
  /** Length of /v1/embeddings vectors; default 8. */
  embeddingDimensions?: number;
  /** Model id reported by /v1/models and in responses when the request names none. */
  modelId?: string;
}

type Protocol = 'openai' | 'anthropic';

interface Core {
  protocol: Protocol;
  options: Required<FakeModelServerOptions>;
  requests: RecordedRequest[];
  queue: ScriptedReply[];
  embeddingQueue: ScriptedReply[];
  responder: Responder | null;
  waiters: Set<() => void>;
  timers: Set<NodeJS.Timeout>;
  closed: boolean;
  counter: number;
}

export function startFakeModelServer(opts: FakeModelServerOptions = {}): Promise<FakeModelServer> {
  return startServer('openai', opts);
}

export function startFakeAnthropicServer(opts: FakeModelServerOptions = {}): Promise<FakeModelServer> {
  return startServer('anthropic', opts);
}

async function startServer(protocol: Protocol, opts: FakeModelServerOptions): Promise<FakeModelServer> {
  const core: Core = {
    protocol,
    options: {
      embeddingDimensions: opts.embeddingDimensions ?? 8,
      modelId: opts.modelId ?? (protocol === 'openai' ? 'fake-model' : 'claude-fake'),
    },
    requests: [],
    queue: [],
    embeddingQueue: [],
    responder: null,
    waiters: new Set(),
    timers: new Set(),
    closed: false,
    counter: 0,
  };
  const sockets = new Set<Socket>();
  const server: Server = createServer((req, res) => {
    handle(core, req, res).catch((error: unknown) => {
      if (!res.headersSent && !res.destroyed) {
        sendJson(res, 500, errorBody(core.protocol, 500, `Fake server failure: ${String(error)}`));
      } else {
        res.destroy();
      }
    });
  });
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const { port } = server.address() as AddressInfo;

  return {
    baseUrl: `http://127.0.0.1:${port}/v1`,
    requests: core.requests,
    enqueue: (...replies) => {
      core.queue.push(...replies);
    },
    setResponder: (fn) => {
      core.responder = fn;
    },
    enqueueEmbeddings: (...replies) => {
      core.embeddingQueue.push(...replies);
    },
    chatRequests: () => core.requests.filter((r) => r.path === chatPath(protocol)),
    waitForRequests: (count, timeoutMs = 5000) =>
      new Promise((resolve, reject) => {
        if (core.requests.length >= count) {
          resolve([...core.requests]);
          return;
        }
        const check = () => {
          if (core.requests.length < count) return;
          clearTimeout(timer);
          core.waiters.delete(check);
          resolve([...core.requests]);
        };
        const timer = setTimeout(() => {
          core.waiters.delete(check);
          reject(new Error(`Expected ${count} requests within ${timeoutMs} ms, got ${core.requests.length}`));
        }, timeoutMs);
        core.waiters.add(check);
      }),
    reset: () => {
      core.queue.length = 0;
      core.embeddingQueue.length = 0;
      core.responder = null;
      // In place, so a `requests` reference taken before reset() stays live.
      core.requests.length = 0;
      core.counter = 0;
    },
    close: async () => {
      core.closed = true;
      for (const timer of core.timers) clearTimeout(timer);
      core.timers.clear();
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const socket of sockets) socket.destroy();
      server.closeAllConnections();
      await closed;
    },
  };
}

function chatPath(protocol: Protocol): string {
  return protocol === 'openai' ? '/v1/chat/completions' : '/v1/messages';
}

async function handle(core: Core, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const raw = await readBody(req);
  let body: any = null;
  let invalidJson = false;
  if (raw.length > 0) {
    try {
      body = JSON.parse(raw);
    } catch {
      body = raw;
      invalidJson = true;
    }
  }
  const path = (req.url ?? '/').split('?')[0];
  const recorded: RecordedRequest = { method: req.method ?? 'GET', path, headers: { ...req.headers }, body };
  core.requests.push(recorded);
  for (const waiter of [...core.waiters]) waiter();

  if (invalidJson) {
    sendJson(res, 400, errorBody(core.protocol, 400, 'Request body is not valid JSON'));
    return;
  }
  if (req.method === 'GET' && path === '/v1/models') {
    sendJson(res, 200, modelList(core));
    return;
  }
  if (req.method === 'POST' && path === chatPath(core.protocol)) {
    const reply = core.queue.shift() ?? core.responder?.(recorded) ?? {};
    await (core.protocol === 'openai'
      ? answerChat(core, reply, body, res)
      : answerMessages(core, reply, body, res));
    return;
  }
  if (req.method === 'POST' && path === '/v1/embeddings' && core.protocol === 'openai') {
    await answerEmbeddings(core, core.embeddingQueue.shift() ?? {}, body, res);
    return;
  }
  sendJson(res, 404, errorBody(core.protocol, 404, `No route for ${req.method} ${path}`));
}

/** Handles the parts of a reply shared by every endpoint; returns true when the reply is fully dealt with. */
async function preamble(
  core: Core,
  reply: ScriptedReply,
  res: ServerResponse,
  streaming: boolean,
): Promise<boolean> {
  if (reply.hang) return true;
  if (!streaming || (reply.status ?? 200) >= 400) {
    await sleep(core, reply.firstTokenDelayMs);
    await reply.holdUntil;
  }
  if (isGone(core, res)) return true;
  if (!streaming && reply.failAfterChunks !== undefined) {
    res.destroy();
    return true;
  }
  const status = reply.status ?? 200;
  if (status >= 400) {
    const headers: Record<string, string> = { ...reply.headers };
    const retryAfterMs = reply.retryAfterMs === undefined ? 1 : reply.retryAfterMs;
    if (retryAfterMs !== null) headers['retry-after-ms'] = String(retryAfterMs);
    const bodyValue =
      reply.errorBody ?? errorBody(core.protocol, status, `Fake model server error (status ${status})`);
    if (typeof bodyValue === 'string') {
      res.writeHead(status, { 'content-type': 'text/plain', ...headers });
      res.end(bodyValue);
    } else {
      sendJson(res, status, bodyValue, headers);
    }
    return true;
  }
  return false;
}

// ---------------------------------------------------------------- OpenAI chat completions

async function answerChat(core: Core, reply: ScriptedReply, body: any, res: ServerResponse): Promise<void> {
  const streaming = body?.stream === true;
  if (await preamble(core, reply, res, streaming)) return;

  const n = ++core.counter;
  const id = `chatcmpl-fake-${n}`;
  const created = Math.floor(Date.now() / 1000);
  const model = typeof body?.model === 'string' ? body.model : core.options.modelId;
  const { text, chunks } = replyText(reply, lastOpenAIUserText(body?.messages));
  const toolCalls = (reply.toolCalls ?? []).map((call, i) => ({
    id: call.id ?? `call_fake_${n}_${i + 1}`,
    name: call.name,
    arguments: typeof call.arguments === 'string' ? call.arguments : JSON.stringify(call.arguments ?? {}),
  }));
  const usage = usageFor(reply, countOpenAIPromptWords(body), text, toolCalls);
  const finishReason = toolCalls.length > 0 ? 'tool_calls' : 'stop';

  if (!streaming) {
    sendJson(
      res,
      200,
      {
        id,
        object: 'chat.completion',
        created,
        model,
        choices: [
          {
            index: 0,
            message: {
              role: 'assistant',
              content: toolCalls.length > 0 && text === '' ? null : text,
              ...(toolCalls.length > 0 && {
                tool_calls: toolCalls.map((call) => ({
                  id: call.id,
                  type: 'function',
                  function: { name: call.name, arguments: call.arguments },
                })),
              }),
            },
            logprobs: null,
            finish_reason: finishReason,
          },
        ],
        usage: { ...usage, total_tokens: usage.prompt_tokens + usage.completion_tokens },
      },
      reply.headers,
    );
    return;
  }

  const base = { id, object: 'chat.completion.chunk', created, model, system_fingerprint: null };
  const chunk = (delta: unknown, finish: string | null = null) => ({
    ...base,
    choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
  });
  const events: unknown[] = [];
  let role: { role?: 'assistant' } = { role: 'assistant' };
  const withRole = <T extends object>(delta: T) => {
    const merged = { ...role, ...delta };
    role = {};
    return merged;
  };
  for (const piece of chunks) events.push(chunk(withRole({ content: piece })));
  toolCalls.forEach((call, index) => {
    events.push(
      chunk(
        withRole({
          tool_calls: [
            { index, id: call.id, type: 'function', function: { name: call.name, arguments: '' } },
          ],
        }),
      ),
    );
    for (const piece of splitInto(call.arguments, 3)) {
      events.push(chunk({ tool_calls: [{ index, function: { arguments: piece } }] }));
    }
  });
  if (events.length === 0) events.push(chunk(withRole({ content: '' })));
  events.push(chunk({}, finishReason));
  if (body?.stream_options?.include_usage === true) {
    events.push({
      ...base,
      choices: [],
      usage: { ...usage, total_tokens: usage.prompt_tokens + usage.completion_tokens },
    });
  }
  await streamEvents(
    core,
    reply,
    res,
    events.map((event) => `data: ${JSON.stringify(event)}\n\n`),
    'data: [DONE]\n\n',
  );
}

function lastOpenAIUserText(messages: unknown): string {
  if (!Array.isArray(messages)) return '';
  for (let i = messages.length - 1; i >= 0; i--) {
    const message = messages[i];
    if (message?.role === 'user') return contentText(message.content);
  }
  return '';
}

function countOpenAIPromptWords(body: any): number {
  if (!Array.isArray(body?.messages)) return 0;
  let total = 0;
  for (const message of body.messages) {
    total += countWords(contentText(message?.content));
    if (Array.isArray(message?.tool_calls)) {
      for (const call of message.tool_calls) total += countWords(String(call?.function?.arguments ?? ''));
    }
  }
  return total;
}

// ---------------------------------------------------------------- Anthropic messages

async function answerMessages(
  core: Core,
  reply: ScriptedReply,
  body: any,
  res: ServerResponse,
): Promise<void> {
  const streaming = body?.stream === true;
  if (await preamble(core, reply, res, streaming)) return;

  const n = ++core.counter;
  const id = `msg_fake_${n}`;
  const model = typeof body?.model === 'string' ? body.model : core.options.modelId;
  const { text, chunks } = replyText(reply, lastAnthropicUserText(body?.messages));
  const toolCalls = (reply.toolCalls ?? []).map((call, i) => ({
    id: call.id ?? `toolu_fake_${n}_${i + 1}`,
    name: call.name,
    input: typeof call.arguments === 'string' ? safeJsonParse(call.arguments) : (call.arguments ?? {}),
    json: typeof call.arguments === 'string' ? call.arguments : JSON.stringify(call.arguments ?? {}),
  }));
  const usage = usageFor(
    reply,
    countAnthropicPromptWords(body),
    text,
    toolCalls.map((call) => ({ arguments: call.json })),
  );
  const stopReason = toolCalls.length > 0 ? 'tool_use' : 'end_turn';

  if (!streaming) {
    const content: unknown[] = [];
    if (text !== '' || toolCalls.length === 0) content.push({ type: 'text', text });
    for (const call of toolCalls)
      content.push({ type: 'tool_use', id: call.id, name: call.name, input: call.input });
    sendJson(
      res,
      200,
      {
        id,
        type: 'message',
        role: 'assistant',
        model,
        content,
        stop_reason: stopReason,
        stop_sequence: null,
        usage: { input_tokens: usage.prompt_tokens, output_tokens: usage.completion_tokens },
      },
      reply.headers,
    );
    return;
  }

  const events: Array<{ type: string; [key: string]: unknown }> = [
    {
      type: 'message_start',
      message: {
        id,
        type: 'message',
        role: 'assistant',
        model,
        content: [],
        stop_reason: null,
        stop_sequence: null,
        usage: { input_tokens: usage.prompt_tokens, output_tokens: 1 },
      },
    },
  ];
  let index = 0;
  if (chunks.length > 0 || toolCalls.length === 0) {
    events.push({ type: 'content_block_start', index, content_block: { type: 'text', text: '' } });
    events.push({ type: 'ping' });
    for (const piece of chunks) {
      events.push({ type: 'content_block_delta', index, delta: { type: 'text_delta', text: piece } });
    }
    events.push({ type: 'content_block_stop', index });
    index++;
  }
  for (const call of toolCalls) {
    events.push({
      type: 'content_block_start',
      index,
      content_block: { type: 'tool_use', id: call.id, name: call.name, input: {} },
    });
    for (const piece of splitInto(call.json, 3)) {
      events.push({
        type: 'content_block_delta',
        index,
        delta: { type: 'input_json_delta', partial_json: piece },
      });
    }
    events.push({ type: 'content_block_stop', index });
    index++;
  }
  events.push({
    type: 'message_delta',
    delta: { stop_reason: stopReason, stop_sequence: null },
    usage: { output_tokens: usage.completion_tokens },
  });
  events.push({ type: 'message_stop' });
  await streamEvents(
    core,
    reply,
    res,
    events.map((event) => `event: ${event.type}\ndata: ${JSON.stringify(event)}\n\n`),
    null,
  );
}

function lastAnthropicUserText(messages: unknown): string {
  if (!Array.isArray(messages)) return '';
  for (let i = messages.length - 1; i >= 0; i--) {
    const message = messages[i];
    if (message?.role !== 'user') continue;
    // Anthropic carries tool results in user messages; those are not what the user typed.
    const text = contentText(message.content);
    if (text !== '') return text;
  }
  return '';
}

function countAnthropicPromptWords(body: any): number {
  let total = countWords(contentText(body?.system));
  if (!Array.isArray(body?.messages)) return total;
  for (const message of body.messages) {
    const content = message?.content;
    if (typeof content === 'string') {
      total += countWords(content);
      continue;
    }
    if (!Array.isArray(content)) continue;
    for (const block of content) {
      if (block?.type === 'text') total += countWords(String(block.text ?? ''));
      else if (block?.type === 'tool_use') total += countWords(JSON.stringify(block.input ?? {}));
      else if (block?.type === 'tool_result') total += countWords(contentText(block.content));
    }
  }
  return total;
}

// ---------------------------------------------------------------- embeddings and models

async function answerEmbeddings(
  core: Core,
  reply: ScriptedReply,
  body: any,
  res: ServerResponse,
): Promise<void> {
  if (await preamble(core, reply, res, false)) return;
  const inputs: string[] = Array.isArray(body?.input) ? body.input.map(String) : [String(body?.input ?? '')];
  const dimensions =
    typeof body?.dimensions === 'number' && body.dimensions > 0
      ? body.dimensions
      : core.options.embeddingDimensions;
  const tokens = inputs.reduce((total, input) => total + countWords(input), 0);
  sendJson(
    res,
    200,
    {
      object: 'list',
      data: inputs.map((input, index) => ({
        object: 'embedding',
        index,
        embedding: fakeEmbedding(input, dimensions),
      })),
      model: typeof body?.model === 'string' ? body.model : core.options.modelId,
      usage: { prompt_tokens: tokens, total_tokens: tokens },
    },
    reply.headers,
  );
}

/**
 * Signed hashed bag of words, L2-normalised: texts sharing words point in similar directions, so
 * similarity search over these vectors behaves sensibly in tests.
 */
export function fakeEmbedding(text: string, dimensions = 8): number[] {
  const vector = new Array<number>(dimensions).fill(0);
  for (const word of text.toLowerCase().match(/[\p{L}\p{N}]+/gu) ?? []) {
    const digest = createHash('sha256').update(word).digest();
    const slot = digest.readUInt32BE(0) % dimensions;
    vector[slot] += digest[4] & 1 ? -1 : 1;
  }
  const norm = Math.hypot(...vector);
  // A zero vector has no direction (cosine distance would be NaN), so wordless input gets a fixed unit vector.
  if (norm === 0) return vector.map((_, i) => (i === 0 ? 1 : 0));
  return vector.map((value) => value / norm);
}

function modelList(core: Core): unknown {
  const id = core.options.modelId;
  if (core.protocol === 'anthropic') {
    return {
      data: [{ type: 'model', id, display_name: 'Fake Claude', created_at: '2025-01-01T00:00:00Z' }],
      has_more: false,
      first_id: id,
      last_id: id,
    };
  }
  return {
    object: 'list',
    data: [
      { id, object: 'model', created: 1735689600, owned_by: 'fake' },
      { id: 'fake-embedding', object: 'model', created: 1735689600, owned_by: 'fake' },
    ],
  };
}

// ---------------------------------------------------------------- shared plumbing

function replyText(reply: ScriptedReply, lastUserText: string): { text: string; chunks: string[] } {
  if (reply.chunks) return { text: reply.chunks.join(''), chunks: reply.chunks };
  const text = reply.text ?? (reply.toolCalls ? '' : `Echo: ${lastUserText}`);
  return { text, chunks: splitWords(text) };
}

function usageFor(
  reply: ScriptedReply,
  promptWords: number,
  text: string,
  toolCalls: { arguments: string }[],
): { prompt_tokens: number; completion_tokens: number } {
  if (reply.usage)
    return { prompt_tokens: reply.usage.prompt_tokens, completion_tokens: reply.usage.completion_tokens };
  const completion =
    countWords(text) + toolCalls.reduce((total, call) => total + countWords(call.arguments), 0);
  return { prompt_tokens: promptWords, completion_tokens: completion };
}

async function streamEvents(
  core: Core,
  reply: ScriptedReply,
  res: ServerResponse,
  events: string[],
  terminator: string | null,
): Promise<void> {
  res.writeHead(200, {
    'content-type': 'text/event-stream',
    'cache-control': 'no-cache',
    connection: 'keep-alive',
    ...reply.headers,
  });
  res.flushHeaders();
  for (let i = 0; i < events.length; i++) {
    await sleep(core, i === 0 ? reply.firstTokenDelayMs : reply.chunkDelayMs);
    if (i === 0) await reply.holdUntil;
    if (isGone(core, res)) return;
    if (reply.failAfterChunks !== undefined && i >= reply.failAfterChunks) {
      await dropConnection(core, res, reply);
      return;
    }
    await new Promise<void>((resolve) => res.write(events[i], () => resolve()));
  }
  if (reply.failAfterChunks !== undefined) {
    await dropConnection(core, res, reply);
    return;
  }
  await sleep(core, reply.chunkDelayMs);
  if (isGone(core, res)) return;
  res.end(terminator ?? undefined);
}

/**
 * Web streams discard queued chunks when the source errors, so destroying the socket right after the
 * last write would make the client lose chunks it had already received; give it a moment to read them.
 */
async function dropConnection(core: Core, res: ServerResponse, reply: ScriptedReply): Promise<void> {
  await sleep(core, Math.max(reply.chunkDelayMs ?? 0, 25));
  res.destroy();
}

function errorBody(protocol: Protocol, status: number, message: string): unknown {
  if (protocol === 'anthropic') {
    const type =
      status === 429
        ? 'rate_limit_error'
        : status === 529
          ? 'overloaded_error'
          : status >= 500
            ? 'api_error'
            : status === 401
              ? 'authentication_error'
              : status === 404
                ? 'not_found_error'
                : 'invalid_request_error';
    return { type: 'error', error: { type, message } };
  }
  const type =
    status === 429 ? 'rate_limit_exceeded' : status >= 500 ? 'server_error' : 'invalid_request_error';
  return { error: { message, type, param: null, code: null } };
}

function sendJson(
  res: ServerResponse,
  status: number,
  value: unknown,
  headers: Record<string, string> = {},
): void {
  const payload = JSON.stringify(value);
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(payload),
    ...headers,
  });
  res.end(payload);
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    req.on('data', (part: Buffer) => parts.push(part));
    req.on('end', () => resolve(Buffer.concat(parts).toString('utf8')));
    req.on('error', reject);
  });
}

function isGone(core: Core, res: ServerResponse): boolean {
  return core.closed || res.destroyed || res.writableEnded;
}

function sleep(core: Core, ms: number | undefined): Promise<void> {
  if (!ms || ms <= 0 || core.closed) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      core.timers.delete(timer);
      resolve();
    }, ms);
    core.timers.add(timer);
  });
}

function contentText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return content
    .filter((part) => part?.type === 'text' && typeof part.text === 'string')
    .map((part) => part.text as string)
    .join('\n');
}

function splitWords(text: string): string[] {
  const words: string[] = text.match(/\s*\S+/g) ?? [];
  const trailing = text.slice(words.join('').length);
  if (trailing) {
    if (words.length > 0) words[words.length - 1] += trailing;
    else words.push(trailing);
  }
  return words;
}

/** Splits into up to `parts` non-empty pieces, so JSON arguments arrive over several deltas as real APIs send them. */
function splitInto(text: string, parts: number): string[] {
  if (text.length === 0) return [];
  const size = Math.ceil(text.length / parts);
  const pieces: string[] = [];
  for (let i = 0; i < text.length; i += size) pieces.push(text.slice(i, i + size));
  return pieces;
}

export function countWords(text: string): number {
  return text.split(/\s+/).filter(Boolean).length;
}

function safeJsonParse(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return {};
  }
}

/** The outbound rule of tests whose models live on this machine (fake servers on 127.0.0.1). */
export const LOOPBACK_MODELS: ModelUrlRule = {
  outboundAllowPrivate: false,
  modelBaseUrlAllow: ['127.0.0.1:*'],
};
