import net, { isIP, type LookupFunction } from 'node:net';
import tls from 'node:tls';

/**
 * A small HTTP/1.1 client for the lean model client's streamed responses (docs/decisions.md, "The model's socket is read without a Readable"). undici reads its sockets
 * through Node's `Readable`: every read of a streaming model response (one per token, about 200
 * per reply) allocates a Buffer, goes through the stream's bookkeeping and a tick, and then
 * through undici's parser. Here a connection's socket is opened with Node's `onread` option: the
 * kernel's bytes land in one buffer the process reuses, and this parser hands the body's bytes
 * to the handler from it, in place.
 *
 * It does what the lean client needs and no more: one request at a time per connection, a
 * string body with Content-Length, responses framed by chunked encoding, Content-Length or the
 * connection's end, keep-alive connections reused per origin. The handler is the subset of
 * undici's dispatch handler that `ModelResponse` implements, so either client can carry a call.
 */

/** What the lean client hands to a dispatcher (a subset of undici's `DispatchOptions`). */
export interface StreamRequest {
  origin: string;
  path: string;
  method: 'POST';
  headers: Record<string, string>;
  body: string;
}

/** The dispatch handler's callbacks, as undici calls them (its raw headers are Buffers, ours strings). */
export interface StreamHandler {
  onConnect(abort: (err?: Error) => void): void;
  onHeaders(statusCode: number, rawHeaders: (Buffer | string)[] | null, resume: () => void): boolean;
  /** A piece of the body; valid only during the call (the buffer is reused). False pauses reading. */
  onData(chunk: Buffer): boolean;
  /**
   * This client's own, in place of `onData` when the handler has it: a piece of the body as a
   * range of the read buffer (no Buffer is made for it), with `onReadEnd` after each socket read
   * whose bytes reached the handler. A handler can so gather a read's pieces, which a rested
   * socket holds several of, and handle them once. `onReadEnd`'s false pauses reading.
   */
  onBody?(buffer: Buffer, start: number, end: number): boolean;
  onReadEnd?(): boolean;
  onComplete(trailers: string[] | null): void;
  onError(err: Error): void;
  /**
   * This client's own (undici has none): `stopReading` stops reading the socket once the bytes
   * read so far have reached `onData` (nothing is held back), and `onHeaders`'s `resume` reads again.
   */
  onReadControl?(stopReading: () => void): void;
}

/** Anything a lean model call can be dispatched to: this client or an undici `Dispatcher`. */
export interface StreamDispatcher {
  dispatch(request: StreamRequest, handler: StreamHandler): boolean;
}

export interface StreamClientOptions {
  /** Resolves host names (the outbound guard's `guardedLookup`); Node's own when absent. */
  lookup?: LookupFunction;
  /** An idle connection is closed after this long (undici's default keep-alive timeout). */
  keepAliveMs?: number;
  connectTimeoutMs?: number;
  /** The response's head, and then each gap in its body, may take this long (undici's defaults). */
  readTimeoutMs?: number;
  /** Certificates trusted for https in place of Node's (tests); Node's own when absent. */
  ca?: string | Buffer;
}

/** Bytes of a response head, or of a chunk-size or trailer line, beyond which the response is refused. */
const MAX_HEAD_BYTES = 64 * 1024;

/**
 * The buffer every connection's reads land in. Reads are handled synchronously, one at a time, so
 * one buffer serves all connections; a paused connection copies what it has not handled yet.
 */
const readBuffer = Buffer.allocUnsafe(64 * 1024);

export class StreamClient implements StreamDispatcher {
  private readonly idle = new Map<string, Connection[]>();
  private readonly keepAliveMs: number;
  private readonly connectTimeoutMs: number;
  private readonly readTimeoutMs: number;

  constructor(private readonly options: StreamClientOptions = {}) {
    this.keepAliveMs = options.keepAliveMs ?? 4_000;
    this.connectTimeoutMs = options.connectTimeoutMs ?? 10_000;
    this.readTimeoutMs = options.readTimeoutMs ?? 300_000;
  }

  dispatch(request: StreamRequest, handler: StreamHandler): boolean {
    const url = new URL(request.origin);
    if (url.protocol !== 'http:' && url.protocol !== 'https:')
      throw new TypeError(`The stream client speaks http and https, not ${url.protocol}`);
    const head = requestHead(request, url.host);
    const connection =
      this.reuse(url.origin) ?? new Connection(this, url, this.options, this.connectTimeoutMs);
    connection.send(head, request.body, handler, this.readTimeoutMs);
    return true;
  }

  /** The idle connection to the origin used last, if any is still open. */
  private reuse(origin: string): Connection | undefined {
    const pool = this.idle.get(origin);
    for (let connection = pool?.pop(); connection; connection = pool?.pop())
      if (connection.open) return connection;
    return undefined;
  }

  /** Closes every idle connection (tests, shutdown). */
  close(): void {
    for (const pool of this.idle.values()) for (const connection of pool) connection.destroy();
    this.idle.clear();
  }

  /** A connection whose response ended cleanly waits here for the next request to its origin. */
  release(connection: Connection, serverIdleMs: number | null): void {
    let pool = this.idle.get(connection.origin);
    if (!pool) {
      pool = [];
      this.idle.set(connection.origin, pool);
    }
    pool.push(connection);
    // A second less than the server's own idle time, as undici does, so it is not the one to close.
    connection.idleFor(
      serverIdleMs === null ? this.keepAliveMs : Math.min(this.keepAliveMs, serverIdleMs - 1_000),
    );
  }

  /** An idle connection that closed or timed out. */
  forget(connection: Connection): void {
    const pool = this.idle.get(connection.origin);
    const at = pool?.indexOf(connection) ?? -1;
    if (at >= 0) pool!.splice(at, 1);
    if (pool?.length === 0) this.idle.delete(connection.origin);
  }
}

/** The request line, headers and Content-Length; header names and values may not break the framing. */
function requestHead(request: StreamRequest, host: string): string {
  let head = `${request.method} ${request.path} HTTP/1.1\r\nhost: ${host}\r\n`;
  for (const name in request.headers) {
    const value = request.headers[name]!;
    if (/[\r\n:]/.test(name) || /[\r\n]/.test(value))
      throw new TypeError(`The header ${JSON.stringify(name)} cannot be sent`);
    head += `${name}: ${value}\r\n`;
  }
  return `${head}content-length: ${Buffer.byteLength(request.body)}\r\n\r\n`;
}

/** A handler's callback: a throw there is a bug of its own, reported, not the process's end. */
function guarded(call: () => void): void {
  try {
    call();
  } catch (err) {
    process.emitWarning(err as Error);
  }
}

function hexDigit(byte: number): number {
  if (byte >= 0x30 && byte <= 0x39) return byte - 0x30;
  const lower = byte | 0x20;
  return lower >= 0x61 && lower <= 0x66 ? lower - 0x61 + 10 : -1;
}

enum Read {
  Head,
  ChunkSize,
  ChunkData,
  ChunkEnd,
  Trailers,
  Length,
  UntilClose,
  Done,
}

class Connection {
  private readonly socket: net.Socket;
  private handler: StreamHandler | null = null;
  private state = Read.Done;
  /** The head, a chunk-size line or a trailer line, as far as it arrived. */
  private line = '';
  private remaining = 0;
  private keepAlive = true;
  /** The server's `Keep-Alive: timeout=` in ms, if it said. */
  private serverIdleMs: number | null = null;
  private paused = false;
  /** The handler stopped the socket's reads (`onReadControl`), everything read being handled. */
  private readingStopped = false;
  /** Body bytes of the read at hand went to the handler's `onBody`: its `onReadEnd` is due. */
  private bodyRead = false;
  /** Bytes read and not handled while the handler paused (TLS may hand over more after a pause). */
  private backlog: Buffer | null = null;
  /** The socket closed while paused: the answer ends once the backlog is handled. */
  private closedWhilePaused = false;
  /** Bytes of the current answer's head and trailers so far. */
  private headBytes = 0;
  private readTimeoutMs = 0;
  private headLines: string[] = [];
  private connected = false;

  readonly origin: string;

  constructor(
    private readonly client: StreamClient,
    url: URL,
    { lookup, ca }: StreamClientOptions,
    connectTimeoutMs: number,
  ) {
    this.origin = url.origin;
    const host = url.hostname.replace(/^\[|\]$/g, '');
    const onread = {
      buffer: readBuffer,
      callback: (n: number, buffer: Uint8Array) => this.read(buffer as Buffer, 0, n),
    };
    const secure = url.protocol === 'https:';
    const port = Number(url.port || (secure ? 443 : 80));
    // Node's default certificate checks (and NODE_EXTRA_CA_CERTS), as undici's connections have.
    // TLS sockets take `onread` as plain ones do (Node 20), though @types/node does not say so.
    const options: tls.ConnectionOptions & { onread: typeof onread } = {
      host,
      port,
      lookup,
      servername: isIP(host) ? undefined : host,
      ALPNProtocols: ['http/1.1'],
      ca,
      onread,
    };
    this.socket = secure ? tls.connect(options) : net.connect({ host, port, lookup, onread });
    this.socket.setNoDelay(true);
    this.socket.setTimeout(connectTimeoutMs);
    this.socket.once(secure ? 'secureConnect' : 'connect', () => {
      this.connected = true;
      this.socket.setTimeout(this.readTimeoutMs);
    });
    this.socket.on('timeout', () => {
      const message = this.connected ? 'The model server sent nothing in time' : 'Connect Timeout';
      this.fail(Object.assign(new Error(message), { code: 'UND_ERR_TIMEOUT' }));
    });
    this.socket.on('error', (err) => this.fail(err));
    // The server closed its side: not to be reused, even before the socket is destroyed.
    this.socket.on('end', () => this.client.forget(this));
    this.socket.on('close', () => this.closed());
  }

  send(head: string, body: string, handler: StreamHandler, readTimeoutMs: number): void {
    this.handler = handler;
    this.state = Read.Head;
    this.line = '';
    this.headBytes = 0;
    this.readTimeoutMs = readTimeoutMs;
    this.socket.ref();
    if (this.connected) this.socket.setTimeout(readTimeoutMs);
    try {
      // An abort reaches this request only, not a later one on the same connection.
      handler.onConnect((err) => {
        if (this.handler === handler) this.fail(err ?? new Error('The request was aborted'));
      });
    } catch (err) {
      this.fail(err as Error);
    }
    if (this.handler === null) return; // aborted at once
    handler.onReadControl?.(() => {
      if (this.handler === handler) this.stopReading();
    });
    this.socket.write(head + body);
  }

  /** In the pool: closed after `ms`, and not keeping the process alive meanwhile. */
  idleFor(ms: number): void {
    this.socket.setTimeout(ms);
    this.socket.unref();
  }

  get open(): boolean {
    return !this.socket.destroyed && this.socket.writable && !this.socket.readableEnded;
  }

  destroy(): void {
    this.socket.destroy();
  }

  /** Bytes from the socket (or the backlog): false pauses the socket until the handler resumes. */
  private read(buffer: Buffer, start: number, end: number): boolean {
    if (this.paused) {
      // A TLS socket hands over every record it decrypted, even after a read returned false.
      this.hold(buffer, start, end);
      return false;
    }
    if (this.handler === null) {
      // Bytes on an idle connection, or after a response: the connection cannot be reused.
      if (end > start) this.socket.destroy();
      return true;
    }
    const handler = this.handler;
    let at = start;
    try {
      while (at < end && this.handler === handler && !this.paused) at = this.step(buffer, at, end);
      if (this.bodyRead) {
        this.bodyRead = false;
        // An answer that ended in this read had its handler's `onComplete` instead.
        if (this.handler === handler && handler.onReadEnd?.() === false) this.pause();
      }
    } catch (err) {
      // A broken answer (an Error thrown by the parser below), or a handler that threw.
      this.fail(err as Error);
      return true;
    }
    // Bytes after the answer's end: the connection is not fit for another request.
    if (this.handler !== handler && at < end) this.socket.destroy();
    if (this.paused && at < end) this.hold(buffer, at, end);
    return !this.paused;
  }

  /** Keeps bytes the paused handler has not had (a copy: the read buffer is reused). */
  private hold(buffer: Buffer, start: number, end: number): void {
    const bytes = Buffer.from(buffer.subarray(start, end));
    this.backlog = this.backlog === null ? bytes : Buffer.concat([this.backlog, bytes]);
  }

  /** The handler asked to stop reading: no read timeout while it holds the answer (as undici). */
  private pause(): void {
    this.paused = true;
    this.socket.setTimeout(0);
  }

  /** Handles bytes from `at` as the state says; returns where it stopped. */
  private step(buffer: Buffer, at: number, end: number): number {
    switch (this.state) {
      case Read.ChunkSize:
        return this.readChunkSize(buffer, at, end);
      case Read.ChunkEnd:
        // The CRLF after a chunk's data, in the common case whole in this read.
        if (this.line === '' && end - at >= 2 && buffer[at] === 0x0d && buffer[at + 1] === 0x0a) {
          this.state = Read.ChunkSize;
          return at + 2;
        }
        if (this.line === '' && buffer[at] !== 0x0d && buffer[at] !== 0x0a)
          throw new Error('The model server sent a malformed chunk');
        return this.readLine(buffer, at, end);
      case Read.Head:
      case Read.Trailers:
        return this.readLine(buffer, at, end);
      case Read.ChunkData:
      case Read.Length: {
        const to = Math.min(end, at + this.remaining);
        this.remaining -= to - at;
        const more = this.body(buffer, at, to);
        if (this.remaining === 0) {
          if (this.state === Read.Length) this.complete();
          else this.state = Read.ChunkEnd;
        }
        if (!more && this.handler !== null) this.pause();
        return to;
      }
      case Read.UntilClose: {
        if (!this.body(buffer, at, end) && this.handler !== null) this.pause();
        return end;
      }
      default:
        this.socket.destroy();
        return end;
    }
  }

  /** Body bytes to the handler: as a range when it takes ranges (its read's end then follows). */
  private body(buffer: Buffer, start: number, end: number): boolean {
    const handler = this.handler!;
    if (handler.onBody === undefined) return handler.onData(buffer.subarray(start, end));
    this.bodyRead = true;
    return handler.onBody(buffer, start, end);
  }

  /** A chunk's size line: read from the bytes when it is plain hex and whole in this read. */
  private readChunkSize(buffer: Buffer, at: number, end: number): number {
    if (this.line === '') {
      let size = 0;
      let i = at;
      for (; i < end && i - at < 13; i++) {
        const digit = hexDigit(buffer[i]!);
        if (digit < 0) break;
        size = size * 16 + digit;
      }
      if (i > at && i + 1 < end && buffer[i] === 0x0d && buffer[i + 1] === 0x0a) {
        this.chunkSized(size);
        return i + 2;
      }
    }
    return this.readLine(buffer, at, end);
  }

  private chunkSized(size: number): void {
    if (size === 0) this.state = Read.Trailers;
    else {
      this.remaining = size;
      this.state = Read.ChunkData;
    }
  }

  /** Lines of the head, chunk sizes and trailers (`latin1`: the head's bytes as they are). */
  private readLine(buffer: Buffer, at: number, end: number): number {
    const found = buffer.subarray(at, end).indexOf(0x0a);
    const eol = found === -1 ? -1 : at + found;
    if (this.state === Read.Head || this.state === Read.Trailers) {
      this.headBytes += (eol === -1 ? end : eol + 1) - at;
      if (this.headBytes > MAX_HEAD_BYTES) throw new Error('The model server sent an oversized head');
    }
    if (eol === -1) {
      this.line += buffer.toString('latin1', at, end);
      if (this.line.length > MAX_HEAD_BYTES) throw new Error('The model server sent an oversized line');
      return end;
    }
    const line = (this.line + buffer.toString('latin1', at, eol)).replace(/\r$/, '');
    this.line = '';
    this.lineEnded(line);
    return eol + 1;
  }

  /** A whole line; throws on a broken answer. */
  private lineEnded(line: string): void {
    switch (this.state) {
      case Read.Head:
        if (line === '') this.headEnded();
        else if (this.headLines.push(line) > 1000) throw new Error('The model server sent too many headers');
        break;
      case Read.ChunkSize: {
        const digits = line.split(';', 1)[0]!.trim();
        if (!/^[0-9a-fA-F]{1,13}$/.test(digits)) throw new Error('The model server sent a malformed chunk');
        this.chunkSized(Number.parseInt(digits, 16));
        break;
      }
      case Read.ChunkEnd:
        if (line !== '') throw new Error('The model server sent a malformed chunk');
        this.state = Read.ChunkSize;
        break;
      case Read.Trailers:
        if (line === '') this.complete();
        break;
    }
  }

  /** The head is in: the status and framing are read and the handler told; throws on a broken head. */
  private headEnded(): void {
    const [statusLine = '', ...fields] = this.headLines;
    this.headLines = [];
    const match = /^HTTP\/1\.([01]) (\d{3})(?: |$)/.exec(statusLine);
    if (!match) throw new Error('The model server did not answer in HTTP/1.1');
    const status = Number(match[2]);
    const raw: string[] = [];
    let length: number | null = null;
    let transferEncoding: string | null = null;
    let connection = '';
    let serverIdleMs: number | null = null;
    for (const field of fields) {
      const colon = field.indexOf(':');
      if (colon <= 0) throw new Error('The model server sent a malformed header');
      const name = field.slice(0, colon).trim();
      const value = field.slice(colon + 1).trim();
      raw.push(name, value);
      const lower = name.toLowerCase();
      if (lower === 'content-length') {
        // Two different lengths: no way to tell where the answer ends.
        const stated = /^\d+$/.test(value) ? Number(value) : Number.NaN;
        length = length === null || length === stated ? stated : Number.NaN;
      } else if (lower === 'transfer-encoding')
        transferEncoding = transferEncoding === null ? value : `${transferEncoding}, ${value}`;
      else if (lower === 'connection') connection += `,${value.toLowerCase()}`;
      else if (lower === 'keep-alive') {
        const seconds = /(?:^|[,\s])timeout=(\d+)/i.exec(value)?.[1];
        if (seconds !== undefined) serverIdleMs = Number(seconds) * 1_000;
      }
    }
    // 1xx answers precede the real one (101 is never asked for).
    if (status >= 100 && status < 200) {
      this.state = Read.Head;
      return;
    }
    const tokens = connection.split(',').map((token) => token.trim());
    // HTTP/1.1 keeps the connection unless told to close; HTTP/1.0 closes unless told to keep it.
    const close = match[1] === '0' ? !tokens.includes('keep-alive') : tokens.includes('close');
    const chunked = transferEncoding?.toLowerCase().split(',').pop()?.trim() === 'chunked';
    // With Transfer-Encoding, Content-Length is ignored and the connection is not trusted with
    // another request (RFC 9112, 6.3); a coding that does not end in chunked runs until the close.
    const ambiguous = transferEncoding !== null && length !== null;
    if (transferEncoding !== null) length = null;
    this.keepAlive = !close && !ambiguous && (serverIdleMs === null || serverIdleMs > 1_000);
    this.serverIdleMs = serverIdleMs;
    if (length !== null && Number.isNaN(length))
      throw new Error('The model server sent an invalid Content-Length');
    const handler = this.handler!;
    // Resuming reaches this request only, not a later one on the same connection.
    handler.onHeaders(status, raw, () => {
      if (this.handler === handler) this.resume();
    });
    if (this.handler === null) return;
    if (status === 204 || status === 304 || (transferEncoding === null && length === 0)) this.complete();
    else if (chunked) this.state = Read.ChunkSize;
    else if (length !== null) {
      this.remaining = length;
      this.state = Read.Length;
    } else {
      this.keepAlive = false;
      this.state = Read.UntilClose;
    }
  }

  /** Within a read too: Node stops reading after it (`readStop`), the read's bytes are handled. */
  private stopReading(): void {
    if (this.readingStopped || this.paused) return;
    this.readingStopped = true;
    this.socket.pause();
  }

  private resume(): void {
    if (this.readingStopped && !this.paused) {
      this.readingStopped = false;
      this.socket.resume();
      return;
    }
    if (!this.paused) return;
    this.paused = false;
    this.readingStopped = false;
    this.socket.setTimeout(this.readTimeoutMs);
    const backlog = this.backlog;
    this.backlog = null;
    if (backlog !== null && !this.read(backlog, 0, backlog.length)) return;
    if (this.closedWhilePaused) {
      this.closedWhilePaused = false;
      this.closed();
    } else this.socket.resume();
  }

  private complete(): void {
    const handler = this.handler!;
    this.handler = null;
    this.bodyRead = false;
    this.state = Read.Done;
    // The answer ended in the read its handler stopped after: the connection reads again, idle.
    if (this.readingStopped) {
      this.readingStopped = false;
      this.socket.resume();
    }
    // Reused only when the request went out whole too (an early answer may come before that).
    if (this.keepAlive && this.open && this.socket.writableLength === 0)
      this.client.release(this, this.serverIdleMs);
    else this.socket.destroy();
    guarded(() => handler.onComplete(null));
  }

  private fail(err: Error): void {
    const handler = this.handler;
    this.handler = null;
    this.bodyRead = false;
    this.state = Read.Done;
    this.paused = false;
    this.readingStopped = false;
    this.backlog = null;
    this.client.forget(this);
    this.socket.destroy();
    if (handler) guarded(() => handler.onError(err));
  }

  private closed(): void {
    this.client.forget(this);
    if (this.handler === null) return;
    if (this.paused) {
      // Bytes the handler has not taken yet may hold the answer's end (TLS reads past a pause).
      this.closedWhilePaused = true;
      return;
    }
    if (this.state === Read.UntilClose) this.complete();
    else this.fail(Object.assign(new Error('other side closed'), { code: 'UND_ERR_SOCKET' }));
  }
}
