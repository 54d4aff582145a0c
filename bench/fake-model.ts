/**
 * A lean fake OpenAI-compatible model for the closed-loop bench: every `POST /v1/chat/completions`
 * streams `tokens` content chunks, the first after `ttft` ms and the rest `delay` ms apart, then a
 * finish chunk, a usage chunk (`choices: []`, as OpenAI sends with `stream_options.include_usage`)
 * and `data: [DONE]`. The wire format is the one of test/helpers/fake-model-server.ts.
 *
 * It has to stream 500 replies at 100 chunks per second each while sharing one core with the load
 * generator, so it does the least per chunk: the request body is drained but not parsed, every
 * chunk is a pre-encoded Buffer, and streams due in the same millisecond share one timer (at most
 * one timer callback per millisecond, whatever the number of streams).
 *
 * Run as a process of its own (`node --import tsx bench/fake-model.ts --tokens 200 --ttft 50
 * --delay 10`); it prints `{"port":N}` on stdout once listening.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';

export interface FakeModelSettings {
  tokens: number;
  ttftMs: number;
  delayMs: number;
}

interface Stream {
  res: ServerResponse;
  /** When the request arrived (performance.now()); chunk k is due at start + ttft + k * delay. */
  start: number;
  /** Chunks sent so far; `tokens` content chunks, then one final write. */
  sent: number;
  gone: boolean;
}

const ID = 'chatcmpl-bench';
const CREATED = Math.floor(Date.now() / 1000);

function chunk(delta: unknown, finish: string | null = null): string {
  const body = {
    id: ID,
    object: 'chat.completion.chunk',
    created: CREATED,
    model: 'bench',
    system_fingerprint: null,
    choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
  };
  return `data: ${JSON.stringify(body)}\n\n`;
}

export function encodeReply(tokens: number): { first: Buffer; middle: Buffer; last: Buffer } {
  const usage = { prompt_tokens: 10, completion_tokens: tokens, total_tokens: 10 + tokens };
  const usageChunk = {
    id: ID,
    object: 'chat.completion.chunk',
    created: CREATED,
    model: 'bench',
    system_fingerprint: null,
    choices: [],
    usage,
  };
  return {
    first: Buffer.from(chunk({ role: 'assistant', content: 'word' })),
    middle: Buffer.from(chunk({ content: ' word' })),
    last: Buffer.from(`${chunk({}, 'stop')}data: ${JSON.stringify(usageChunk)}\n\ndata: [DONE]\n\n`),
  };
}

export async function startLeanFakeModel(
  settings: FakeModelSettings,
  port = 0,
): Promise<{ port: number; close: () => Promise<void> }> {
  const { first, middle, last } = encodeReply(settings.tokens);
  /** Streams due at each whole millisecond (performance.now() rounded up), one timer per entry. */
  const buckets = new Map<number, Stream[]>();

  const schedule = (stream: Stream) => {
    const due = Math.ceil(stream.start + settings.ttftMs + stream.sent * settings.delayMs);
    const bucket = buckets.get(due);
    if (bucket) {
      bucket.push(stream);
      return;
    }
    buckets.set(due, [stream]);
    setTimeout(() => fire(due), Math.max(0, due - performance.now()));
  };

  const fire = (due: number) => {
    const streams = buckets.get(due)!;
    buckets.delete(due);
    for (const stream of streams) {
      if (stream.gone) continue;
      if (stream.sent === settings.tokens) {
        stream.res.end(last);
        continue;
      }
      stream.res.write(stream.sent === 0 ? first : middle);
      stream.sent++;
      schedule(stream);
    }
  };

  const handle = (req: IncomingMessage, res: ServerResponse) => {
    if (req.method !== 'POST' || !req.url?.startsWith('/v1/chat/completions')) {
      res.writeHead(404, { 'content-type': 'application/json' });
      res.end('{"error":{"message":"not found","type":"invalid_request_error"}}');
      req.resume();
      return;
    }
    const stream: Stream = { res, start: performance.now(), sent: 0, gone: false };
    res.on('close', () => {
      stream.gone = true;
    });
    // The body is drained (so the connection can be kept alive) but never parsed.
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      res.flushHeaders();
      schedule(stream);
    });
  };

  const server = createServer({ keepAliveTimeout: 60_000 }, handle);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => resolve());
  });
  return {
    port: (server.address() as AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) {
  const { values } = parseArgs({
    options: {
      tokens: { type: 'string', default: '200' },
      ttft: { type: 'string', default: '50' },
      delay: { type: 'string', default: '10' },
      port: { type: 'string', default: '0' },
    },
  });
  const model = await startLeanFakeModel(
    { tokens: Number(values.tokens), ttftMs: Number(values.ttft), delayMs: Number(values.delay) },
    Number(values.port),
  );
  process.stdout.write(`${JSON.stringify({ port: model.port })}\n`);
  process.on('SIGTERM', () => void model.close().then(() => process.exit(0)));
}
