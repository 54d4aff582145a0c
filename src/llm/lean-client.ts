import { performance } from 'node:perf_hooks';
import { StringDecoder } from 'node:string_decoder';
import { APICallError } from '@ai-sdk/provider';
import { asSchema, type ModelMessage, type Tool } from 'ai';
import type { StreamDispatcher, StreamHandler } from '../net/stream-client.js';
import {
  type CoalescingScheduler,
  defaultScheduler,
  type Flushable,
  type PausedReader,
} from '../streams/coalescer.js';
import { startModelSpan } from '../telemetry/tracing.js';
import { DEFAULT_RETRY_POLICY, type RetryPolicy, retrying } from './bounded-retries.js';

/**
 * A lean streaming client for OpenAI Chat Completions (providers `openai-compatible` and
 * `openai`), used for chat turns instead of the AI SDK's `streamText` (docs/decisions.md, "Lean
 * model client"): one undici dispatch per model call through the same guarded dispatcher as the
 * SDK providers' fetch, a small SSE parser (no web-stream transforms, no zod validation of every chunk), and
 * the tool loop written out. It keeps what the turn needs: text deltas, tool calls run with the
 * same AI SDK `Tool` objects (input validated by their schema), usage, abort, the bounded retry
 * policy with the SDK's error types (`APICallError`, `RetryError`, so failures are classified by
 * llm/provider-errors.ts as before), and a `chat <model>` span per call.
 */

/** The parts of a turn's model stream the runner reads (a subset of the AI SDK's `TextStreamPart`). */
export type TurnStreamPart =
  | { type: 'text-delta'; text: string }
  | { type: 'tool-call'; toolCallId: string; toolName: string; input: unknown }
  | {
      type: 'tool-result';
      toolCallId: string;
      toolName: string;
      input: unknown;
      output: unknown;
      preliminary?: boolean;
    }
  | { type: 'tool-error'; toolCallId: string; toolName: string; input: unknown; error: unknown }
  | {
      type: 'finish-step';
      finishReason: string;
      usage: { inputTokens: number | undefined; outputTokens: number | undefined };
    }
  | { type: 'error'; error: unknown }
  | { type: 'abort' };

export interface TurnModelStream {
  fullStream: AsyncIterable<TurnStreamPart>;
  totalUsage: PromiseLike<{ inputTokens: number | undefined; outputTokens: number | undefined }>;
  /** The lean client's first request of the turn, once sent (llm/speculative-requests.ts builds on it). */
  firstRequest?: SentRequest | null;
}

/**
 * A request's JSON payload cut after its last message: `head` + `tail` is the payload; `head` ends
 * inside the `messages` array (with `[` when it holds none), `tail` starts with its `]`.
 */
export interface SentRequest {
  model: LeanModel;
  /** The payload up to its first message after the system prompt: a new chat's request begins so. */
  base: string;
  /** Once the response came: a slice of the payload the request sent (`ModelCall.start`). */
  head: string;
  tail: string;
  /** Messages in it, the system prompt not counted. */
  count: number;
}

/**
 * A request sent before the turn knew its payload (llm/speculative-requests.ts): the turn's first
 * model call takes its response when the payload is the one it would send, and the request is
 * dropped otherwise.
 */
export interface EarlyRequest {
  /** When it was sent (`performance.now()`): the turn's model time counts from here once taken. */
  readonly sentAt: number;
  /** Whether the turn's first model call took its response. */
  readonly taken: boolean;
  /** When its body's first bytes arrived, perhaps before the turn took it; null until then. */
  readonly firstDataAt: number | null;
  take(model: LeanModel, payload: string, signal: AbortSignal): Promise<ModelResponse> | null;
  /** Aborts the request unless it was taken. */
  drop(): void;
}

/** Where and how a lean model call goes; built once per configuration (llm/model-cache.ts). */
export interface LeanModel {
  provider: string;
  model: string;
  /** `<base>/chat/completions`. */
  url: string;
  headers: Record<string, string>;
  /** The URL guard (net/model-base-url.ts): checks the URL, returns the dispatcher that checks addresses. */
  dispatcher: (url: string) => StreamDispatcher;
}

export interface LeanStreamOptions {
  system: string;
  messages: ModelMessage[];
  tools: Record<string, Tool>;
  maxSteps: number;
  signal: AbortSignal;
  retry?: RetryPolicy;
  /** Called on every chunk of bytes from the model (the idle watchdog). */
  onActivity?: () => void;
  /** Holds a busy call's text (see ModelCall); the process's shared scheduler unless given (tests). */
  scheduler?: CoalescingScheduler;
  /** Offered the first call's payload before it is sent; dropped when not taken. */
  early?: EarlyRequest | null;
}

interface WireToolCall {
  id: string;
  name: string;
  arguments: string;
}

interface WireMessage {
  role: 'system' | 'user' | 'assistant' | 'tool';
  content: string | null;
  tool_calls?: { id: string; type: 'function'; function: { name: string; arguments: string } }[];
  tool_call_id?: string;
}

/** Streams a turn: model calls and tool runs until the model stops calling tools or `maxSteps`. */
export function streamLean(model: LeanModel, options: LeanStreamOptions): TurnModelStream {
  const total = {
    inputTokens: undefined as number | undefined,
    outputTokens: undefined as number | undefined,
  };
  let settle!: (usage: typeof total) => void;
  const totalUsage = new Promise<typeof total>((resolve) => {
    settle = resolve;
  });
  const stream: TurnModelStream = { fullStream: run(), totalUsage, firstRequest: null };
  async function* run(): AsyncGenerator<TurnStreamPart> {
    try {
      const messages: WireMessage[] = [];
      if (options.system) messages.push({ role: 'system', content: options.system });
      for (const m of options.messages) messages.push(wireMessage(m));
      const tools = await wireTools(options.tools);
      for (let step = 0; step < options.maxSteps; step++) {
        if (options.signal.aborted) {
          yield { type: 'abort' };
          return;
        }
        const result: StepResult = { text: '', toolCalls: [], finishReason: 'other', usage: null };
        const call = await ModelCall.start(model, messages, tools, options, result, (sent) => {
          if (step === 0) stream.firstRequest = sent;
        });
        try {
          for (let parts = await call.next(); parts !== null; parts = await call.next())
            for (const part of parts) yield part;
          call.finish();
        } catch (err) {
          call.fail(err);
          throw err;
        } finally {
          call.close();
        }
        total.inputTokens = (total.inputTokens ?? 0) + (result.usage?.inputTokens ?? 0);
        total.outputTokens = (total.outputTokens ?? 0) + (result.usage?.outputTokens ?? 0);
        const calls = result.toolCalls;
        const parsed = calls.map((call) => parseToolCall(call, options.tools));
        for (const call of parsed)
          yield { type: 'tool-call', toolCallId: call.id, toolName: call.name, input: call.input };
        // Tools run together, as the AI SDK runs them; their results are reported in call order.
        const history: WireMessage[] = [];
        const runs = parsed.map((call) => runTool(call, options, history));
        const outputs = await Promise.all(runs);
        for (const part of outputs) yield part.part;
        yield {
          type: 'finish-step',
          finishReason: result.finishReason,
          usage: {
            inputTokens: result.usage?.inputTokens,
            outputTokens: result.usage?.outputTokens,
          },
        };
        if (calls.length === 0 || result.finishReason !== 'tool-calls') return;
        messages.push({
          role: 'assistant',
          content: result.text,
          tool_calls: calls.map((call) => ({
            id: call.id,
            type: 'function',
            function: { name: call.name, arguments: call.arguments },
          })),
        });
        for (const output of outputs)
          messages.push({ role: 'tool', tool_call_id: output.id, content: output.content });
      }
    } finally {
      options.early?.drop();
      settle(total);
    }
  }
  return stream;
}

export interface StepResult {
  text: string;
  toolCalls: WireToolCall[];
  finishReason: string;
  usage: { inputTokens: number; outputTokens: number } | null;
}

/**
 * One model call: the request (with the bounded retries), then its SSE body, handed over by the
 * dispatcher (`ModelResponse`, a dispatch handler: no body `Readable`, no `data` events) and
 * parsed as it arrives: chunk by chunk, and acted on once per socket read (`readEnded`) through
 * the service's own client, once per chunk through undici's. `next()` returns the parts of
 * everything parsed since the last call (one text delta for all of its content deltas), `null` at
 * the end. The turn's generator
 * awaits one promise per wake-up; no async iterator over the body and no generator of its own.
 *
 * When the process is busy (the coalescer's load signal, streams/coalescer.ts) a call whose first
 * text was taken does not wake its consumer for every chunk: text arriving sooner than the
 * coalescing window after the last wake-up waits, merged, for the scheduler's shared timer, the
 * one that publishes the streams' merged deltas. The turn then does per window what it did per
 * token (generator hops, the runner's loop, the coalescer). The first text, an error and the end
 * wake it at once (docs/decisions.md, "Coalescing at the source"). In a saturated process a held
 * call also stops reading its socket after the read at hand, and the scheduler restarts it within
 * 40 ms, so the model's chunks are read a few at a time rather than on every turn of the loop
 * (docs/decisions.md, "A saturated process reads a held call's socket every 40 ms").
 */
class ModelCall implements Flushable, PausedReader {
  private readonly chunks: ChunkReader;
  /** Text parsed and not taken by `next()` yet. */
  private text = '';
  /**
   * The texts of the read at hand, one per chunk, joined into one string at the read's end
   * (`fold`): text held for a window is then a string per read, not a string and a concatenation
   * per token, which outlived the young generation (bench/README.md, Session 24).
   */
  private readonly parsed: string[] = [];
  /** An error chunk parsed and not taken yet; nothing after it is parsed. */
  private error: unknown = null;
  private errored = false;
  private stopped = false;
  /** The consumer took text already: later text may wait for the window. */
  private started = false;
  /** Registered with the scheduler's timer. */
  private held = false;
  /** When the consumer last took text: the window counts from there. */
  private lastTakenAt = Number.NEGATIVE_INFINITY;
  /** Held, with its socket not read until the scheduler restarts it (`resumeReading`). */
  private readingPaused = false;
  private wake: (() => void) | null = null;

  private constructor(
    private readonly response: ModelResponse,
    private readonly span: ReturnType<typeof startModelSpan>,
    private readonly result: StepResult,
    private readonly onActivity: (() => void) | undefined,
    private readonly scheduler: CoalescingScheduler,
  ) {
    this.chunks = new ChunkReader(result, span);
    response.sink = this;
  }

  static async start(
    model: LeanModel,
    messages: WireMessage[],
    tools: unknown[] | undefined,
    options: LeanStreamOptions,
    result: StepResult,
    sending: (sent: SentRequest) => void,
  ): Promise<ModelCall> {
    // JSON.stringify of { model, messages, tools?, stream, stream_options }, in two pieces around
    // the end of `messages` (SentRequest).
    const system = messages[0]?.role === 'system' ? JSON.stringify(messages[0]) : '';
    const base = `{"model":${JSON.stringify(model.model)},"messages":[${system}`;
    const rest = (system ? messages.slice(1) : messages).map((m) => JSON.stringify(m));
    const sent: SentRequest = {
      model,
      base,
      head: `${base}${system && rest.length > 0 ? ',' : ''}${rest.join(',')}`,
      tail: `]${tools ? `,"tools":${JSON.stringify(tools)}` : ''},"stream":true,"stream_options":{"include_usage":true}}`,
      count: rest.length,
    };
    const payload = sent.head + sent.tail;
    sending(sent);
    const span = startModelSpan(model.provider, model.model, messages);
    // The first attempt may find its request sent already; retries send their own.
    let early = options.early ?? null;
    const attempt = () => {
      const taken = early?.take(model, payload, options.signal) ?? null;
      early = null;
      return taken ?? post(model, payload, options.signal);
    };
    try {
      const response = await span.run(() =>
        retrying(attempt, options.retry ?? DEFAULT_RETRY_POLICY, options.signal),
      );
      // The head the turn keeps (its next request builds on it) becomes a slice of the payload sent,
      // which the request already made one flat string: the head built here, its copy made by the
      // comparison with an early request and the strings joined for it then die young instead of
      // living through the turn (bench/README.md, Session 23: what outlives the scavenges).
      sent.head = response.payload.slice(0, sent.head.length);
      return new ModelCall(
        response,
        span,
        result,
        options.onActivity,
        options.scheduler ?? defaultScheduler(),
      );
    } catch (err) {
      span.fail(err);
      span.end();
      throw err;
    }
  }

  /** The parts of what arrived since the last call (waiting for something), `null` at the end. */
  async next(): Promise<TurnStreamPart[] | null> {
    for (;;) {
      if (this.stopped) return null;
      if (this.text || this.parsed.length > 0 || this.errored) return this.take();
      const { failure } = this.response;
      if (failure !== null) throw failure;
      if (this.response.complete) return null;
      await new Promise<void>((resolve) => {
        this.wake = resolve;
      });
    }
  }

  /** The step's end: tool calls and the span's result. */
  finish(): void {
    const { result } = this;
    result.toolCalls = this.chunks.calls.filter((c): c is WireToolCall => c !== undefined && c.name !== '');
    for (const call of result.toolCalls) call.id ||= `call_${Math.random().toString(36).slice(2, 12)}`;
    this.span.finished(result.usage, result.finishReason, result.text, result.toolCalls);
  }

  fail(err: unknown): void {
    this.span.fail(err);
  }

  /** Stops reading (a failure, an abort, or the consumer stopping): the connection is dropped. */
  close(): void {
    this.stopped = true;
    this.release();
    this.scheduler.readingResumed(this);
    this.response.close();
    this.span.end();
  }

  /** The scheduler's timer: the held text goes to the consumer now. */
  flush(): void {
    this.held = false;
    this.wakeNow();
  }

  /** The scheduler's read timer: what the model sent meanwhile is read (and held, or taken). */
  resumeReading(): void {
    if (!this.readingPaused) return;
    this.readingPaused = false;
    this.response.resume();
  }

  // ---- from ModelResponse ----

  /** A piece of the body: parsed at once; false asks the dispatcher to stop reading until `take`. */
  data(piece: string): boolean {
    this.parse(piece);
    return this.readEnded();
  }

  /**
   * A chunk of a read that may hold more, as bytes (`ModelResponse.onBody`): parsed, not yet acted
   * on, when it is a plain content chunk (`ChunkReader.contentOfBytes`); false leaves it to `parse`.
   */
  parseBytes(bytes: Buffer, start: number, end: number): boolean {
    if (this.errored || this.stopped) return true;
    const text = this.chunks.contentOfBytes(bytes, start, end);
    if (text === null) return false;
    if (text) this.parsed.push(text);
    return true;
  }

  /** A piece of a read that may hold more (`ModelResponse.onBody`): parsed, not yet acted on. */
  parse(piece: string): void {
    if (this.errored || this.stopped) return;
    const { text, error } = this.chunks.read(piece);
    if (text) this.parsed.push(text);
    if (error !== null) {
      this.error = error;
      this.errored = true;
    }
  }

  /**
   * What was parsed since the last read's end is acted on: the consumer woken (or its text held
   * for the window), reading stopped for a while. False asks the dispatcher to stop reading until
   * `take`.
   */
  readEnded(): boolean {
    this.onActivity?.();
    this.fold();
    if (this.stopped) return true;
    if (this.errored) {
      this.wakeNow();
      return true;
    }
    // Text the consumer has not taken is new to it (it waits only with none: `next`).
    if (this.text) this.textArrived();
    // A consumer that stopped taking: stop reading until it takes again rather than queue without bound.
    if (this.text.length > MAX_QUEUED_CHARS) return false;
    // Held for the window: the model's next chunks wait in the socket for a while and are read
    // together, rather than one read per token on every turn of a busy loop.
    if (
      this.held &&
      !this.readingPaused &&
      this.scheduler.pausesReads(this.scheduler.now()) &&
      this.response.stopReading()
    ) {
      this.readingPaused = true;
      this.scheduler.pauseReading(this);
    }
    return true;
  }

  /** The body's end or failure (`response.complete`, `response.failure`). */
  ended(): void {
    this.wakeNow();
  }

  private textArrived(): void {
    if (this.held || this.wake === null) return;
    const now = this.scheduler.now();
    const window = this.started ? this.scheduler.windowMs(now) : 0;
    if (window === 0 || now - this.lastTakenAt >= window) {
      this.wakeNow();
      return;
    }
    this.held = true;
    this.scheduler.hold(this, window);
  }

  private wakeNow(): void {
    this.release();
    const wake = this.wake;
    if (wake === null) return;
    this.wake = null;
    wake();
  }

  private release(): void {
    if (!this.held) return;
    this.held = false;
    this.scheduler.release(this);
  }

  /** The read's texts, one string (`parsed`). */
  private fold(): void {
    const { parsed } = this;
    if (parsed.length === 0) return;
    const read = parsed.length === 1 ? parsed[0]! : parsed.join('');
    parsed.length = 0;
    this.text = this.text ? this.text + read : read;
  }

  private take(): TurnStreamPart[] {
    this.release();
    this.fold();
    const parts: TurnStreamPart[] = [];
    const { text } = this;
    if (text) {
      this.text = '';
      this.started = true;
      this.lastTakenAt = this.scheduler.now();
      this.result.text += text;
      parts.push({ type: 'text-delta', text });
      if (this.readingPaused) {
        this.readingPaused = false;
        this.scheduler.readingResumed(this);
      }
      this.response.resume();
    }
    if (this.errored) {
      parts.push({ type: 'error', error: this.error });
      // Nothing after an error is read: the step ends there.
      this.stopped = true;
    }
    return parts;
  }
}

/**
 * The SSE lines of one model call: `read` takes what arrived, parses its complete lines (the rest
 * waits for the next read) and returns the text of their content deltas; usage, the finish
 * reason and tool-call pieces go to the step's result and `calls`. Exported for the
 * microbenchmark and the tests of the parsing itself.
 */
export class ChunkReader {
  private buffer = '';
  readonly calls: (WireToolCall | undefined)[] = [];

  constructor(
    private readonly result: StepResult,
    private readonly span: Pick<ReturnType<typeof startModelSpan>, 'fail' | 'responseModel'>,
  ) {}

  /** The learnt shape of this call's content chunks (see `contentOf`); null until one is seen. */
  private shape: ContentShape | null = null;
  /** Shapes learnt so far; a provider whose chunks differ in more than their text stops the learning. */
  private shapesLearnt = 0;
  /** The learnt shape as the bytes of one SSE event around its text (`contentOfBytes`). */
  private framed: { head: Buffer; tail: Buffer } | null = null;

  /**
   * The text of a content-only chunk read straight from the response's bytes, or null: `bytes[start,
   * end)` is one whole SSE event, `data: `, the learnt prefix, a text that needs no JSON decoding,
   * the learnt suffix and a blank line, and no line is pending. Only the text is decoded; the rest
   * of the event is compared as bytes. What `read` would make of the same bytes, else null and
   * `read` takes them (bench/README.md, Session 24).
   */
  contentOfBytes(bytes: Buffer, start: number, end: number): string | null {
    const shape = this.shape;
    if (shape === null || this.buffer !== '') return null;
    this.framed ??= { head: Buffer.from(`data: ${shape.prefix}`), tail: Buffer.from(`${shape.suffix}\n\n`) };
    const { head, tail } = this.framed;
    const bodyFrom = start + head.length;
    const bodyTo = end - tail.length;
    if (
      bodyTo < bodyFrom ||
      bytes.compare(head, 0, head.length, start, bodyFrom) !== 0 ||
      bytes.compare(tail, 0, tail.length, bodyTo, end) !== 0
    )
      return null;
    // A quote, a backslash or a control character: `read` decodes it with JSON.parse.
    for (let i = bodyFrom; i < bodyTo; i++) {
      const byte = bytes[i]!;
      if (byte === 0x22 || byte === 0x5c || byte < 0x20) return null;
    }
    if (shape.model) this.span.responseModel(shape.model);
    return bytes.toString('utf8', bodyFrom, bodyTo);
  }

  read(queued: string): { text: string; error: unknown } {
    const { result, span, calls } = this;
    const buffer = this.buffer ? this.buffer + queued : queued;
    let text = '';
    let error: unknown = null;
    let start = 0;
    for (let end = buffer.indexOf('\n'); end !== -1; end = buffer.indexOf('\n', start)) {
      // The payload's bounds within the buffer: one slice per event, not one per step.
      let from = start;
      let to = end;
      start = end + 1;
      if (!buffer.startsWith('data:', from)) continue;
      from += buffer.charCodeAt(from + 5) === 32 ? 6 : 5;
      if (to > from && buffer.charCodeAt(to - 1) === 13) to -= 1;
      const fast = this.contentOf(buffer, from, to);
      if (fast !== null) {
        if (fast.length > 0) text += fast;
        continue;
      }
      const payload = buffer.slice(from, to);
      if (payload === '[DONE]') continue;
      let chunk: any;
      try {
        chunk = JSON.parse(payload);
      } catch (err) {
        error = err;
        break;
      }
      if (chunk.error) {
        span.fail(chunk.error);
        error = chunk.error;
        break;
      }
      if (chunk.model) span.responseModel(chunk.model);
      if (chunk.usage) {
        result.usage = {
          inputTokens: chunk.usage.prompt_tokens ?? 0,
          outputTokens: chunk.usage.completion_tokens ?? 0,
        };
      }
      const choice = chunk.choices?.[0];
      if (!choice) continue;
      if (choice.finish_reason) result.finishReason = finishReasonOf(choice.finish_reason);
      const delta = choice.delta;
      if (!delta) continue;
      if (typeof delta.content === 'string' && delta.content.length > 0) {
        text += delta.content;
        if (this.shape === null || !payload.startsWith(this.shape.prefix)) this.learn(payload, chunk);
      }
      if (Array.isArray(delta.tool_calls)) {
        for (const part of delta.tool_calls) {
          const index = part.index ?? calls.length;
          let call = calls[index];
          if (!call) {
            call = { id: '', name: '', arguments: '' };
            calls[index] = call;
          }
          if (part.id) call.id = part.id;
          if (part.function?.name) call.name += part.function.name;
          if (part.function?.arguments) call.arguments += part.function.arguments;
        }
      }
    }
    this.buffer = start === buffer.length ? '' : buffer.slice(start);
    return { text, error };
  }

  /**
   * The text of a content-only chunk without parsing it, or null: the payload in
   * `buffer[from, to)` is the learnt prefix, one JSON string, the learnt suffix. The prefix and
   * suffix are those of a chunk that was parsed and checked (`learn`), so the payload is that chunk
   * with another text: what JSON.parse would find, and nothing else in it to act on but the model
   * name. Anything else (a finish reason, usage, tool calls, an error, another id) is not of this
   * shape and takes the full parse.
   */
  private contentOf(buffer: string, from: number, to: number): string | null {
    const shape = this.shape;
    if (shape === null) return null;
    const { prefix, suffix } = shape;
    const bodyFrom = from + prefix.length;
    const bodyTo = to - suffix.length;
    // Compared as slices: `===` on strings is a block compare, where optimised `startsWith` with a
    // position went char by char (several times slower in bench/parse-micro.ts).
    if (bodyTo < bodyFrom || buffer.slice(from, bodyFrom) !== prefix || buffer.slice(bodyTo, to) !== suffix)
      return null;
    const body = buffer.slice(bodyFrom, bodyTo);
    let value = body;
    // A quote, a backslash or a control character: the string is decoded by JSON.parse, which also
    // refuses a body that is not exactly one JSON string (an unescaped quote would change the shape).
    if (NEEDS_DECODING.test(body)) {
      try {
        value = JSON.parse(`"${body}"`);
      } catch {
        return null;
      }
    }
    if (shape.model) this.span.responseModel(shape.model);
    return value;
  }

  /**
   * Learns the shape of a content chunk that was just parsed: what comes before and after its
   * content string. Kept only when it is proven: the chunk with another text in that place parses
   * to the same chunk with that text as its content, and such a chunk carries nothing but text
   * (no error, usage, finish reason or tool calls).
   */
  private learn(payload: string, chunk: any): void {
    if (this.shapesLearnt >= MAX_SHAPES) return;
    this.shapesLearnt += 1;
    const at = payload.indexOf('"content":"');
    if (at === -1) return;
    const bodyFrom = at + 11;
    let bodyTo = bodyFrom;
    for (; bodyTo < payload.length; bodyTo++) {
      const c = payload.charCodeAt(bodyTo);
      if (c === 92) bodyTo += 1;
      else if (c === 34) break;
    }
    if (bodyTo >= payload.length) return;
    const prefix = payload.slice(0, bodyFrom);
    const suffix = payload.slice(bodyTo);
    const probeText = chunk.choices[0].delta.content === 'a' ? 'b' : 'a';
    let probe: any;
    try {
      probe = JSON.parse(prefix + probeText + suffix);
    } catch {
      return;
    }
    const choice = probe?.choices?.[0];
    const delta = choice?.delta;
    if (
      !delta ||
      delta.content !== probeText ||
      probe.error ||
      probe.usage ||
      choice.finish_reason ||
      Array.isArray(delta.tool_calls)
    )
      return;
    this.shape = { prefix, suffix, model: probe.model ? probe.model : null };
    this.framed = null;
  }
}

interface ContentShape {
  /** The payload up to and including the opening quote of its content string. */
  prefix: string;
  /** From the closing quote of the content string to the payload's end. */
  suffix: string;
  /** The chunk's `model`, reported to the span as the full parse does. */
  model: string | null;
}

/** A provider's chunks take at most this many shapes (the first chunk often adds `role`). */
const MAX_SHAPES = 4;

/** Characters of a JSON string body that need decoding (or make it invalid). */
// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what it looks for.
const NEEDS_DECODING = /["\\\u0000-\u001f]/;

/** Text received and not yet parsed beyond which reading pauses (see ModelCall). */
const MAX_QUEUED_CHARS = 1 << 20;
/** Body text a response holds before anyone reads it (a request sent early, not yet taken). */
const MAX_EARLY_CHARS = 16 * 1024;

/** Where a response's body goes once a call takes it over (ModelCall). */
interface BodySink {
  /** A piece, parsed and acted on; false stops reading until the sink resumes it. */
  data(piece: string): boolean;
  /** A chunk of a read that may hold more, as bytes, parsed only (false: not a plain content chunk)... */
  parseBytes(bytes: Buffer, start: number, end: number): boolean;
  /** ...or as text... */
  parse(piece: string): void;
  /** ...and then acted on, at the read's end; false as for `data`. */
  readEnded(): boolean;
  /** The body ended or failed (what was parsed is taken first, `ModelCall.next`). */
  ended(): void;
}

/**
 * One HTTP request, as an undici dispatch handler: its promise resolves when a 2xx status arrives,
 * and the body then goes, decoded, straight from undici's parser to the call (`sink`); nothing is
 * buffered here but what arrives before the call takes over. A failure before the stream starts
 * is an `APICallError`, as from the SDK.
 */
export class ModelResponse implements StreamHandler {
  /** Set once the body is done (`complete`) or failed (`failure`). */
  complete = false;
  /** When the body's first bytes arrived (`performance.now()`), perhaps before anyone read them. */
  firstDataAt: number | null = null;
  failure: unknown = null;
  private readonly decoder = new StringDecoder('utf8');
  /** The decoder may hold the first bytes of a character the last piece it had cut. */
  private decoderHolds = false;
  /** The sink parsed pieces of the read at hand (`onBody`) and has not acted on them yet. */
  private parsed = false;
  private sink_: BodySink | null = null;
  /** Body text that arrived before the sink was set (or, for an error status, the whole body). */
  private early = '';
  private status = 0;
  private headers: Record<string, string> = {};
  private abortRequest: ((err?: Error) => void) | null = null;
  private resumeRequest: (() => void) | null = null;
  private stopReadingRequest: (() => void) | null = null;
  private paused = false;
  /** The socket is not read (`stopReading`) until `resume`. */
  private readingStopped = false;
  private settled = false;
  private readonly onAbort = () => this.abort(this.signal.reason);

  constructor(
    private readonly model: LeanModel,
    /** The JSON payload sent (the errors' `requestBodyValues`, as parsed by the SDK's callers). */
    readonly payload: string,
    private readonly signal: AbortSignal,
    private readonly resolve: (response: ModelResponse) => void,
    private readonly reject: (err: unknown) => void,
  ) {
    signal.addEventListener('abort', this.onAbort, { once: true });
  }

  set sink(sink: BodySink) {
    this.sink_ = sink;
    const early = this.early;
    this.early = '';
    if (early && !sink.data(early)) this.pause();
    else this.resume();
    if (this.complete || this.failure !== null) sink.ended();
  }

  /** Reading again after `data` asked to pause, or after `stopReading`. */
  resume(): void {
    if (!this.paused && !this.readingStopped) return;
    this.paused = false;
    this.readingStopped = false;
    this.resumeRequest?.();
  }

  /**
   * Stops reading the socket once the bytes read so far are handled, until `resume`; false when the
   * dispatcher cannot (undici's: then nothing changes).
   */
  stopReading(): boolean {
    if (this.stopReadingRequest === null || this.complete || this.failure !== null) return false;
    this.readingStopped = true;
    this.stopReadingRequest();
    return true;
  }

  onReadControl(stopReading: () => void): void {
    this.stopReadingRequest = stopReading;
  }

  /** Drops the connection unless the body is done. */
  close(): void {
    this.cleanup();
    if (!this.complete && this.failure === null) this.abort(new Error('The model call was closed'));
  }

  onConnect(abort: (err?: Error) => void): void {
    this.abortRequest = abort;
    if (this.signal.aborted) abort(this.signal.reason);
  }

  onHeaders(statusCode: number, rawHeaders: (Buffer | string)[] | null, resume: () => void): boolean {
    this.status = statusCode;
    this.resumeRequest = resume;
    if (statusCode >= 200 && statusCode < 300) {
      this.settled = true;
      this.resolve(this);
      return true;
    }
    const headers: Record<string, string> = {};
    for (let i = 0; rawHeaders && i + 1 < rawHeaders.length; i += 2) {
      const name = rawHeaders[i]!.toString().toLowerCase();
      const value = rawHeaders[i + 1]!.toString();
      headers[name] = name in headers ? `${headers[name]}, ${value}` : value;
    }
    this.headers = headers;
    return true;
  }

  /** A piece of the body from undici's dispatcher (tracing on): acted on at once. */
  onData(chunk: Buffer): boolean {
    return this.deliver(this.decoder.write(chunk));
  }

  /**
   * A piece of the body from this repository's client: parsed now, acted on at its read's end
   * (`onReadEnd`), once for the several chunks a rested socket's read holds.
   */
  onBody(buffer: Buffer, start: number, end: number): boolean {
    const sink = this.sink_;
    // A plain content chunk is read from the bytes; anything else is decoded and parsed as text.
    if (sink !== null && !this.decoderHolds && sink.parseBytes(buffer, start, end)) {
      this.parsed = true;
      return true;
    }
    const piece = this.decode(buffer, start, end);
    if (sink === null) return this.deliver(piece);
    sink.parse(piece);
    this.parsed = true;
    return true;
  }

  onReadEnd(): boolean {
    if (!this.parsed || this.sink_ === null) return true;
    this.parsed = false;
    if (this.sink_.readEnded()) return true;
    this.paused = true;
    return false;
  }

  /** The bytes as text, through the decoder only when a character may be cut at either end. */
  private decode(buffer: Buffer, start: number, end: number): string {
    if (!this.decoderHolds && buffer[end - 1]! < 0x80) return buffer.toString('utf8', start, end);
    this.decoderHolds = buffer[end - 1]! >= 0x80;
    return this.decoder.write(buffer.subarray(start, end));
  }

  private deliver(piece: string): boolean {
    if (!piece) return true;
    if (this.sink_ === null) {
      this.firstDataAt ??= performance.now();
      this.early += piece;
      // A request sent early (speculative-requests.ts) may stream before its turn takes it: past a
      // few replies' worth, the model's bytes wait in the socket, not in this process's heap.
      if (this.settled && this.early.length > MAX_EARLY_CHARS) {
        this.paused = true;
        return false;
      }
      return true;
    }
    if (this.sink_.data(piece)) return true;
    this.paused = true;
    return false;
  }

  onComplete(): void {
    // Pieces parsed in the last read need no acting on: the sink's `ended` wakes the consumer.
    this.deliver(this.decoder.end());
    this.complete = true;
    this.cleanup();
    if (!this.settled) {
      this.settled = true;
      this.reject(this.statusError());
      return;
    }
    this.sink_?.ended();
  }

  onError(err: Error): void {
    this.failure ??= err;
    this.cleanup();
    if (!this.settled) {
      this.settled = true;
      if (this.signal.aborted) this.reject(this.signal.reason ?? err);
      else if (this.status !== 0) this.reject(this.statusError());
      // The SDK's wording and retryability for a connection that could not be made; the cause
      // keeps a refused address (OutboundUrlError) for llm/provider-errors.ts.
      else
        this.reject(
          new APICallError({
            message: `Cannot connect to API: ${err instanceof Error ? err.message : String(err)}`,
            url: this.model.url,
            requestBodyValues: this.requestBodyValues(),
            cause: err,
            isRetryable: true,
          }),
        );
      return;
    }
    this.sink_?.ended();
  }

  private pause(): void {
    this.paused = true;
  }

  private abort(err: unknown): void {
    const abort = this.abortRequest;
    if (abort) abort(err instanceof Error ? err : new Error(String(err)));
    else this.onError(err instanceof Error ? err : new Error(String(err)));
  }

  private cleanup(): void {
    this.signal.removeEventListener('abort', this.onAbort);
  }

  private requestBodyValues(): unknown {
    try {
      return JSON.parse(this.payload);
    } catch {
      return this.payload;
    }
  }

  private statusError(): APICallError {
    const status = this.status;
    const text = this.early;
    this.early = '';
    let message = `HTTP ${status}`;
    try {
      const parsed = JSON.parse(text);
      if (typeof parsed?.error?.message === 'string') message = parsed.error.message;
    } catch {
      // Not JSON: the status stands.
    }
    return new APICallError({
      message,
      url: this.model.url,
      requestBodyValues: this.requestBodyValues(),
      statusCode: status,
      responseHeaders: this.headers,
      responseBody: text,
      isRetryable: status === 408 || status === 409 || status === 429 || status >= 500,
    });
  }
}

/**
 * Sends one request (a JSON payload); resolves to its response once a 2xx status arrived (see
 * ModelResponse). The URL guard refuses a URL by throwing before anything is sent
 * (OutboundUrlError, not retried).
 */
export function post(model: LeanModel, payload: string, signal: AbortSignal): Promise<ModelResponse> {
  const dispatcher = model.dispatcher(model.url);
  if (signal.aborted) return Promise.reject(signal.reason);
  const url = new URL(model.url);
  return new Promise<ModelResponse>((resolve, reject) => {
    const response = new ModelResponse(model, payload, signal, resolve, reject);
    try {
      dispatcher.dispatch(
        {
          origin: url.origin,
          path: `${url.pathname}${url.search}`,
          method: 'POST',
          headers: model.headers,
          body: payload,
        },
        response,
      );
    } catch (err) {
      response.onError(err as Error);
    }
  });
}

function finishReasonOf(reason: string): string {
  switch (reason) {
    case 'stop':
      return 'stop';
    case 'length':
      return 'length';
    case 'content_filter':
      return 'content-filter';
    case 'function_call':
    case 'tool_calls':
      return 'tool-calls';
    default:
      return 'other';
  }
}

function wireMessage(message: ModelMessage): WireMessage {
  const { role, content } = message;
  if (typeof content === 'string') return { role, content } as WireMessage;
  // History is text only; a structured message keeps its text parts.
  const text = (content as { type: string; text?: string }[])
    .map((part) => (part.type === 'text' ? (part.text ?? '') : ''))
    .join('');
  return { role: role === 'tool' ? 'user' : role, content: text } as WireMessage;
}

const toolSchemas = new WeakMap<object, unknown>();

async function wireTools(tools: Record<string, Tool>): Promise<unknown[] | undefined> {
  const entries = Object.entries(tools);
  if (entries.length === 0) return undefined;
  return Promise.all(
    entries.map(async ([name, tool]) => {
      const source = tool.inputSchema as object;
      let parameters = toolSchemas.get(source);
      if (parameters === undefined) {
        parameters = await asSchema(tool.inputSchema).jsonSchema;
        toolSchemas.set(source, parameters);
      }
      return {
        type: 'function',
        function: { name, ...(tool.description ? { description: tool.description } : {}), parameters },
      };
    }),
  );
}

interface ParsedCall {
  id: string;
  name: string;
  input: unknown;
  /** Why the call cannot run (unknown tool, input that is not JSON or not valid). */
  invalid: Error | null;
}

export class InvalidToolCallError extends Error {
  override readonly name = 'InvalidToolCallError';
}

function parseToolCall(call: WireToolCall, tools: Record<string, Tool>): ParsedCall {
  const base = { id: call.id, name: call.name };
  if (!Object.hasOwn(tools, call.name))
    return {
      ...base,
      // Recorded as the model sent it: the object when its arguments are JSON, the text otherwise.
      input: parsedOrText(call.arguments),
      invalid: new InvalidToolCallError(`Model tried to call unavailable tool '${call.name}'.`),
    };
  try {
    return { ...base, input: call.arguments.trim() === '' ? {} : JSON.parse(call.arguments), invalid: null };
  } catch (err) {
    return {
      ...base,
      input: call.arguments,
      invalid: new InvalidToolCallError(
        `Invalid input for tool ${call.name}: ${err instanceof Error ? err.message : String(err)}`,
      ),
    };
  }
}

function parsedOrText(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

async function runTool(
  call: ParsedCall,
  options: LeanStreamOptions,
  messages: WireMessage[],
): Promise<{ id: string; content: string; part: TurnStreamPart }> {
  const fail = (error: unknown) => ({
    id: call.id,
    content: error instanceof Error ? error.message : JSON.stringify(error),
    part: { type: 'tool-error', toolCallId: call.id, toolName: call.name, input: call.input, error } as const,
  });
  if (call.invalid) return fail(call.invalid);
  const tool = options.tools[call.name]!;
  let input = call.input;
  const schema = asSchema(tool.inputSchema);
  if (schema.validate) {
    const checked = await schema.validate(input);
    if (!checked.success)
      return fail(new InvalidToolCallError(`Invalid input for tool ${call.name}: ${checked.error.message}`));
    input = checked.value;
  }
  if (!tool.execute) return fail(new InvalidToolCallError(`Tool ${call.name} cannot run here.`));
  try {
    const output = await tool.execute(input as never, {
      toolCallId: call.id,
      messages: messages as never,
      abortSignal: options.signal,
    });
    const modelOutput = tool.toModelOutput
      ? await tool.toModelOutput({ toolCallId: call.id, input, output } as never)
      : typeof output === 'string'
        ? { type: 'text' as const, value: output }
        : { type: 'json' as const, value: output ?? null };
    return {
      id: call.id,
      content: contentOf(modelOutput as { type: string; value: unknown }),
      part: { type: 'tool-result', toolCallId: call.id, toolName: call.name, input, output },
    };
  } catch (err) {
    if (options.signal.aborted) throw options.signal.reason ?? err;
    return fail(err);
  }
}

function contentOf(output: { type: string; value: unknown }): string {
  if (output.type === 'text' || output.type === 'error-text') return String(output.value);
  return JSON.stringify(output.value);
}
