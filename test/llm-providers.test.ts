import { APICallError } from '@ai-sdk/provider';
import {
  cosineSimilarity,
  embed,
  embedMany,
  generateText,
  NoOutputGeneratedError,
  RetryError,
  stepCountIs,
  streamText,
  tool,
} from 'ai';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { BuiltinLanguageModel } from '../src/llm/builtin-model.js';
import {
  createEmbeddingModel,
  createLanguageModel,
  type ModelSettings,
  ProviderConfigurationError,
} from '../src/llm/providers.js';
import {
  type FakeModelServer,
  fakeEmbedding,
  LOOPBACK_MODELS,
  startFakeAnthropicServer,
  startFakeModelServer,
} from './helpers/fake-model-server.js';

const weatherTool = (calls: unknown[]) =>
  tool({
    description: 'Current weather for a city',
    inputSchema: z.object({ city: z.string() }),
    execute: async ({ city }) => {
      calls.push({ city });
      return { city, forecast: 'sunny', celsius: 21 };
    },
  });

async function collect<T>(stream: AsyncIterable<T>): Promise<T[]> {
  const items: T[] = [];
  for await (const item of stream) items.push(item);
  return items;
}

describe('openai-compatible provider', () => {
  let server: FakeModelServer;
  let settings: ModelSettings;

  beforeAll(async () => {
    server = await startFakeModelServer();
    settings = {
      provider: 'openai-compatible',
      model: 'local-llama',
      baseUrl: server.baseUrl,
      apiKey: 'sk-local',
      outbound: LOOPBACK_MODELS,
    };
  });
  afterEach(() => server.reset());
  afterAll(() => server.close());

  it('streams text deltas and reports the usage the server sent', async () => {
    server.enqueue({
      chunks: ['Hello', ', ', 'world', '!'],
      usage: { prompt_tokens: 11, completion_tokens: 4 },
    });
    const result = streamText({ model: createLanguageModel(settings), prompt: 'Say hello' });

    const deltas = await collect(result.textStream);
    expect(deltas).toEqual(['Hello', ', ', 'world', '!']);
    expect(await result.text).toBe('Hello, world!');
    const usage = await result.usage;
    expect(usage.inputTokens).toBe(11);
    expect(usage.outputTokens).toBe(4);
    expect(usage.totalTokens).toBe(15);
    expect(await result.finishReason).toBe('stop');

    expect(server.requests).toHaveLength(1);
    const [request] = server.requests;
    expect(request.path).toBe('/v1/chat/completions');
    expect(request.headers.authorization).toBe('Bearer sk-local');
    expect(request.body.model).toBe('local-llama');
    expect(request.body.stream).toBe(true);
    expect(request.body.stream_options).toEqual({ include_usage: true });
    expect(request.body.messages).toEqual([{ role: 'user', content: 'Say hello' }]);
  });

  it('answers non-streaming calls with the default echo and word-count usage', async () => {
    const result = await generateText({
      model: createLanguageModel({ ...settings, apiKey: null, outbound: LOOPBACK_MODELS }),
      system: 'Be brief.',
      prompt: 'ping the server please',
    });
    expect(result.text).toBe('Echo: ping the server please');
    // prompt: "Be brief." (2) + "ping the server please" (4); completion: 5 words.
    expect(result.usage.inputTokens).toBe(6);
    expect(result.usage.outputTokens).toBe(5);
    expect(server.requests[0].body.stream).toBeUndefined();
    expect(server.requests[0].headers.authorization).toBeUndefined();
  });

  it('runs a tool call round trip and sends the tool result back', async () => {
    server.enqueue(
      {
        toolCalls: [{ id: 'call_weather_1', name: 'get_weather', arguments: { city: 'Paris' } }],
        usage: { prompt_tokens: 20, completion_tokens: 7 },
      },
      { text: 'It is sunny in Paris.', usage: { prompt_tokens: 40, completion_tokens: 6 } },
    );
    const calls: unknown[] = [];
    const result = streamText({
      model: createLanguageModel(settings),
      prompt: 'Weather in Paris?',
      tools: { get_weather: weatherTool(calls) },
      stopWhen: stepCountIs(3),
    });

    expect(await result.text).toBe('It is sunny in Paris.');
    expect(calls).toEqual([{ city: 'Paris' }]);
    const steps = await result.steps;
    expect(steps).toHaveLength(2);
    expect(steps[0].finishReason).toBe('tool-calls');
    expect(steps[0].toolCalls.map((c) => [c.toolCallId, c.toolName, c.input])).toEqual([
      ['call_weather_1', 'get_weather', { city: 'Paris' }],
    ]);
    const total = await result.totalUsage;
    expect(total.inputTokens).toBe(60);
    expect(total.outputTokens).toBe(13);

    expect(server.requests).toHaveLength(2);
    expect(server.requests[0].body.tools).toEqual([
      {
        type: 'function',
        function: {
          name: 'get_weather',
          description: 'Current weather for a city',
          parameters: expect.objectContaining({
            type: 'object',
            properties: { city: { type: 'string' } },
            required: ['city'],
          }),
        },
      },
    ]);
    const followUp = server.requests[1].body.messages;
    expect(followUp).toHaveLength(3);
    expect(followUp[1]).toMatchObject({
      role: 'assistant',
      tool_calls: [
        {
          id: 'call_weather_1',
          type: 'function',
          function: { name: 'get_weather', arguments: '{"city":"Paris"}' },
        },
      ],
    });
    expect(followUp[2]).toEqual({
      role: 'tool',
      tool_call_id: 'call_weather_1',
      content: JSON.stringify({ city: 'Paris', forecast: 'sunny', celsius: 21 }),
    });
  });

  it('fails on a 400 without retrying and surfaces the error message', async () => {
    server.enqueue({
      status: 400,
      errorBody: { error: { message: 'context length exceeded', type: 'invalid' } },
    });
    const error = await generateText({
      model: createLanguageModel(settings),
      prompt: 'x',
      maxRetries: 2,
    }).catch((e: unknown) => e);
    expect(APICallError.isInstance(error)).toBe(true);
    expect((error as APICallError).statusCode).toBe(400);
    expect((error as APICallError).message).toBe('context length exceeded');
    expect(server.requests).toHaveLength(1);
  });

  it('on the streaming path a 400 becomes an error part, onError fires and text rejects', async () => {
    server.enqueue({
      status: 400,
      errorBody: { error: { message: 'bad tools', type: 'invalid_request_error' } },
    });
    const errors: unknown[] = [];
    const result = streamText({
      model: createLanguageModel(settings),
      prompt: 'x',
      onError: ({ error }) => {
        errors.push(error);
      },
    });
    const parts: string[] = [];
    for await (const part of result.fullStream) {
      parts.push(part.type === 'error' ? `error:${(part.error as Error).message}` : part.type);
    }
    expect(parts).toEqual(['start', 'error:bad tools']);
    expect(errors).toHaveLength(1);
    await expect(result.text).rejects.toSatisfy((e) => NoOutputGeneratedError.isInstance(e));
  });

  it('retries a 500 and then succeeds', async () => {
    server.enqueue({ status: 500 }, { text: 'recovered' });
    const result = await generateText({ model: createLanguageModel(settings), prompt: 'x', maxRetries: 2 });
    expect(result.text).toBe('recovered');
    expect(server.requests).toHaveLength(2);
  });

  it('gives up after maxRetries on repeated 429s', async () => {
    server.enqueue({ status: 429 }, { status: 429 }, { status: 429 }, { text: 'never reached' });
    const error = await generateText({
      model: createLanguageModel(settings),
      prompt: 'x',
      maxRetries: 2,
    }).catch((e: unknown) => e);
    expect(RetryError.isInstance(error)).toBe(true);
    expect((error as RetryError).errors).toHaveLength(3);
    expect((error as RetryError).reason).toBe('maxRetriesExceeded');
    expect(server.requests).toHaveLength(3);
  });

  it('retries a 503 on the streaming path too', async () => {
    server.enqueue({ status: 503 }, { chunks: ['back', ' online'] });
    const result = streamText({ model: createLanguageModel(settings), prompt: 'x', maxRetries: 1 });
    expect(await result.text).toBe('back online');
    expect(server.requests).toHaveLength(2);
  });

  it('a stream that dies mid-way delivers the chunks sent so far, then throws', async () => {
    server.enqueue({ chunks: ['one', ' two', ' three', ' four'], failAfterChunks: 2 });
    const errors: unknown[] = [];
    const result = streamText({
      model: createLanguageModel(settings),
      prompt: 'x',
      onError: ({ error }) => {
        errors.push(error);
      },
    });
    const deltas: string[] = [];
    let thrown: unknown;
    try {
      for await (const part of result.fullStream) if (part.type === 'text-delta') deltas.push(part.text);
    } catch (error) {
      thrown = error;
    }
    expect(deltas).toEqual(['one', ' two']);
    // A transport failure is not an in-band error part: iteration throws and onError is not called.
    expect(APICallError.isInstance(thrown)).toBe(true);
    expect(errors).toEqual([]);
    await expect(result.text).rejects.toSatisfy((e) => APICallError.isInstance(e));
    expect(server.requests).toHaveLength(1);
  });

  it('a hanging server is cut off by the abort signal', async () => {
    server.enqueue({ hang: true });
    const started = Date.now();
    const error = await generateText({
      model: createLanguageModel(settings),
      prompt: 'x',
      maxRetries: 0,
      abortSignal: AbortSignal.timeout(150),
    }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(Error);
    expect((error as Error).name).toMatch(/AbortError|TimeoutError/);
    expect(Date.now() - started).toBeLessThan(3000);
    expect(server.requests).toHaveLength(1);
  });

  it('honours time to first token and inter-chunk delays', async () => {
    server.enqueue({ chunks: ['a', 'b', 'c'], firstTokenDelayMs: 120, chunkDelayMs: 40 });
    const started = Date.now();
    const result = streamText({ model: createLanguageModel(settings), prompt: 'x' });
    const stamps: number[] = [];
    for await (const _delta of result.textStream) stamps.push(Date.now() - started);
    expect(stamps).toHaveLength(3);
    expect(stamps[0]).toBeGreaterThanOrEqual(110);
    // The last chunk cannot leave before 120 + 2 × 40 ms. A reader that is late for the first chunk
    // may get all three at once, so the gap between chunks as read says nothing (it flaked under load).
    expect(stamps[2]).toBeGreaterThanOrEqual(190);
  });

  it('uses the responder once the queue is empty', async () => {
    server.setResponder((req) => ({ text: `model=${req.body.model}` }));
    server.enqueue({ text: 'queued first' });
    const first = await generateText({ model: createLanguageModel(settings), prompt: 'x' });
    const second = await generateText({ model: createLanguageModel(settings), prompt: 'x' });
    expect([first.text, second.text]).toEqual(['queued first', 'model=local-llama']);
  });

  it('lists models', async () => {
    const response = await fetch(`${server.baseUrl}/models`);
    expect(response.status).toBe(200);
    const body = (await response.json()) as { data: { id: string }[] };
    expect(body.data.map((m) => m.id)).toEqual(['fake-model', 'fake-embedding']);
  });
});

describe('openai provider (chat completions API)', () => {
  let server: FakeModelServer;
  beforeAll(async () => {
    server = await startFakeModelServer();
  });
  afterEach(() => server.reset());
  afterAll(() => server.close());

  it('streams through /chat/completions with usage', async () => {
    server.enqueue({ text: 'Hi from OpenAI', usage: { prompt_tokens: 3, completion_tokens: 3 } });
    const model = createLanguageModel({
      provider: 'openai',
      model: 'gpt-4o-mini',
      baseUrl: server.baseUrl,
      apiKey: 'sk-x',
      outbound: LOOPBACK_MODELS,
    });
    expect(model.provider).toBe('openai.chat');
    const result = streamText({ model, prompt: 'hello' });
    expect(await collect(result.textStream)).toEqual(['Hi', ' from', ' OpenAI']);
    const usage = await result.usage;
    expect([usage.inputTokens, usage.outputTokens, usage.totalTokens]).toEqual([3, 3, 6]);
    const [request] = server.requests;
    expect(request.path).toBe('/v1/chat/completions');
    expect(request.headers.authorization).toBe('Bearer sk-x');
    expect(request.body.stream_options).toEqual({ include_usage: true });
  });

  it('runs a tool call round trip', async () => {
    server.enqueue(
      { toolCalls: [{ name: 'get_weather', arguments: { city: 'Oslo' } }] },
      { text: 'Sunny in Oslo.' },
    );
    const calls: unknown[] = [];
    const result = await generateText({
      model: createLanguageModel({
        provider: 'openai',
        model: 'gpt-4o-mini',
        baseUrl: server.baseUrl,
        apiKey: 'k',
        outbound: LOOPBACK_MODELS,
      }),
      prompt: 'Weather in Oslo?',
      tools: { get_weather: weatherTool(calls) },
      stopWhen: stepCountIs(3),
    });
    expect(result.text).toBe('Sunny in Oslo.');
    expect(calls).toEqual([{ city: 'Oslo' }]);
    expect(result.steps).toHaveLength(2);
    const toolMessage = server.requests[1].body.messages.find((m: { role: string }) => m.role === 'tool');
    expect(toolMessage).toEqual({
      role: 'tool',
      tool_call_id: 'call_fake_1_1',
      content: JSON.stringify({ city: 'Oslo', forecast: 'sunny', celsius: 21 }),
    });
  });

  it('sends an empty bearer token, not the env key, to a custom base URL without a key', async () => {
    const previous = process.env.OPENAI_API_KEY;
    process.env.OPENAI_API_KEY = 'sk-real-openai-key';
    try {
      await generateText({
        model: createLanguageModel({
          provider: 'openai',
          model: 'm',
          baseUrl: server.baseUrl,
          apiKey: null,
          outbound: LOOPBACK_MODELS,
        }),
        prompt: 'x',
      });
    } finally {
      if (previous === undefined) delete process.env.OPENAI_API_KEY;
      else process.env.OPENAI_API_KEY = previous;
    }
    expect(server.requests[0].headers.authorization).not.toContain('sk-real-openai-key');
  });
});

describe('anthropic provider', () => {
  let server: FakeModelServer;
  const model = () =>
    createLanguageModel({
      provider: 'anthropic',
      model: 'claude-haiku-4-5',
      baseUrl: server.baseUrl,
      apiKey: 'sk-ant',
      outbound: LOOPBACK_MODELS,
    });

  beforeAll(async () => {
    server = await startFakeAnthropicServer();
  });
  afterEach(() => server.reset());
  afterAll(() => server.close());

  it('streams text with usage over /v1/messages', async () => {
    server.enqueue({
      chunks: ['Bonjour', ' tout', ' le monde'],
      usage: { prompt_tokens: 9, completion_tokens: 4 },
    });
    const result = streamText({ model: model(), system: 'Speak French.', prompt: 'Greet everyone' });
    expect(await collect(result.textStream)).toEqual(['Bonjour', ' tout', ' le monde']);
    const usage = await result.usage;
    expect([usage.inputTokens, usage.outputTokens, usage.totalTokens]).toEqual([9, 4, 13]);
    expect(await result.finishReason).toBe('stop');

    const [request] = server.requests;
    expect(request.path).toBe('/v1/messages');
    expect(request.headers['x-api-key']).toBe('sk-ant');
    expect(request.headers['anthropic-version']).toBe('2023-06-01');
    expect(request.body.model).toBe('claude-haiku-4-5');
    expect(request.body.stream).toBe(true);
    expect(request.body.system).toEqual([{ type: 'text', text: 'Speak French.' }]);
  });

  it('answers non-streaming calls with default usage', async () => {
    const result = await generateText({ model: model(), prompt: 'two words' });
    expect(result.text).toBe('Echo: two words');
    expect([result.usage.inputTokens, result.usage.outputTokens]).toEqual([2, 3]);
  });

  it('streams a tool_use block and sends the tool_result back', async () => {
    server.enqueue(
      {
        text: 'Let me check.',
        toolCalls: [{ id: 'toolu_01', name: 'get_weather', arguments: { city: 'Rome' } }],
        usage: { prompt_tokens: 30, completion_tokens: 12 },
      },
      { text: 'Rome is sunny.', usage: { prompt_tokens: 50, completion_tokens: 4 } },
    );
    const calls: unknown[] = [];
    const result = streamText({
      model: model(),
      prompt: 'Weather in Rome?',
      tools: { get_weather: weatherTool(calls) },
      stopWhen: stepCountIs(3),
    });
    expect(await result.text).toBe('Rome is sunny.');
    expect(calls).toEqual([{ city: 'Rome' }]);
    const steps = await result.steps;
    expect(steps.map((s) => s.finishReason)).toEqual(['tool-calls', 'stop']);
    expect(steps[0].text).toBe('Let me check.');
    expect(steps[0].toolCalls[0].input).toEqual({ city: 'Rome' });
    const total = await result.totalUsage;
    expect([total.inputTokens, total.outputTokens]).toEqual([80, 16]);

    expect(server.requests[0].body.tools).toEqual([
      expect.objectContaining({ name: 'get_weather', description: 'Current weather for a city' }),
    ]);
    const messages = server.requests[1].body.messages;
    expect(messages[1].role).toBe('assistant');
    expect(messages[1].content).toEqual([
      { type: 'text', text: 'Let me check.' },
      { type: 'tool_use', id: 'toolu_01', name: 'get_weather', input: { city: 'Rome' } },
    ]);
    expect(messages[2]).toEqual({
      role: 'user',
      content: [
        {
          type: 'tool_result',
          tool_use_id: 'toolu_01',
          content: JSON.stringify({ city: 'Rome', forecast: 'sunny', celsius: 21 }),
        },
      ],
    });
  });

  it('surfaces Anthropic error bodies', async () => {
    server.enqueue({ status: 400 });
    const error = await generateText({ model: model(), prompt: 'x' }).catch((e: unknown) => e);
    expect(APICallError.isInstance(error)).toBe(true);
    expect((error as APICallError).statusCode).toBe(400);
    expect((error as APICallError).message).toBe('Fake model server error (status 400)');
  });

  it('retries an overloaded 529 and then succeeds', async () => {
    server.enqueue({ status: 529 }, { text: 'finally' });
    const result = await generateText({ model: model(), prompt: 'x', maxRetries: 1 });
    expect(result.text).toBe('finally');
    expect(server.requests).toHaveLength(2);
  });
});

describe('embeddings', () => {
  let server: FakeModelServer;
  beforeAll(async () => {
    server = await startFakeModelServer();
  });
  afterEach(() => server.reset());
  afterAll(() => server.close());

  it('embeds one value through the openai-compatible provider', async () => {
    const model = createEmbeddingModel({
      provider: 'openai-compatible',
      model: 'fake-embedding',
      baseUrl: server.baseUrl,
      apiKey: null,
      outbound: LOOPBACK_MODELS,
    });
    expect(model).not.toBeNull();
    const result = await embed({ model: model!, value: 'hello brave world' });
    expect(result.embedding).toEqual(fakeEmbedding('hello brave world', 8));
    expect(result.embedding).toHaveLength(8);
    expect(Math.hypot(...result.embedding)).toBeCloseTo(1, 10);
    expect(result.usage.tokens).toBe(3);
    expect(server.requests[0].path).toBe('/v1/embeddings');
    expect(server.requests[0].body.input).toEqual(['hello brave world']);
    expect(server.requests[0].body.model).toBe('fake-embedding');
  });

  it('embeds many values in order through the openai provider; similar texts are closer', async () => {
    const model = createEmbeddingModel({
      provider: 'openai',
      model: 'text-embedding-3-small',
      baseUrl: server.baseUrl,
      apiKey: 'k',
      outbound: LOOPBACK_MODELS,
    });
    const values = ['the cat sat on the mat', 'the cat sat on a mat', 'quarterly revenue grew strongly'];
    const result = await embedMany({ model: model!, values });
    expect(result.embeddings).toEqual(values.map((v) => fakeEmbedding(v, 8)));
    expect(result.usage.tokens).toBe(6 + 6 + 4);
    const [a, b, c] = result.embeddings;
    expect(cosineSimilarity(a, b)).toBeGreaterThan(cosineSimilarity(a, c));
    expect(server.requests[0].headers.authorization).toBe('Bearer k');
  });

  it('honours the configured dimension and scripted embedding errors', async () => {
    const wide = await startFakeModelServer({ embeddingDimensions: 32 });
    try {
      wide.enqueueEmbeddings({ status: 400 });
      const model = createEmbeddingModel({
        provider: 'openai-compatible',
        model: 'e',
        baseUrl: wide.baseUrl,
        apiKey: null,
        outbound: LOOPBACK_MODELS,
      });
      await expect(embed({ model: model!, value: 'x' })).rejects.toSatisfy((e) => APICallError.isInstance(e));
      const result = await embed({ model: model!, value: 'wide vectors' });
      expect(result.embedding).toHaveLength(32);
      expect(result.embedding).toEqual(fakeEmbedding('wide vectors', 32));
    } finally {
      await wide.close();
    }
  });

  it('has no embedding model for anthropic and builtin', () => {
    for (const provider of ['anthropic', 'builtin'] as const) {
      expect(
        createEmbeddingModel({
          provider,
          model: 'm',
          baseUrl: null,
          apiKey: null,
          outbound: LOOPBACK_MODELS,
        }),
      ).toBeNull();
    }
  });
});

describe('createLanguageModel', () => {
  it('returns the builtin offline model for builtin', () => {
    const model = createLanguageModel({
      provider: 'builtin',
      model: 'anything',
      baseUrl: null,
      apiKey: null,
      outbound: LOOPBACK_MODELS,
    });
    expect(model).toBeInstanceOf(BuiltinLanguageModel);
    expect([model.provider, model.modelId]).toEqual(['builtin', 'scriptorium-offline']);
  });

  it('rejects an openai-compatible setting without base URL, and unknown providers', () => {
    expect(() =>
      createLanguageModel({
        provider: 'openai-compatible',
        model: 'm',
        baseUrl: null,
        apiKey: null,
        outbound: LOOPBACK_MODELS,
      }),
    ).toThrow(ProviderConfigurationError);
    expect(() =>
      createLanguageModel({
        provider: 'mystery' as never,
        model: 'm',
        baseUrl: null,
        apiKey: null,
        outbound: LOOPBACK_MODELS,
      }),
    ).toThrow('Unknown model provider: mystery');
  });

  it('tolerates a trailing slash on the base URL', async () => {
    const server = await startFakeModelServer();
    try {
      const model = createLanguageModel({
        provider: 'openai-compatible',
        model: 'm',
        baseUrl: `${server.baseUrl}/`,
        apiKey: null,
        outbound: LOOPBACK_MODELS,
      });
      const result = await generateText({ model, prompt: 'slash' });
      expect(result.text).toBe('Echo: slash');
      expect(server.requests[0].path).toBe('/v1/chat/completions');
    } finally {
      await server.close();
    }
  });
});

describe('fake model server', () => {
  it('close() ends hanging and streaming requests so nothing keeps the test alive', async () => {
    const server = await startFakeModelServer();
    server.enqueue({ hang: true }, { chunks: ['a', 'b'], chunkDelayMs: 10_000 });
    const settings: ModelSettings = {
      provider: 'openai-compatible',
      model: 'm',
      baseUrl: server.baseUrl,
      apiKey: null,
      outbound: LOOPBACK_MODELS,
    };
    const hanging = generateText({ model: createLanguageModel(settings), prompt: 'x', maxRetries: 0 }).catch(
      (e: unknown) => e,
    );
    const slow = streamText({
      model: createLanguageModel(settings),
      prompt: 'y',
      maxRetries: 0,
      onError: () => {},
    });
    const slowText = collect(slow.textStream).catch((e: unknown) => e);
    await server.waitForRequests(2);
    const started = Date.now();
    await server.close();
    expect(await hanging).toBeInstanceOf(Error);
    await slowText;
    expect(Date.now() - started).toBeLessThan(2000);
  });
});
