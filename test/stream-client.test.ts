/**
 * The lean model client's own HTTP/1.1 client (src/net/stream-client.ts), against raw TCP servers
 * on loopback that write exactly the bytes each test names: framing (chunked, Content-Length, the
 * connection's end), bytes arriving one at a time, 1xx heads, keep-alive reuse, pausing, aborts,
 * the errors of broken answers, the outbound guard's lookup, and TLS.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import net, { type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { StringDecoder } from 'node:string_decoder';
import tls from 'node:tls';
import { afterEach, describe, expect, it } from 'vitest';
import { guardedLookup, OutboundUrlError } from '../src/net/outbound.js';
import { StreamClient, type StreamHandler } from '../src/net/stream-client.js';
import { sleep } from './streams-support.js';

/** A server that reads each request's head and body, then runs `answer` on the socket. */
interface RawServer {
  origin: string;
  /** Connections accepted so far. */
  connections: number;
  /** Requests as received (head and body). */
  requests: string[];
  /** Resolves when a connection the server accepted is closed. */
  closed: Promise<void>;
  close(): Promise<void>;
}

const servers: RawServer[] = [];
const clients: StreamClient[] = [];
afterEach(async () => {
  for (const client of clients.splice(0)) client.close();
  await Promise.all(servers.splice(0).map((s) => s.close()));
});

function client(options?: ConstructorParameters<typeof StreamClient>[0]): StreamClient {
  const made = new StreamClient(options);
  clients.push(made);
  return made;
}

async function rawServer(
  answer: (socket: net.Socket, request: string) => void | Promise<void>,
  secure?: { key: Buffer; cert: Buffer },
): Promise<RawServer> {
  let markClosed!: () => void;
  const sockets = new Set<net.Socket>();
  const onConnection = (socket: net.Socket) => {
    sockets.add(socket);
    state.connections++;
    socket.setNoDelay(true);
    socket.on('close', () => {
      sockets.delete(socket);
      markClosed();
    });
    socket.on('error', () => {});
    let received = '';
    socket.on('data', (data) => {
      received += data.toString('latin1');
      const headEnd = received.indexOf('\r\n\r\n');
      if (headEnd < 0) return;
      const length = Number(/content-length: (\d+)/i.exec(received.slice(0, headEnd))?.[1] ?? 0);
      if (received.length < headEnd + 4 + length) return;
      const request = received.slice(0, headEnd + 4 + length);
      received = received.slice(request.length);
      state.requests.push(request);
      void answer(socket, request);
    });
  };
  const server = secure ? tls.createServer(secure, onConnection) : net.createServer(onConnection);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  const state: RawServer = {
    origin: `${secure ? 'https' : 'http'}://127.0.0.1:${port}`,
    connections: 0,
    requests: [],
    closed: new Promise<void>((resolve) => {
      markClosed = resolve;
    }),
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
  servers.push(state);
  return state;
}

/** What a handler saw: the status, the headers, the body and how it ended. */
interface Outcome {
  status: number;
  headers: string[];
  body: string;
  error: Error | null;
  /** Pieces handed to `onData`. */
  pieces: number;
}

/** Dispatches a POST and records what the handler is told; `onPiece` may pause (return false). */
function send(
  streams: StreamClient,
  origin: string,
  options: {
    headers?: Record<string, string>;
    body?: string;
    onPiece?: (piece: string, resume: () => void, abort: (err?: Error) => void) => boolean;
    /** Receives the handler's `stopReading` (`onReadControl`). */
    readControl?: (stopReading: () => void) => void;
  } = {},
): Promise<Outcome> {
  return new Promise((resolve) => {
    const outcome: Outcome = { status: 0, headers: [], body: '', error: null, pieces: 0 };
    // Characters may be split across pieces (the answer one byte at a time).
    const decoder = new StringDecoder('utf8');
    let resume = () => {};
    let abort: (err?: Error) => void = () => {};
    const handler: StreamHandler = {
      onConnect: (a) => {
        abort = a;
      },
      onHeaders: (status, raw, r) => {
        outcome.status = status;
        outcome.headers = (raw ?? []).map(String);
        resume = r;
        return true;
      },
      onData: (chunk) => {
        const piece = decoder.write(chunk);
        outcome.body += piece;
        outcome.pieces++;
        return options.onPiece?.(piece, resume, abort) ?? true;
      },
      onComplete: () => resolve(outcome),
      onError: (err) => {
        outcome.error = err;
        resolve(outcome);
      },
      onReadControl: options.readControl,
    };
    streams.dispatch(
      {
        origin,
        path: '/v1/chat/completions',
        method: 'POST',
        headers: options.headers ?? { 'content-type': 'application/json' },
        body: options.body ?? '{"q":"é"}',
      },
      handler,
    );
  });
}

const chunked = (...pieces: string[]) =>
  `${pieces.map((p) => `${Buffer.byteLength(p).toString(16)}\r\n${p}\r\n`).join('')}0\r\n\r\n`;
const head = (status: string, ...fields: string[]) =>
  `HTTP/1.1 ${status}\r\n${fields.map((f) => `${f}\r\n`).join('')}\r\n`;

describe('stream client', () => {
  it('sends the request whole and reads a chunked answer; the connection is reused', async () => {
    const server = await rawServer((socket) => {
      socket.write(
        head('200 OK', 'Transfer-Encoding: chunked', 'Content-Type: text/event-stream') +
          chunked('data: a\n\n', 'data: é\n\n'),
      );
    });
    const streams = client();
    const first = await send(streams, server.origin, {
      headers: { 'content-type': 'application/json', authorization: 'Bearer k' },
    });
    expect(first).toMatchObject({ status: 200, body: 'data: a\n\ndata: é\n\n', error: null });
    expect(first.headers).toEqual(['Transfer-Encoding', 'chunked', 'Content-Type', 'text/event-stream']);
    const [request] = server.requests;
    expect(request).toBe(
      `POST /v1/chat/completions HTTP/1.1\r\nhost: ${server.origin.slice(7)}\r\ncontent-type: application/json\r\nauthorization: Bearer k\r\ncontent-length: 10\r\n\r\n{"q":"é"}`.replace(
        'é',
        '\u00c3\u00a9',
      ),
    );
    const second = await send(streams, server.origin);
    expect(second.body).toBe('data: a\n\ndata: é\n\n');
    expect(server.requests).toHaveLength(2);
    expect(server.connections).toBe(1);
  });

  it('reads an answer that arrives one byte at a time (chunk extensions and trailers included)', async () => {
    const bytes = Buffer.from(
      `${head('200 OK', 'transfer-encoding: chunked')}5;name=value\r\nhello\r\n4\r\n 漢\r\n0\r\nx-trailer: 1\r\n\r\n`,
    );
    const server = await rawServer(async (socket) => {
      for (let i = 0; i < bytes.length; i++) {
        socket.write(bytes.subarray(i, i + 1));
        await sleep(1);
      }
    });
    const streams = client();
    const outcome = await send(streams, server.origin);
    expect(outcome).toMatchObject({ status: 200, body: 'hello 漢', error: null });
    // Reused after the trailers: the answer ended where it should.
    expect((await send(streams, server.origin)).body).toBe('hello 漢');
    expect(server.connections).toBe(1);
  });

  it('reads a Content-Length answer, and one delimited by the connection closing', async () => {
    const sized = await rawServer((socket) => {
      socket.write(`${head('429 Too Many Requests', 'Content-Length: 12', 'Retry-After: 2')}{"error":{}}`);
    });
    const streams = client();
    expect(await send(streams, sized.origin)).toMatchObject({
      status: 429,
      body: '{"error":{}}',
      error: null,
    });
    expect(await send(streams, sized.origin)).toMatchObject({ status: 429, body: '{"error":{}}' });
    expect(sized.connections).toBe(1);

    const untilClose = await rawServer((socket) => {
      socket.write(`${head('200 OK')}data: a\n\n`);
      setTimeout(() => socket.end('data: [DONE]\n\n'), 20);
    });
    expect(await send(streams, untilClose.origin)).toMatchObject({
      status: 200,
      body: 'data: a\n\ndata: [DONE]\n\n',
      error: null,
    });
    expect(await send(streams, untilClose.origin)).toMatchObject({ status: 200, error: null });
    expect(untilClose.connections).toBe(2);
  });

  it('skips 1xx heads; `Connection: close` and HTTP/1.0 answers are not reused', async () => {
    const server = await rawServer((socket, request) => {
      const version = request.includes('"v":0') ? '1.0' : '1.1';
      socket.write(
        `HTTP/1.1 100 Continue\r\n\r\nHTTP/${version} 200 OK\r\nContent-Length: 2\r\n${version === '1.1' ? 'Connection: close\r\n' : ''}\r\nok`,
      );
    });
    const streams = client();
    expect(await send(streams, server.origin)).toMatchObject({ status: 200, body: 'ok', error: null });
    expect(await send(streams, server.origin, { body: '{"v":0}' })).toMatchObject({
      status: 200,
      body: 'ok',
    });
    expect(await send(streams, server.origin)).toMatchObject({ status: 200, body: 'ok' });
    expect(server.connections).toBe(3);
  });

  it('Transfer-Encoding wins over Content-Length and retires the connection; HTTP/1.0 may keep it when asked', async () => {
    const server = await rawServer((socket, request) => {
      if (request.includes('"both"'))
        socket.write(head('200 OK', 'Content-Length: 3', 'Transfer-Encoding: chunked') + chunked('chunked'));
      else socket.write('HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 2\r\n\r\nok');
    });
    const streams = client();
    expect(await send(streams, server.origin, { body: '{"both":1}' })).toMatchObject({
      body: 'chunked',
      error: null,
    });
    expect(await send(streams, server.origin)).toMatchObject({ body: 'ok', error: null });
    expect(await send(streams, server.origin)).toMatchObject({ body: 'ok', error: null });
    expect(server.connections).toBe(2);
  });

  it('an abort or a resume from a finished request does not reach the next one on its connection', async () => {
    const server = await rawServer(async (socket) => {
      socket.write(head('200 OK', 'Transfer-Encoding: chunked'));
      await sleep(30);
      socket.write(chunked('late'));
    });
    const streams = client();
    let abortFirst: (err?: Error) => void = () => {};
    const first = await send(streams, server.origin, {
      onPiece: (_piece, _resume, abort) => {
        abortFirst = abort;
        return true;
      },
    });
    expect(first).toMatchObject({ body: 'late', error: null });
    const second = send(streams, server.origin);
    abortFirst(new Error('too late'));
    expect(await second).toMatchObject({ body: 'late', error: null });
    expect(server.connections).toBe(1);
  });

  it('a paused answer is not timed out while the handler holds it', async () => {
    const server = await rawServer((socket) => {
      socket.write(head('200 OK', 'Transfer-Encoding: chunked') + chunked('one ', 'two'));
    });
    const pieces: string[] = [];
    const outcome = await send(client({ readTimeoutMs: 100 }), server.origin, {
      onPiece: (piece, resume) => {
        pieces.push(piece);
        if (pieces.length === 1) setTimeout(resume, 300);
        return pieces.length !== 1;
      },
    });
    expect(outcome).toMatchObject({ body: 'one two', error: null });
  });

  it.each([
    ['in the same read', 0],
    ['in later reads', 20],
  ])(
    'stops reading while the handler is paused and hands over the rest, in order, on resume (%s)',
    async (_name, gapMs) => {
      const body = chunked('one ', 'two ', 'three ', 'four');
      const cut = body.indexOf('4\r\ntwo');
      const server = await rawServer(async (socket) => {
        socket.write(head('200 OK', 'Transfer-Encoding: chunked') + body.slice(0, gapMs ? cut : undefined));
        if (!gapMs) return;
        await sleep(gapMs);
        socket.write(body.slice(cut));
      });
      let resumedAfter = -1;
      const pieces: string[] = [];
      const outcome = await send(client(), server.origin, {
        onPiece: (piece, resume) => {
          pieces.push(piece);
          if (pieces.length !== 1) return true;
          setTimeout(() => {
            resumedAfter = pieces.length;
            resume();
          }, 100);
          return false;
        },
      });
      // Nothing was handed over while paused, though the rest had arrived.
      expect(resumedAfter).toBe(1);
      expect(pieces).toEqual(['one ', 'two ', 'three ', 'four']);
      expect(outcome).toMatchObject({ body: 'one two three four', error: null });
    },
  );

  it("a handler that takes ranges gets each chunk of a read as one, then the read's end; a false end pauses until resumed", async () => {
    const server = await rawServer(async (socket) => {
      socket.write(
        head('200 OK', 'Transfer-Encoding: chunked') + chunked('one ', 'two ').replace(/0\r\n\r\n$/, ''),
      );
      await sleep(30);
      socket.write(chunked('three ', 'four'));
    });
    const events: string[] = [];
    let resume = () => {};
    await new Promise<void>((resolve, reject) => {
      const handler: StreamHandler = {
        onConnect: () => {},
        onHeaders: (_status, _raw, r) => {
          resume = r;
          return true;
        },
        onData: () => {
          reject(new Error('onData is not for a handler that takes ranges'));
          return true;
        },
        onBody: (buffer, start, end) => {
          events.push(buffer.toString('utf8', start, end));
          return true;
        },
        onReadEnd: () => {
          events.push('end');
          if (events.filter((e) => e === 'end').length > 1) return true;
          setTimeout(() => {
            events.push('resumed');
            resume();
          }, 100);
          return false;
        },
        onComplete: () => {
          events.push('complete');
          resolve();
        },
        onError: reject,
      };
      client().dispatch({ origin: server.origin, path: '/', method: 'POST', headers: {}, body: '' }, handler);
    });
    // The second write arrived while paused and waited; the read the answer ended in has its
    // `onComplete`, not a read's end.
    expect(events).toEqual(['one ', 'two ', 'end', 'resumed', 'three ', 'four', 'complete']);
  });

  it('stopReading hands over the rest of the read it came in, then reads nothing more until resumed', async () => {
    const server = await rawServer(async (socket) => {
      socket.write(
        head('200 OK', 'Transfer-Encoding: chunked') + chunked('one ', 'two ').replace(/0\r\n\r\n$/, ''),
      );
      await sleep(30);
      socket.write(chunked('three ').replace(/0\r\n\r\n$/, ''));
      await sleep(30);
      socket.write(chunked('four'));
    });
    let stop = () => {};
    let seenAtResume: string[] = [];
    const pieces: string[] = [];
    const outcome = await send(client(), server.origin, {
      readControl: (s) => {
        stop = s;
      },
      onPiece: (piece, resume) => {
        pieces.push(piece);
        if (pieces.length === 1) {
          stop();
          setTimeout(() => {
            seenAtResume = [...pieces];
            resume();
          }, 150);
        }
        return true;
      },
    });
    // 'two ' came in the same read as 'one ' and was handed over; 'three ' (30 ms later) waited.
    expect(seenAtResume).toEqual(['one ', 'two ']);
    expect(outcome).toMatchObject({ body: 'one two three four', error: null });
  });

  it('an answer that ends in a stopped read leaves its connection reading, and reused', async () => {
    const server = await rawServer((socket) => {
      socket.write(head('200 OK', 'Transfer-Encoding: chunked') + chunked('a', 'b'));
    });
    const streams = client();
    for (let i = 0; i < 2; i++) {
      let stop = () => {};
      const outcome = await send(streams, server.origin, {
        readControl: (s) => {
          stop = s;
        },
        onPiece: () => {
          stop();
          return true;
        },
      });
      expect(outcome).toMatchObject({ status: 200, body: 'ab', error: null });
    }
    expect(server.connections).toBe(1);
  });

  it('an abort drops the connection and reports the abort', async () => {
    const server = await rawServer((socket) => {
      socket.write(head('200 OK', 'Transfer-Encoding: chunked') + chunked('data: a\n\n').slice(0, -5));
    });
    const streams = client();
    const reason = new Error('the turn was cancelled');
    const outcome = await send(streams, server.origin, {
      onPiece: (_piece, _resume, abort) => {
        abort(reason);
        return true;
      },
    });
    expect(outcome.error).toBe(reason);
    await server.closed;
  });

  it.each([
    [
      'a chunk size that is not hex',
      `${head('200 OK', 'Transfer-Encoding: chunked')}zz\r\n`,
      /malformed chunk/,
    ],
    ['no CRLF after a chunk', `${head('200 OK', 'Transfer-Encoding: chunked')}1\r\naXY`, /malformed chunk/],
    ['a status line that is not HTTP/1.x', 'HTTP/2 200\r\n\r\n', /did not answer in HTTP\/1.1/],
    ['an invalid Content-Length', head('200 OK', 'Content-Length: 1x'), /invalid Content-Length/],
    ['a head line without a colon', head('200 OK', 'nonsense'), /malformed header/],
    [
      'two different Content-Lengths',
      `${head('200 OK', 'Content-Length: 2', 'Content-Length: 3')}abc`,
      /invalid Content-Length/,
    ],
  ])('fails on %s', async (_name, bytes, message) => {
    const server = await rawServer((socket) => {
      socket.write(bytes);
    });
    const outcome = await send(client(), server.origin);
    expect(outcome.error?.message).toMatch(message);
  });

  it('fails when the server closes before the answer ends, or refuses the connection', async () => {
    const server = await rawServer((socket) => {
      socket.end(`${head('200 OK', 'Transfer-Encoding: chunked')}5\r\nhel`);
    });
    const streams = client();
    const cut = await send(streams, server.origin);
    expect(cut).toMatchObject({ status: 200, body: 'hel' });
    expect(cut.error?.message).toBe('other side closed');

    const closed = net.createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const { port } = closed.address() as AddressInfo;
    await new Promise((resolve) => closed.close(resolve));
    const refused = await send(streams, `http://127.0.0.1:${port}`);
    expect((refused.error as NodeJS.ErrnoException | null)?.code).toBe('ECONNREFUSED');
  });

  it('times out a server that sends nothing, and closes idle connections after the keep-alive time', async () => {
    const silent = await rawServer(() => {});
    const streams = client({ readTimeoutMs: 100, keepAliveMs: 100 });
    const outcome = await send(streams, silent.origin);
    expect(outcome.error?.message).toBe('The model server sent nothing in time');

    const server = await rawServer((socket) => {
      socket.write(`${head('200 OK', 'Content-Length: 2')}ok`);
    });
    expect(await send(streams, server.origin)).toMatchObject({ body: 'ok', error: null });
    await server.closed; // the idle connection, closed by the client after 100 ms
    expect(await send(streams, server.origin)).toMatchObject({ body: 'ok', error: null });
    expect(server.connections).toBe(2);
  });

  it('a server that keeps sending is not timed out; bytes after an answer retire its connection', async () => {
    const server = await rawServer(async (socket, request) => {
      if (request.includes('"extra"')) {
        socket.write(`${head('200 OK', 'Content-Length: 2')}okEXTRA`);
        return;
      }
      socket.write(head('200 OK', 'Transfer-Encoding: chunked'));
      for (let i = 0; i < 6; i++) {
        await sleep(50);
        socket.write(chunked('.').slice(0, -5));
      }
      socket.write('0\r\n\r\n');
    });
    const streams = client({ readTimeoutMs: 150 });
    expect(await send(streams, server.origin)).toMatchObject({ body: '......', error: null });
    expect(await send(streams, server.origin, { body: '{"extra":1}' })).toMatchObject({
      body: 'ok',
      error: null,
    });
    expect(await send(streams, server.origin)).toMatchObject({ body: '......', error: null });
    expect(server.connections).toBe(2);
  });

  it('refuses header names and values that would break the request framing', () => {
    const streams = client();
    const dispatch = (headers: Record<string, string>) =>
      streams.dispatch(
        { origin: 'http://127.0.0.1:9', path: '/', method: 'POST', headers, body: '' },
        {} as StreamHandler,
      );
    expect(() => dispatch({ authorization: 'Bearer k\r\nx-injected: 1' })).toThrow(TypeError);
    expect(() => dispatch({ 'x-a\nb': '1' })).toThrow(TypeError);
    expect(() =>
      streams.dispatch(
        { origin: 'ftp://127.0.0.1', path: '/', method: 'POST', headers: {}, body: '' },
        {} as StreamHandler,
      ),
    ).toThrow(/http and https/);
  });

  it("resolves host names through the outbound guard's lookup", async () => {
    const server = await rawServer((socket) => {
      socket.write(`${head('200 OK', 'Content-Length: 2')}ok`);
    });
    const port = new URL(server.origin).port;
    const guarded = await send(client({ lookup: guardedLookup(false) }), `http://localhost:${port}`);
    expect(guarded.error).toBeInstanceOf(OutboundUrlError);
    expect(server.connections).toBe(0);
    const open = await send(client({ lookup: guardedLookup(true) }), `http://localhost:${port}`);
    expect(open).toMatchObject({ status: 200, body: 'ok', error: null });
  });

  describe('over TLS', () => {
    let pair: { key: Buffer; cert: Buffer } | null = null;
    try {
      const dir = mkdtempSync(path.join(tmpdir(), 'stream-client-'));
      execFileSync(
        'openssl',
        [
          'req',
          '-x509',
          '-newkey',
          'rsa:2048',
          '-nodes',
          '-keyout',
          `${dir}/k.pem`,
          '-out',
          `${dir}/c.pem`,
          '-days',
          '1',
          '-subj',
          '/CN=localhost',
          '-addext',
          'subjectAltName=DNS:localhost,IP:127.0.0.1',
        ],
        { stdio: 'ignore' },
      );
      pair = { key: readFileSync(`${dir}/k.pem`), cert: readFileSync(`${dir}/c.pem`) };
    } catch {
      console.warn('[stream-client] openssl is not available: the TLS tests are skipped');
    }

    it.runIf(pair)('reads a chunked answer over https with a trusted certificate', async () => {
      const server = await rawServer((socket) => {
        socket.write(head('200 OK', 'Transfer-Encoding: chunked') + chunked('data: secure\n\n'));
      }, pair!);
      const streams = client({ ca: pair!.cert });
      expect(await send(streams, server.origin)).toMatchObject({
        status: 200,
        body: 'data: secure\n\n',
        error: null,
      });
      expect(await send(streams, server.origin)).toMatchObject({ body: 'data: secure\n\n' });
      expect(server.connections).toBe(1);
    });

    it.runIf(pair)(
      'keeps every TLS record that arrives while paused, and the end of an answer that closed meanwhile',
      async () => {
        // Records written in one go arrive together: the TLS socket hands them all over, one read
        // each, even after the first read asked to pause.
        const pieces = Array.from({ length: 8 }, (_, i) => `piece ${i};`);
        const server = await rawServer((socket) => {
          // Corked: one record per write, all in one TCP segment.
          socket.cork();
          socket.write(head('200 OK', 'Connection: close'));
          for (const piece of pieces) socket.write(piece);
          socket.uncork();
          socket.end();
        }, pair!);
        const seen: string[] = [];
        const outcome = await send(client({ ca: pair!.cert }), server.origin, {
          onPiece: (piece, resume) => {
            seen.push(piece);
            if (seen.length === 1) setTimeout(resume, 100);
            return seen.length !== 1;
          },
        });
        expect(outcome).toMatchObject({ status: 200, body: pieces.join(''), error: null });
      },
    );

    it.runIf(pair)('refuses a certificate it does not trust', async () => {
      const server = await rawServer((socket) => {
        socket.write(`${head('200 OK', 'Content-Length: 2')}ok`);
      }, pair!);
      const outcome = await send(client(), server.origin);
      expect((outcome.error as NodeJS.ErrnoException | null)?.code).toBe('DEPTH_ZERO_SELF_SIGNED_CERT');
      expect(outcome.status).toBe(0);
    });
  });
});
