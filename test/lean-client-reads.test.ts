/**
 * The lean model client yields one text delta per read of the model's response (every content
 * delta parsed from that read, concatenated), not one per SSE line: one hop through the
 * generators and the turn runner per read. Order against errors and the step's end is kept.
 * Both dispatchers a call can go through are checked: the service's own stream client
 * (net/stream-client.ts) and undici's Agent (used when tracing is on).
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Agent } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type LeanModel, streamLean, type TurnStreamPart } from '../src/llm/lean-client.js';
import { StreamClient, type StreamDispatcher } from '../src/net/stream-client.js';
import { CoalescingScheduler } from '../src/streams/coalescer.js';
import { sleep } from './streams-support.js';

const chunk = (data: unknown) => `data: ${JSON.stringify(data)}\n\n`;
const content = (text: string) => chunk({ model: 'm', choices: [{ index: 0, delta: { content: text } }] });
const finish = chunk({ choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] });
const usage = chunk({ choices: [], usage: { prompt_tokens: 3, completion_tokens: 4 } });
const done = 'data: [DONE]\n\n';
/** `text` framed as one HTTP chunk, for a raw write. */
const chunkOf = (text: string) => `${Buffer.byteLength(text).toString(16)}\r\n${text}\r\n`;

/**
 * What the server writes, one `write` per string, 40 ms apart (so each is a read of its own); a
 * number is a further wait in ms; an array is written at once, its pieces one chunk each, corked
 * (one segment, so one read); `{ raw }` goes to the socket as it is, bypassing the chunked framing.
 */
let writes: (string | Buffer | number | (string | Buffer)[] | { raw: string })[] = [];
let server: http.Server;
let model: LeanModel;
let dispatcher: StreamDispatcher;

beforeAll(async () => {
  server = http.createServer((req, res) => {
    req.resume();
    req.on('end', async () => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      for (const [i, piece] of writes.entries()) {
        if (typeof piece === 'number') {
          await sleep(piece);
          continue;
        }
        if (i > 0) await sleep(40);
        if (Array.isArray(piece)) {
          res.cork();
          for (const part of piece) res.write(part);
          res.uncork();
        } else if (typeof piece === 'object' && 'raw' in piece) {
          res.flushHeaders();
          res.socket!.end(piece.raw);
          return;
        } else res.write(piece);
      }
      res.end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  model = {
    provider: 'openai-compatible',
    model: 'm',
    url: `http://127.0.0.1:${port}/v1/chat/completions`,
    headers: { 'content-type': 'application/json' },
    dispatcher: () => dispatcher,
  };
});
afterAll(async () => {
  await new Promise((resolve) => server.close(resolve));
});

/** One call of the test's model: a one-step turn saying "Hi", no retries. */
const call = (scheduler?: CoalescingScheduler) =>
  streamLean(model, {
    scheduler,
    system: '',
    messages: [{ role: 'user', content: 'Hi' }],
    tools: {},
    maxSteps: 1,
    signal: new AbortController().signal,
    retry: { retries: 0, delaysMs: [1], maxDelayMs: 1 },
  });

const texts = (out: TurnStreamPart[]) =>
  out.filter((p) => p.type === 'text-delta').map((p) => (p as { text: string }).text);

async function parts(scheduler?: CoalescingScheduler): Promise<{ parts: TurnStreamPart[]; usage: unknown }> {
  const stream = call(scheduler);
  const out: TurnStreamPart[] = [];
  for await (const part of stream.fullStream) out.push(part);
  return { parts: out, usage: await stream.totalUsage };
}

const dispatchers: [string, () => StreamDispatcher & { close(): unknown }][] = [
  ['the stream client', () => new StreamClient()],
  ["undici's Agent", () => new Agent()],
];

describe.each(dispatchers)('lean client reads, through %s', (_name, make) => {
  const made = make();
  beforeAll(() => {
    dispatcher = made;
  });
  afterAll(async () => {
    await made.close();
  });

  it('yields the content deltas of one read as one text delta, in order', async () => {
    writes = [
      content('Hel') + content('lo'),
      [content(' there'), content('!'), finish, usage, done].join(''),
    ];
    const { parts: out, usage: total } = await parts();
    expect(out.filter((p) => p.type === 'text-delta').map((p) => (p as { text: string }).text)).toEqual([
      'Hello',
      ' there!',
    ]);
    expect(out.at(-1)).toMatchObject({ type: 'finish-step', finishReason: 'stop' });
    expect(total).toEqual({ inputTokens: 3, outputTokens: 4 });
  });

  it('yields the text read before an error chunk, then the error, and stops', async () => {
    writes = [content('a') + content('b') + chunk({ error: { message: 'boom' } }) + content('never')];
    const { parts: out } = await parts();
    expect(out.map((p) => p.type)).toEqual(['text-delta', 'error', 'finish-step']);
    expect(out[0]).toEqual({ type: 'text-delta', text: 'ab' });
    expect(out[1]).toMatchObject({ error: { message: 'boom' } });
  });

  it('keeps a chunk split across two reads whole', async () => {
    const whole = [content('split'), finish, done].join('');
    writes = [whole.slice(0, 20), whole.slice(20)];
    const { parts: out } = await parts();
    expect(out.filter((p) => p.type === 'text-delta')).toEqual([{ type: 'text-delta', text: 'split' }]);
  });

  it('decodes characters split across reads (a read ending inside a character, then whole ones)', async () => {
    const body = Buffer.from([content('é 漢字 😀'), content('ü'), finish, done].join(''));
    // Cut inside 漢 (3 bytes) and inside 😀 (4 bytes); the reads after them end on ASCII bytes.
    const han = body.indexOf(Buffer.from('漢')) + 1;
    const emoji = body.indexOf(Buffer.from('😀')) + 2;
    const u = body.indexOf(Buffer.from('ü')) + 1;
    writes = [body.subarray(0, han), body.subarray(han, emoji), body.subarray(emoji, u), body.subarray(u)];
    const { parts: out } = await parts();
    expect(texts(out).join('')).toBe('é 漢字 😀ü');
  });

  it('decodes characters split across the chunks of one read', async () => {
    const body = Buffer.from([content('é 漢字'), content('😀ü'), finish, done].join(''));
    const han = body.indexOf(Buffer.from('漢')) + 2;
    const emoji = body.indexOf(Buffer.from('😀')) + 1;
    // Chunks ending inside a character, on an ASCII byte and inside one again, in one segment.
    writes = [
      [
        body.subarray(0, han),
        body.subarray(han, emoji - 2),
        body.subarray(emoji - 2, emoji),
        body.subarray(emoji),
      ],
    ];
    const { parts: out } = await parts();
    expect(texts(out).join('')).toBe('é 漢字😀ü');
  });

  it('a broken answer after whole chunks of the same read: their text first, then the failure', async () => {
    writes = [{ raw: `${chunkOf(content('a'))}${chunkOf(content('b'))}zz\r\n` }];
    const out: TurnStreamPart[] = [];
    const stream = call();
    await expect(
      (async () => {
        for await (const part of stream.fullStream) out.push(part);
      })(),
    ).rejects.toThrow();
    expect(out).toEqual([{ type: 'text-delta', text: 'ab' }]);
  });

  describe('in a busy process (coalescing at the source)', () => {
    const eight = ['a', 'b', 'c', 'd', 'e', 'f', 'g'].map(content);

    it('the first text goes at once; later text waits for the window, merged; the end is not held', async () => {
      writes = [...eight, [content('h'), finish, usage, done].join('')];
      const { parts: out, usage: total } = await parts(new CoalescingScheduler({ windowMs: () => 10_000 }));
      // b..h arrived within the window after 'a': one wake-up, by the body's end (not after 10 s).
      expect(texts(out)).toEqual(['a', 'bcdefgh']);
      expect(out.at(-1)).toMatchObject({ type: 'finish-step', finishReason: 'stop' });
      expect(total).toEqual({ inputTokens: 3, outputTokens: 4 });
    });

    it('held text is released by the scheduler timer, before the body ends', async () => {
      writes = [content('a'), content('b'), 400, [content('c'), finish, done].join('')];
      const stream = call(new CoalescingScheduler({ windowMs: () => 100 }));
      const seen: { text: string; at: number }[] = [];
      const start = performance.now();
      for await (const part of stream.fullStream)
        if (part.type === 'text-delta') seen.push({ text: part.text, at: performance.now() - start });
      expect(seen.map((s) => s.text)).toEqual(['a', 'b', 'c']);
      // 'b' came 40 ms after 'a' and waited for the 100 ms window, not for 'c' (400 ms later).
      expect(seen[1]!.at - seen[0]!.at).toBeGreaterThanOrEqual(90);
      expect(seen[2]!.at - seen[1]!.at).toBeGreaterThanOrEqual(250);
    });

    it('an idle process (window 0) hands over every read as it comes', async () => {
      writes = [...eight, [content('h'), finish, done].join('')];
      const { parts: out } = await parts(new CoalescingScheduler({ windowMs: () => 0 }));
      // One delta per read. On a loaded machine the reader may find two of the writes (40 ms
      // apart) in one read (it flaked in CI as ['ab', 'c', ...]); held text would be ['a', 'bcdefgh'].
      expect(texts(out).join('')).toBe('abcdefgh');
      expect(texts(out).length).toBeGreaterThanOrEqual(6);
    });

    it('a saturated process reads a held call every readPauseMs, not per token; the end waits no longer', async () => {
      // Writes 40 ms apart; the window holds all text after the first until the body ends.
      writes = [...eight, [content('h'), finish, usage, done].join('')];
      const scheduler = new CoalescingScheduler(
        { windowMs: () => 10_000, saturated: () => true },
        undefined,
        150,
      );
      const arrivals: { piece: string; at: number }[] = [];
      const inner = dispatcher;
      const start = performance.now();
      const seeing: StreamDispatcher = {
        dispatch: (request, handler) =>
          inner.dispatch(request, {
            onConnect: (abort) => handler.onConnect(abort),
            onHeaders: (status, raw, resume) => handler.onHeaders(status, raw, resume),
            onData: (chunk) => {
              arrivals.push({ piece: chunk.toString(), at: performance.now() - start });
              return handler.onData(chunk);
            },
            // The stream client hands its handler ranges of a read, then the read's end.
            onBody:
              handler.onBody &&
              ((buffer, from, to) => {
                arrivals.push({ piece: buffer.toString('utf8', from, to), at: performance.now() - start });
                return handler.onBody!(buffer, from, to);
              }),
            onReadEnd: handler.onReadEnd && (() => handler.onReadEnd!()),
            onComplete: (trailers) => handler.onComplete(trailers),
            onError: (err) => handler.onError(err),
            onReadControl: handler.onReadControl && ((stop) => handler.onReadControl!(stop)),
          }),
      };
      dispatcher = seeing;
      try {
        const { parts: out, usage: total } = await parts(scheduler);
        expect(texts(out)).toEqual(['a', 'bcdefgh']);
        expect(total).toEqual({ inputTokens: 3, outputTokens: 4 });
      } finally {
        dispatcher = inner;
      }
      const at = (text: string) => arrivals.find((a) => a.piece.includes(`"content":"${text}"`))!.at;
      // undici cannot stop between reads (tracing's dispatcher): there every write is read as it comes.
      if (inner instanceof StreamClient) {
        // 'b' was held, so the socket rested: 'c' (written 40 ms after it) was read with the next
        // reads, 150 ms later; and the body's end at most a pause after it was written (~320 ms).
        expect(at('c') - at('b')).toBeGreaterThanOrEqual(140);
        expect(arrivals.at(-1)!.at - at('b')).toBeLessThan(1_000);
      }
    });

    it('an error chunk is not held behind the window', async () => {
      writes = [content('a'), content('b'), chunk({ error: { message: 'boom' } }), 2000, done];
      const start = performance.now();
      const { parts: out } = await parts(new CoalescingScheduler({ windowMs: () => 10_000 }));
      expect(out.map((p) => p.type)).toEqual(['text-delta', 'text-delta', 'error', 'finish-step']);
      expect(texts(out)).toEqual(['a', 'b']);
      expect(performance.now() - start).toBeLessThan(1500);
    });
  });
});
