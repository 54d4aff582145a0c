import { generateText, type ModelMessage, stepCountIs, streamText, tool } from 'ai';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  BuiltinLanguageModel,
  extractPassages,
  planBuiltinReply,
  splitWords,
} from '../src/llm/builtin-model.js';
import { createLanguageModel } from '../src/llm/providers.js';
import { LOOPBACK_MODELS } from './helpers/fake-model-server.js';

const NO_PROVIDER = (request: string) =>
  `I am Scriptorium's built-in offline model, not a real language model. No model provider is configured, so I cannot understand or answer your request ("${request}").\n\n` +
  'To get real answers, configure a model provider:\n\n' +
  '- set `LLM_PROVIDER`, `LLM_BASE_URL`, `LLM_API_KEY` and `LLM_MODEL` before bootstrapping, or\n' +
  '- create a model configuration with `POST /api/v1/model_configurations` and make it the default.';

const LONG_TEXT = `${'Passwords expire every ninety days and must be rotated. '.repeat(10).trim()}`;

const PASSAGES = [
  {
    document_id: 2,
    document_name: 'faq.md',
    position: 4,
    score: 0.41,
    text: 'Contact IT for locked accounts.',
  },
  {
    document_id: 1,
    document_name: 'handbook.pdf',
    position: 0,
    score: 0.93,
    text: 'To reset your password,\n open Settings > Security and click "Reset".',
    heading_path: ['Accounts', 'Passwords'],
  },
  { document_id: 3, document_name: 'policy.docx', position: 7, score: 0.77, text: LONG_TEXT },
  { document_id: 4, document_name: 'old-notes.txt', position: 1, score: 0.12, text: 'Irrelevant notes.' },
];

const QUOTED_ANSWER =
  'These are the most relevant passages I found in the knowledge base:\n\n' +
  'From "handbook.pdf": "To reset your password, open Settings > Security and click "Reset"."\n\n' +
  `From "policy.docx": "${LONG_TEXT.slice(0, 400).slice(0, LONG_TEXT.slice(0, 400).lastIndexOf(' '))}…"\n\n` +
  'From "faq.md": "Contact IT for locked accounts."\n\n' +
  "(Quoted verbatim by Scriptorium's built-in offline model; configure a model provider for real answers.)";

function knowledgeTool(calls: string[], passages: unknown = { passages: PASSAGES }) {
  return tool({
    description: 'Search the knowledge base',
    inputSchema: z.object({ query: z.string() }),
    execute: async ({ query }): Promise<unknown> => {
      calls.push(query);
      return passages;
    },
  });
}

describe('BuiltinLanguageModel', () => {
  it('identifies itself as the builtin offline model', () => {
    const model = new BuiltinLanguageModel();
    expect([model.specificationVersion, model.provider, model.modelId]).toEqual([
      'v3',
      'builtin',
      'scriptorium-offline',
    ]);
  });

  it('says plainly that no provider is configured, deterministically', async () => {
    const run = () =>
      generateText({ model: new BuiltinLanguageModel(), prompt: 'What is the capital of France?' });
    const [first, second] = await Promise.all([run(), run()]);
    expect(first.text).toBe(NO_PROVIDER('What is the capital of France?'));
    expect(second.text).toBe(first.text);
    expect(first.finishReason).toBe('stop');
    expect(first.usage.inputTokens).toBe(6);
    expect(first.usage.outputTokens).toBe(first.text.split(/\s+/).filter(Boolean).length);
  });

  it('streams word by word and the deltas add up to the generated text', async () => {
    const prompt = 'Tell me a story about dragons';
    const result = streamText({ model: new BuiltinLanguageModel(), prompt });
    const deltas: string[] = [];
    for await (const delta of result.textStream) deltas.push(delta);
    const expected = NO_PROVIDER(prompt);
    expect(deltas.join('')).toBe(expected);
    expect(deltas.length).toBe(expected.split(/\s+/).filter(Boolean).length);
    expect(deltas.slice(0, 4)).toEqual(['I', ' am', " Scriptorium's", ' built-in']);
    for (const delta of deltas) expect(delta).toMatch(/^\s*\S+$/);
    const usage = await result.usage;
    expect(usage.inputTokens).toBe(6);
    expect(usage.outputTokens).toBe(deltas.length);
    expect((await generateText({ model: new BuiltinLanguageModel(), prompt })).text).toBe(expected);
  });

  it('gives each word a turn of the event loop of its own, so a stream sends it as its own event', async () => {
    // A turn of the loop passes between two words when an immediate scheduled at the first one
    // runs before the second arrives (words of one turn would be merged into one content event).
    const result = streamText({ model: new BuiltinLanguageModel(), prompt: 'Tell me a story' });
    const order: string[] = [];
    for await (const _delta of result.textStream) {
      order.push('word');
      setImmediate(() => order.push('turn'));
    }
    await new Promise((resolve) => setImmediate(resolve));
    const words = order.filter((o) => o === 'word').length;
    expect(words).toBeGreaterThan(10);
    // Two words read in one turn: only at the start, where the SDK's stream reads one part ahead.
    const together = order.slice(1).filter((o, i) => o === 'word' && order[i] === 'word').length;
    expect(together).toBeLessThanOrEqual(1);
  });

  it('shortens a long request when echoing it', async () => {
    const prompt = `Please ${'summarise everything '.repeat(20)}`;
    const result = await generateText({ model: new BuiltinLanguageModel(), prompt });
    expect(result.text).toBe(
      NO_PROVIDER('Please summarise everything summarise everything summarise everything summarise…'),
    );
  });

  it('searches the knowledge base, then quotes the best three passages in score order', async () => {
    const calls: string[] = [];
    const result = streamText({
      model: new BuiltinLanguageModel(),
      system: 'Answer from the knowledge base.',
      prompt: 'How do I reset my password?',
      tools: { knowledge_search: knowledgeTool(calls) },
      stopWhen: stepCountIs(3),
    });
    const deltas: string[] = [];
    for await (const delta of result.textStream) deltas.push(delta);

    expect(calls).toEqual(['How do I reset my password?']);
    const steps = await result.steps;
    expect(steps).toHaveLength(2);
    expect(steps[0].finishReason).toBe('tool-calls');
    expect(steps[0].toolCalls.map((c) => [c.toolCallId, c.toolName, c.input])).toEqual([
      ['builtin-call-1', 'knowledge_search', { query: 'How do I reset my password?' }],
    ]);
    expect(steps[0].text).toBe('');
    expect(steps[1].finishReason).toBe('stop');
    expect(await result.text).toBe(QUOTED_ANSWER);
    expect(deltas.join('')).toBe(QUOTED_ANSWER);
    expect(deltas.length).toBeGreaterThan(20);
  });

  it('searches a message longer than the tool takes by its first 2,000 characters', async () => {
    const calls: string[] = [];
    const long = `How do I reset my password? ${'Details follow. '.repeat(300)}`;
    const result = await generateText({
      model: new BuiltinLanguageModel(),
      prompt: long,
      tools: { knowledge_search: knowledgeTool(calls) },
      stopWhen: stepCountIs(3),
    });
    expect(calls).toEqual([long.slice(0, 2000)]);
    expect(result.steps[0].toolResults).toHaveLength(1);
  });

  it('does the same through generateText (doGenerate)', async () => {
    const calls: string[] = [];
    const result = await generateText({
      model: createLanguageModel({
        provider: 'builtin',
        model: 'ignored',
        baseUrl: null,
        apiKey: null,
        outbound: LOOPBACK_MODELS,
      }),
      prompt: 'How do I reset my password?',
      tools: { knowledge_search: knowledgeTool(calls) },
      stopWhen: stepCountIs(3),
    });
    expect(calls).toEqual(['How do I reset my password?']);
    expect(result.steps).toHaveLength(2);
    expect(result.text).toBe(QUOTED_ANSWER);
    // The tool call counts as the words of its JSON input: {"query":"How do I reset my password?"} is 6.
    expect(result.totalUsage.outputTokens).toBe(6 + QUOTED_ANSWER.split(/\s+/).filter(Boolean).length);
  });

  it('says so when the search finds nothing', async () => {
    const calls: string[] = [];
    const result = await generateText({
      model: new BuiltinLanguageModel(),
      prompt: 'Where is the moon base?',
      tools: { knowledge_search: knowledgeTool(calls, { passages: [] }) },
      stopWhen: stepCountIs(3),
    });
    expect(calls).toEqual(['Where is the moon base?']);
    expect(result.text).toMatch(
      /^I searched the knowledge base for "Where is the moon base\?" but found nothing relevant\.\n\nI am Scriptorium's built-in offline model/,
    );
    expect(result.text).toContain('POST /api/v1/model_configurations');
  });

  it('accepts passages returned as a JSON string (a text tool output)', async () => {
    const result = await generateText({
      model: new BuiltinLanguageModel(),
      prompt: 'password reset',
      tools: { knowledge_search: knowledgeTool([], JSON.stringify({ passages: PASSAGES.slice(0, 1) })) },
      stopWhen: stepCountIs(3),
    });
    expect(result.text).toBe(
      'These are the most relevant passages I found in the knowledge base:\n\n' +
        'From "faq.md": "Contact IT for locked accounts."\n\n' +
        "(Quoted verbatim by Scriptorium's built-in offline model; configure a model provider for real answers.)",
    );
  });

  it('answers from a tool result already present in the history', async () => {
    const messages: ModelMessage[] = [
      { role: 'user', content: 'reset password' },
      {
        role: 'assistant',
        content: [
          {
            type: 'tool-call',
            toolCallId: 'c1',
            toolName: 'knowledge_search',
            input: { query: 'reset password' },
          },
        ],
      },
      {
        role: 'tool',
        content: [
          {
            type: 'tool-result',
            toolCallId: 'c1',
            toolName: 'knowledge_search',
            output: { type: 'json', value: { passages: [PASSAGES[3]] } },
          },
        ],
      },
    ];
    const result = await generateText({ model: new BuiltinLanguageModel(), messages });
    expect(result.text).toContain('From "old-notes.txt": "Irrelevant notes."');
    expect(result.toolCalls).toEqual([]);
  });

  it('searches again for a new question after an earlier search', async () => {
    const calls: string[] = [];
    const messages: ModelMessage[] = [
      { role: 'user', content: 'first question' },
      {
        role: 'assistant',
        content: [
          {
            type: 'tool-call',
            toolCallId: 'c1',
            toolName: 'knowledge_search',
            input: { query: 'first question' },
          },
        ],
      },
      {
        role: 'tool',
        content: [
          {
            type: 'tool-result',
            toolCallId: 'c1',
            toolName: 'knowledge_search',
            output: { type: 'json', value: { passages: [] } },
          },
        ],
      },
      { role: 'assistant', content: 'I searched the knowledge base but found nothing relevant.' },
      { role: 'user', content: 'second question' },
    ];
    const result = await generateText({
      model: new BuiltinLanguageModel(),
      messages,
      tools: { knowledge_search: knowledgeTool(calls, { passages: [] }) },
      stopWhen: stepCountIs(3),
    });
    expect(calls).toEqual(['second question']);
    expect(result.steps[0].toolCalls[0].toolCallId).toBe('builtin-call-2');
    expect(
      result.text.startsWith(
        'I searched the knowledge base for "second question" but found nothing relevant.\n\n',
      ),
    ).toBe(true);
  });

  it('does not call the tool when tool choice is none, or when another tool is offered', async () => {
    const calls: string[] = [];
    const none = await generateText({
      model: new BuiltinLanguageModel(),
      prompt: 'hello',
      tools: { knowledge_search: knowledgeTool(calls) },
      toolChoice: 'none',
    });
    expect(none.text).toBe(NO_PROVIDER('hello'));
    const other = await generateText({
      model: new BuiltinLanguageModel(),
      prompt: 'hello',
      tools: {
        web_search: tool({ inputSchema: z.object({ q: z.string() }), execute: async () => 'nope' }),
      },
    });
    expect(other.text).toBe(NO_PROVIDER('hello'));
    expect(calls).toEqual([]);
  });

  it('reports a failed search instead of quoting', async () => {
    const result = await generateText({
      model: new BuiltinLanguageModel(),
      prompt: 'anything',
      tools: {
        knowledge_search: tool({
          inputSchema: z.object({ query: z.string() }),
          execute: async (): Promise<string> => {
            throw new Error('index offline');
          },
        }),
      },
      stopWhen: stepCountIs(3),
    });
    expect(result.text).toBe('I tried to search the knowledge base, but the search failed: index offline');
  });

  it('gives artifact requests a Markdown heading', async () => {
    const result = await generateText({
      model: new BuiltinLanguageModel(),
      system: 'You write artifacts: complete Markdown documents.',
      prompt: 'Onboarding guide',
    });
    expect(result.text).toBe(`# No model provider configured\n\n${NO_PROVIDER('Onboarding guide')}`);
  });

  it('stops streaming when aborted', async () => {
    const controller = new AbortController();
    const result = streamText({
      model: new BuiltinLanguageModel({ wordDelayMs: 20 }),
      prompt: 'slow please',
      abortSignal: controller.signal,
    });
    const deltas: string[] = [];
    let aborted = false;
    for await (const part of result.fullStream) {
      if (part.type === 'text-delta') {
        deltas.push(part.text);
        if (deltas.length === 3) controller.abort();
      }
      if (part.type === 'abort') aborted = true;
    }
    expect(aborted).toBe(true);
    expect(deltas.length).toBeLessThan(6);
  });
});

describe('builtin helpers', () => {
  it('splitWords keeps every character', () => {
    expect(splitWords('  a b\n\nc  ')).toEqual(['  a', ' b', '\n\nc  ']);
    expect(splitWords('')).toEqual([]);
    expect(splitWords('   ')).toEqual(['   ']);
  });

  it('extractPassages accepts every wrapping the SDK or a client may use', () => {
    const value = { passages: [PASSAGES[0]] };
    expect(extractPassages({ type: 'json', value })).toEqual([PASSAGES[0]]);
    expect(extractPassages({ type: 'text', value: JSON.stringify(value) })).toEqual([PASSAGES[0]]);
    expect(
      extractPassages({ type: 'content', value: [{ type: 'text', text: JSON.stringify(value) }] }),
    ).toEqual([PASSAGES[0]]);
    expect(extractPassages(value)).toEqual([PASSAGES[0]]);
    expect(extractPassages([PASSAGES[0]])).toEqual([PASSAGES[0]]);
    expect(extractPassages({ type: 'text', value: 'not json' })).toEqual([]);
    expect(extractPassages({ passages: [{ nope: true }] })).toEqual([]);
  });

  it('planBuiltinReply ignores empty user text', () => {
    const reply = planBuiltinReply({
      prompt: [{ role: 'user', content: [{ type: 'text', text: '   ' }] }],
      tools: [{ type: 'function', name: 'knowledge_search', inputSchema: { type: 'object' } }],
    });
    expect(reply.kind).toBe('text');
  });
});
