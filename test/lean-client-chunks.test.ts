/**
 * The lean client's chunk reader takes a content-only chunk without JSON.parse once it has learnt
 * the shape of the call's content chunks (ChunkReader.contentOf). Every case here compares the
 * reader against what JSON.parse of each payload says, so a fast path that mis-parses an escape,
 * takes a chunk carrying more than text, or misses a finish reason, usage, tool call or error fails.
 */
import { describe, expect, it } from 'vitest';
import { ChunkReader, type StepResult } from '../src/llm/lean-client.js';

const base = {
  id: 'chatcmpl-1',
  object: 'chat.completion.chunk',
  created: 1764115200,
  model: 'gpt-x',
  system_fingerprint: null,
};
const payload = (delta: unknown, finish: string | null = null, extra: object = {}) =>
  JSON.stringify({
    ...base,
    choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
    ...extra,
  });
const line = (data: string) => `data: ${data}\n\n`;
/** The payload of a plain content chunk, cut where its content string is. */
const [prefix, suffix] = payload({ content: '\u0000' }).split('"\\u0000"') as [string, string];

function reader() {
  const result: StepResult = { text: '', toolCalls: [], finishReason: 'other', usage: null };
  const models: unknown[] = [];
  const failures: unknown[] = [];
  const chunks = new ChunkReader(result, {
    fail: (err) => failures.push(err),
    responseModel: (model) => models.push(model),
  });
  // Two plain chunks: the shape is learnt (the first with `role` has another one).
  const first = chunks.read(
    line(payload({ role: 'assistant', content: 'He' })) + line(payload({ content: 'llo' })),
  );
  expect(first).toEqual({ text: 'Hello', error: null });
  return { chunks, result, models, failures, shaped: (state: ChunkReader) => (state as any).shape };
}

describe('lean client chunk reader (fast path for content chunks)', () => {
  it('learns the content shape and then reads plain chunks without JSON.parse', () => {
    const { chunks, shaped } = reader();
    expect(shaped(chunks)).toMatchObject({ prefix: `${prefix}"`, suffix: `"${suffix}` });
    const parse = JSON.parse;
    let calls = 0;
    JSON.parse = ((...args: Parameters<typeof parse>) => {
      calls += 1;
      return parse(...args);
    }) as typeof JSON.parse;
    try {
      expect(chunks.read(line(payload({ content: ' world' })) + line(payload({ content: '!' })))).toEqual({
        text: ' world!',
        error: null,
      });
    } finally {
      JSON.parse = parse;
    }
    expect(calls).toBe(0);
  });

  it.each([
    ['newline and tab escapes', 'a\nb\tc'],
    ['quotes and backslashes', 'say "hi" \\ back\\slash \\"'],
    ['unicode escapes', '\u00e9\u2028\ud83d\ude00'],
    ['a lone surrogate escape', '\ud800x'],
    ['raw unicode', 'é 漢字 😀'],
    ['control characters', '\u0001\u001f'],
    ['an empty text', ''],
    ['text that looks like JSON', '"},"finish_reason":"stop"}]}'],
  ])('decodes %s exactly as JSON.parse does', (_name, text) => {
    const { chunks } = reader();
    const data = payload({ content: text });
    expect(chunks.read(line(data))).toEqual({ text: JSON.parse(data).choices[0].delta.content, error: null });
  });

  it('decodes escapes written by hand (\\u escapes of ASCII, \\/ )', () => {
    const { chunks } = reader();
    const data = `${prefix}"\\u0041\\/\\u00E9"${suffix}`;
    expect(chunks.read(line(data)).text).toBe('A/é');
  });

  it('a chunk with content and a finish reason sets the finish reason', () => {
    const { chunks, result } = reader();
    expect(chunks.read(line(payload({ content: ' end' }, 'length')))).toEqual({ text: ' end', error: null });
    expect(result.finishReason).toBe('length');
  });

  it('a content chunk that also carries usage records the usage', () => {
    const { chunks, result } = reader();
    const data = payload({ content: 'x' }, null, { usage: { prompt_tokens: 5, completion_tokens: 6 } });
    expect(chunks.read(line(data)).text).toBe('x');
    expect(result.usage).toEqual({ inputTokens: 5, outputTokens: 6 });
  });

  it('the usage chunk and the finish chunk still go through the full parse', () => {
    const { chunks, result } = reader();
    chunks.read(
      line(payload({}, 'stop')) +
        line(JSON.stringify({ ...base, choices: [], usage: { prompt_tokens: 1, completion_tokens: 2 } })) +
        'data: [DONE]\n\n',
    );
    expect(result.finishReason).toBe('stop');
    expect(result.usage).toEqual({ inputTokens: 1, outputTokens: 2 });
  });

  it('a tool-call chunk is read as one', () => {
    const { chunks } = reader();
    chunks.read(
      line(
        payload({
          tool_calls: [
            { index: 0, id: 'call_1', type: 'function', function: { name: 'f', arguments: '{"a"' } },
          ],
        }),
      ) + line(payload({ tool_calls: [{ index: 0, function: { arguments: ':1}' } }] })),
    );
    expect(chunks.calls).toEqual([{ id: 'call_1', name: 'f', arguments: '{"a":1}' }]);
  });

  it('a body that closes the content string and adds tool calls is not taken as text', () => {
    const { chunks } = reader();
    // Same prefix and suffix as a content chunk, but the "text" between them is JSON structure.
    const injected =
      'x","tool_calls":[{"index":0,"id":"call_9","type":"function","function":{"name":"g","arguments":"{}"}}],"y":"';
    const data = `${prefix}"${injected}"${suffix}`;
    expect(JSON.parse(data).choices[0].delta.tool_calls).toHaveLength(1);
    expect(chunks.read(line(data))).toEqual({ text: 'x', error: null });
    expect(chunks.calls).toEqual([{ id: 'call_9', name: 'g', arguments: '{}' }]);
  });

  it('an error chunk ends the read with its error and fails the span', () => {
    const { chunks, failures } = reader();
    const error = { message: 'overloaded', type: 'server_error' };
    const read = chunks.read(
      line(payload({ content: 'a' })) + line(JSON.stringify({ error })) + line(payload({ content: 'b' })),
    );
    expect(read).toEqual({ text: 'a', error });
    expect(failures).toEqual([error]);
  });

  it('a payload that is not JSON is an error, not text', () => {
    const { chunks } = reader();
    const read = chunks.read(line(`${prefix}"unterminated${suffix}`));
    expect(read.text).toBe('');
    expect(read.error).toBeInstanceOf(SyntaxError);
  });

  it('chunks of another shape (another id, CRLF, no space after data:) read the same', () => {
    const { chunks, models } = reader();
    const other = JSON.stringify({
      ...base,
      id: 'chatcmpl-2',
      model: 'other',
      choices: [{ index: 0, delta: { content: 'A' } }],
    });
    const read = chunks.read(`data:${payload({ content: 'B' })}\r\n\r\ndata: ${other}\n\n`);
    expect(read).toEqual({ text: 'BA', error: null });
    expect(models.at(-1)).toBe('other');
  });

  it('a chunk split across reads is read once it is complete', () => {
    const { chunks } = reader();
    const data = line(payload({ content: 'split "here"' }));
    expect(chunks.read(data.slice(0, 50))).toEqual({ text: '', error: null });
    expect(chunks.read(data.slice(50, -1))).toEqual({ text: 'split "here"', error: null });
  });

  it('reports the model of fast-path chunks to the span', () => {
    const { chunks, models } = reader();
    models.length = 0;
    chunks.read(line(payload({ content: 'z' })));
    expect(models).toEqual(['gpt-x']);
  });
});

/**
 * The same fast path on the response's bytes (ChunkReader.contentOfBytes), used by the service's
 * own stream client for an HTTP chunk that is one whole event: it must give what `read` gives for
 * the same bytes, or null so that `read` takes them.
 */
describe('lean client chunk reader (content chunks read from bytes)', () => {
  /** `text` in the middle of a read buffer, as the stream client hands it over. */
  const bytesOf = (text: string) => {
    const bytes = Buffer.concat([Buffer.from('xx'), Buffer.from(text), Buffer.from('yy')]);
    return [bytes, 2, bytes.length - 2] as const;
  };

  it('reads a plain chunk of the learnt shape, characters of any width included, as read does', () => {
    const { chunks, models } = reader();
    models.length = 0;
    for (const text of ['world', 'é 漢字 😀', '']) {
      const event = line(payload({ content: text }));
      expect(chunks.contentOfBytes(...bytesOf(event))).toBe(text);
      expect(reader().chunks.read(event).text).toBe(text);
    }
    expect(models).toEqual(['gpt-x', 'gpt-x', 'gpt-x']);
  });

  it('leaves to read what needs more than the bytes compared: escapes, other fields, other framing, a pending line', () => {
    const { chunks } = reader();
    const other = (extra: object) => line(JSON.stringify({ ...base, ...extra }));
    const cases = [
      line(payload({ content: 'a "quoted" word' })),
      line(payload({ content: 'back\\slash' })),
      line(payload({ content: 'two\nlines' })),
      line(payload({ content: 'end' }, 'stop')),
      other({
        id: 'chatcmpl-2',
        choices: [{ index: 0, delta: { content: 'A' }, logprobs: null, finish_reason: null }],
      }),
      `data: ${payload({ content: 'crlf' })}\r\n\r\n`,
      `data:${payload({ content: 'no space' })}\n\n`,
      line(payload({ content: 'one' })) + line(payload({ content: 'two' })),
      line(payload({ content: 'cut' })).slice(0, -1),
    ];
    for (const event of cases) expect(chunks.contentOfBytes(...bytesOf(event))).toBeNull();
    // A line pending from an earlier piece: the bytes are its continuation, not an event.
    const pending = reader();
    pending.chunks.read(line(payload({ content: 'split' })).slice(0, 30));
    expect(pending.chunks.contentOfBytes(...bytesOf(line(payload({ content: 'x' }))))).toBeNull();
  });

  it('reads nothing from bytes before a shape is learnt', () => {
    const result: StepResult = { text: '', toolCalls: [], finishReason: 'other', usage: null };
    const chunks = new ChunkReader(result, { fail: () => {}, responseModel: () => {} });
    expect(chunks.contentOfBytes(...bytesOf(line(payload({ content: 'x' }))))).toBeNull();
  });
});
