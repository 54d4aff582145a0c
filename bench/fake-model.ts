/**
 * A lean fake OpenAI-compatible model for the closed-loop bench: every `POST /v1/chat/completions`
 * streams `tokens` content chunks, the first after `ttft` ms and the rest `delay` ms apart, then a
 * finish chunk, a usage chunk (`choices: []`, as OpenAI sends with `stream_options.include_usage`)
 * and `data: [DONE]`. The wire format is the one of test/helpers/fake-model-server.ts, in HTTP/1.1
 * chunked encoding on keep-alive connections.
 *
 * It has to stream 500 replies at 100 chunks per second each while sharing one core with the load
 * generator, so it does the least per chunk: it speaks HTTP on plain `net` sockets (request heads
 * are split off and bodies skipped by Content-Length, never parsed), every chunk is a pre-encoded
 * Buffer with its chunked framing (one `write` of one Buffer), and streams due in the same
 * millisecond share one timer (at most one timer callback per millisecond, whatever the number of
 * streams). On node:http it used 2.7 CPU-ms per reply and could not keep up at C=500 on a slower
 * machine (bench/README.md, "Session 22").
 *
 * Run as a process of its own (`node --import tsx bench/fake-model.ts --tokens 200 --ttft 50
 * --delay 10`); it prints `{"port":N}` on stdout once listening.
 */
import net from 'node:net';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';

export interface FakeModelSettings {
  tokens: number;
  ttftMs: number;
  delayMs: number;
}

interface Stream {
  socket: net.Socket;
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

const HEAD = Buffer.from(
  'HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n' +
    'connection: keep-alive\r\ntransfer-encoding: chunked\r\n\r\n',
);
const FINAL_CHUNK = Buffer.from('0\r\n\r\n');

function refusal(status: string, message: string, close: boolean): Buffer {
  const body = JSON.stringify({ error: { message, type: 'invalid_request_error' } });
  return Buffer.from(
    `HTTP/1.1 ${status}\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n` +
      `${close ? 'connection: close\r\n' : ''}\r\n${body}`,
  );
}

const NOT_FOUND = refusal('404 Not Found', 'not found', false);
/** A body this fake does not skip (it reads Content-Length only): the connection cannot go on. */
const NOT_SUPPORTED = refusal('400 Bad Request', 'only Content-Length request bodies', true);
const CONTENT_LENGTH = /\r\ncontent-length:[ \t]*(\d+)/i;
const CHUNKED = /\r\ntransfer-encoding:/i;
/** Bytes of a request head beyond which the connection is dropped. */
const MAX_HEAD_BYTES = 64 * 1024;

/** `payload` as one chunk of a chunked body. */
function framed(payload: Buffer): Buffer {
  return Buffer.concat([Buffer.from(`${payload.length.toString(16)}\r\n`), payload, Buffer.from('\r\n')]);
}

export async function startLeanFakeModel(
  settings: FakeModelSettings,
  port = 0,
): Promise<{ port: number; close: () => Promise<void> }> {
  const reply = encodeReply(settings.tokens);
  const first = framed(reply.first);
  const middle = framed(reply.middle);
  const last = Buffer.concat([framed(reply.last), FINAL_CHUNK]);
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
        stream.socket.write(last);
        continue;
      }
      stream.socket.write(stream.sent === 0 ? first : middle);
      stream.sent++;
      schedule(stream);
    }
  };

  /** One keep-alive connection: requests one after another, each answered when its body is read. */
  const serve = (socket: net.Socket) => {
    let pending: Buffer | null = null;
    let bodyLeft = 0;
    let isChat = false;
    let current: Stream | null = null;
    const gone = () => {
      if (current) current.gone = true;
    };
    socket.on('close', gone);
    socket.on('error', gone);
    const answer = () => {
      if (!isChat) {
        socket.write(NOT_FOUND);
        return;
      }
      current = { socket, start: performance.now(), sent: 0, gone: false };
      socket.write(HEAD);
      schedule(current);
    };
    socket.on('data', (data: Buffer) => {
      let bytes = pending ? Buffer.concat([pending, data]) : data;
      pending = null;
      for (;;) {
        if (bodyLeft > 0) {
          const skipped = Math.min(bodyLeft, bytes.length);
          bodyLeft -= skipped;
          bytes = bytes.subarray(skipped);
          if (bodyLeft > 0) return;
          answer();
          continue;
        }
        const end = bytes.indexOf('\r\n\r\n');
        if (end === -1) {
          if (bytes.length > MAX_HEAD_BYTES) socket.destroy();
          else if (bytes.length > 0) pending = Buffer.from(bytes);
          return;
        }
        const head = bytes.toString('latin1', 0, end);
        bytes = bytes.subarray(end + 4);
        if (CHUNKED.test(head)) {
          socket.end(NOT_SUPPORTED);
          return;
        }
        isChat = head.startsWith('POST /v1/chat/completions');
        bodyLeft = Number(CONTENT_LENGTH.exec(head)?.[1] ?? 0);
        if (bodyLeft === 0) answer();
      }
    });
  };

  const sockets = new Set<net.Socket>();
  const server = net.createServer({ noDelay: true }, (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    serve(socket);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => resolve());
  });
  return {
    port: (server.address() as net.AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        for (const socket of sockets) socket.destroy();
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
