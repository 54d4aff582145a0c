import type { LanguageModelV3, LanguageModelV3StreamPart } from '@ai-sdk/provider';
import {
  type Attributes,
  context,
  type Span,
  SpanKind,
  SpanStatusCode,
  type Tracer,
  trace,
} from '@opentelemetry/api';
import { type Tool, wrapLanguageModel } from 'ai';

/**
 * Spans of the service's own work (turns, model calls, tools, webhook attempts, jobs, document
 * steps), on the OpenTelemetry API. Tracing is on only when `start-tracing.ts` started the SDK
 * (OTEL_EXPORTER_OTLP_ENDPOINT set); otherwise every helper here calls straight through, without
 * creating even a no-op span.
 */
interface TracingState {
  enabled: boolean;
  /** OTEL_RECORD_CONTENT=true: prompts, replies, tool arguments and results go into spans. */
  recordContent: boolean;
  shutdown: () => Promise<void>;
}

// Process-wide, like the OpenTelemetry API's own global provider: set once, before the app loads.
const state: TracingState = { enabled: false, recordContent: false, shutdown: async () => {} };

export function tracingStarted(options: { recordContent: boolean; shutdown: () => Promise<void> }): void {
  state.enabled = true;
  state.recordContent = options.recordContent;
  state.shutdown = options.shutdown;
}

export { SpanKind };

export const tracingEnabled = (): boolean => state.enabled;
export const recordingContent = (): boolean => state.enabled && state.recordContent;

/** Flushes and stops the exporter (main.ts, at shutdown); nothing when tracing is off. */
export const shutdownTracing = (): Promise<void> => state.shutdown();

const tracer = (): Tracer => trace.getTracer('scriptorium');

/** Attributes a span can take later (usage, outcome); a no-op when tracing is off. */
export interface SpanHandle {
  setAttributes(attributes: Attributes): void;
}
const NO_SPAN: SpanHandle = { setAttributes: () => {} };

function failed(span: Span, err: unknown) {
  span.recordException(err instanceof Error ? err : new Error(String(err)));
  span.setStatus({ code: SpanStatusCode.ERROR, message: err instanceof Error ? err.message : String(err) });
}

/** Runs `fn` inside a span (the active one for everything it awaits); straight through when off. */
export function withSpan<T>(
  name: string,
  attributes: Attributes,
  fn: (span: SpanHandle) => Promise<T>,
  kind: SpanKind = SpanKind.INTERNAL,
  /** A root span: the start of its own trace, whatever span is active where it starts. */
  root = false,
): Promise<T> {
  if (!state.enabled) return fn(NO_SPAN);
  return tracer().startActiveSpan(name, { kind, attributes, root }, async (span) => {
    try {
      return await fn(span);
    } catch (err) {
      failed(span, err);
      throw err;
    } finally {
      span.end();
    }
  });
}

/** GenAI attributes of a model configuration (semantic conventions for generative AI). */
export const genAiModel = (provider: string, model: string): Attributes => ({
  'gen_ai.provider.name': provider,
  'gen_ai.request.model': model,
});

function usageAttributes(part: Extract<LanguageModelV3StreamPart, { type: 'finish' }>): Attributes {
  return {
    'gen_ai.usage.input_tokens': part.usage.inputTokens.total ?? 0,
    'gen_ai.usage.output_tokens': part.usage.outputTokens.total ?? 0,
    'gen_ai.response.finish_reasons': [part.finishReason.unified],
  };
}

/**
 * A model whose every call (each step of a tool loop) is a `chat {model}` span, parent of the
 * provider's HTTP request, so `traceparent` reaches the provider with the model call's span.
 */
export function traceModel(model: LanguageModelV3, provider: string, modelName: string): LanguageModelV3 {
  if (!state.enabled) return model;
  const attributes = { 'gen_ai.operation.name': 'chat', ...genAiModel(provider, modelName) };
  const start = (prompt: unknown) => {
    const span = tracer().startSpan(`chat ${modelName}`, { kind: SpanKind.CLIENT, attributes });
    if (recordingContent()) span.setAttribute('gen_ai.input.messages', JSON.stringify(prompt));
    return span;
  };
  return wrapLanguageModel({
    model,
    middleware: {
      specificationVersion: 'v3',
      wrapGenerate: async ({ doGenerate, params }) => {
        const span = start(params.prompt);
        try {
          const result = await context.with(trace.setSpan(context.active(), span), doGenerate);
          span.setAttributes(
            usageAttributes({ type: 'finish', usage: result.usage, finishReason: result.finishReason }),
          );
          return result;
        } catch (err) {
          failed(span, err);
          throw err;
        } finally {
          span.end();
        }
      },
      wrapStream: async ({ doStream, params }) => {
        const span = start(params.prompt);
        let result: Awaited<ReturnType<typeof doStream>>;
        try {
          result = await context.with(trace.setSpan(context.active(), span), doStream);
        } catch (err) {
          failed(span, err);
          span.end();
          throw err;
        }
        let text = '';
        let ended = false;
        const end = () => {
          if (ended) return;
          ended = true;
          if (text)
            span.setAttribute('gen_ai.output.messages', JSON.stringify([{ role: 'assistant', text }]));
          span.end();
        };
        const reader = result.stream.getReader();
        // A pull-through stream rather than a TransformStream: a cancelled reply (the client's
        // cancel, a shutdown) must end the span too.
        const stream = new ReadableStream<LanguageModelV3StreamPart>({
          async pull(controller) {
            try {
              const { done, value: part } = await reader.read();
              if (done) {
                end();
                controller.close();
                return;
              }
              if (part.type === 'text-delta' && recordingContent()) text += part.delta;
              else if (part.type === 'response-metadata' && part.modelId)
                span.setAttribute('gen_ai.response.model', part.modelId);
              else if (part.type === 'finish') span.setAttributes(usageAttributes(part));
              else if (part.type === 'error') failed(span, part.error);
              controller.enqueue(part);
            } catch (err) {
              failed(span, err);
              end();
              controller.error(err);
            }
          },
          cancel(reason) {
            end();
            return reader.cancel(reason);
          },
        });
        return { ...result, stream };
      },
    },
  }) as LanguageModelV3;
}

/** A `chat {model}` span of a model call made without the AI SDK (llm/lean-client.ts). */
export interface ModelSpan {
  /** Runs the request inside the span, so `traceparent` reaches the provider from it. */
  run<T>(fn: () => Promise<T>): Promise<T>;
  responseModel(model: string): void;
  finished(
    usage: { inputTokens: number; outputTokens: number } | null,
    finishReason: string,
    text: string,
    /** The step's tool calls, recorded with the text when content is recorded. */
    toolCalls?: { id: string; name: string; arguments: string }[],
  ): void;
  fail(err: unknown): void;
  end(): void;
}

const NO_MODEL_SPAN: ModelSpan = {
  run: (fn) => fn(),
  responseModel: () => {},
  finished: () => {},
  fail: () => {},
  end: () => {},
};

/** The same span `traceModel` makes for an AI SDK model call; a no-op when tracing is off. */
export function startModelSpan(provider: string, modelName: string, prompt: unknown): ModelSpan {
  if (!state.enabled) return NO_MODEL_SPAN;
  const span = tracer().startSpan(`chat ${modelName}`, {
    kind: SpanKind.CLIENT,
    attributes: { 'gen_ai.operation.name': 'chat', ...genAiModel(provider, modelName) },
  });
  if (recordingContent()) span.setAttribute('gen_ai.input.messages', JSON.stringify(prompt));
  let modelSeen = false;
  let ended = false;
  return {
    run: (fn) => context.with(trace.setSpan(context.active(), span), fn),
    responseModel(model) {
      if (modelSeen) return;
      modelSeen = true;
      span.setAttribute('gen_ai.response.model', model);
    },
    finished(usage, finishReason, text, toolCalls = []) {
      span.setAttributes({
        'gen_ai.usage.input_tokens': usage?.inputTokens ?? 0,
        'gen_ai.usage.output_tokens': usage?.outputTokens ?? 0,
        'gen_ai.response.finish_reasons': [finishReason],
      });
      if ((text || toolCalls.length > 0) && recordingContent()) {
        const calls = toolCalls.map((c) => ({ id: c.id, name: c.name, arguments: c.arguments }));
        const message = {
          role: 'assistant',
          ...(text ? { text } : {}),
          ...(calls.length ? { tool_calls: calls } : {}),
        };
        span.setAttribute('gen_ai.output.messages', JSON.stringify([message]));
      }
    },
    fail: (err) => failed(span, err),
    end() {
      if (ended) return;
      ended = true;
      span.end();
    },
  };
}

/** Each tool call an `execute_tool {name}` span: parent of what the tool calls (an MCP server). */
export function traceTools(tools: Record<string, Tool>): Record<string, Tool> {
  if (!state.enabled) return tools;
  const wrapped: Record<string, Tool> = {};
  for (const [name, tool] of Object.entries(tools)) {
    const execute = tool.execute;
    wrapped[name] = execute
      ? {
          ...tool,
          execute: (input: unknown, options: { toolCallId: string }) =>
            withSpan(
              `execute_tool ${name}`,
              {
                'gen_ai.operation.name': 'execute_tool',
                'gen_ai.tool.name': name,
                'gen_ai.tool.call.id': options.toolCallId,
                'gen_ai.tool.type': 'function',
              },
              async (span) => {
                if (recordingContent())
                  span.setAttributes({ 'gen_ai.tool.call.arguments': JSON.stringify(input) });
                const result = await execute.call(tool, input, options as never);
                if (recordingContent())
                  span.setAttributes({ 'gen_ai.tool.call.result': JSON.stringify(result) });
                return result;
              },
            ),
        }
      : tool;
  }
  return wrapped;
}

interface SqlClient {
  query(text: string, ...rest: unknown[]): Promise<unknown>;
  exec(text: string, ...rest: unknown[]): Promise<unknown>;
}

/**
 * PGlite has no instrumentation of its own (the `pg` one covers PostgreSQL): a span per statement,
 * named by its operation, with the SQL text (placeholders, never the values). Only inside a traced
 * operation, so the job queue's polling does not make a trace of its own every half second.
 */
export function tracePglite<
  C extends SqlClient & { transaction: (fn: (tx: never) => Promise<unknown>) => Promise<unknown> },
>(client: C): void {
  if (!state.enabled) return;
  const statement = <T>(text: string, run: () => Promise<T>): Promise<T> => {
    if (!trace.getActiveSpan()) return run();
    const operation = /^\s*(\w+)/.exec(text)?.[1]?.toUpperCase() ?? 'SQL';
    return withSpan(
      operation,
      {
        'db.system.name': 'postgresql',
        'db.system': 'postgresql',
        'db.operation.name': operation,
        'db.query.text': text,
        'db.namespace': 'pglite',
      },
      run,
      SpanKind.CLIENT,
    );
  };
  const wrap = (target: SqlClient) => {
    const query = target.query.bind(target);
    const exec = target.exec.bind(target);
    target.query = (text, ...rest) => statement(text, () => query(text, ...rest));
    target.exec = (text, ...rest) => statement(text, () => exec(text, ...rest));
  };
  wrap(client);
  const transaction = client.transaction.bind(client);
  client.transaction = ((fn: (tx: SqlClient) => Promise<unknown>) =>
    transaction(((tx: SqlClient) => {
      wrap(tx);
      return fn(tx);
    }) as never)) as C['transaction'];
}
