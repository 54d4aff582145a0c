import type { FastifyReply } from 'fastify';

const HEARTBEAT_MS = 15_000;

/**
 * A Server-Sent Events response: `event:` and `data:` lines (plus `id:` when given), proxy
 * buffering disabled, and a comment heartbeat so idle proxies keep the connection open.
 * Writes after the client left are dropped: the work behind the stream carries on regardless.
 */
export class SseStream {
  private heartbeat: NodeJS.Timeout;
  private closed = false;

  constructor(private readonly reply: FastifyReply) {
    reply.hijack();
    const raw = reply.raw;
    raw.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache, no-transform',
      connection: 'keep-alive',
      'x-accel-buffering': 'no',
      'x-request-id': reply.request.id,
      ...(reply.getHeaders() as Record<string, string>),
    });
    raw.flushHeaders();
    reply.server.deps.metrics.streamOpened();
    this.heartbeat = setInterval(() => this.write(': keep-alive\n\n'), HEARTBEAT_MS);
    this.heartbeat.unref();
    raw.on('close', () => this.stop());
  }

  /** True once the client disconnected or the stream ended. */
  get isClosed(): boolean {
    return this.closed;
  }

  /** Resolves when the client disconnects or the stream ends. */
  closedPromise(): Promise<void> {
    if (this.closed) return Promise.resolve();
    return new Promise((resolve) => this.reply.raw.once('close', () => resolve()));
  }

  send(event: string, data: unknown, id?: number | string): void {
    this.sendJson(event, JSON.stringify(data), id);
  }

  /** `send` with the data already encoded (one JSON line, as `JSON.stringify` makes it). */
  sendJson(event: string, json: string, id?: number | string): void {
    const idLine = id === undefined ? '' : `id: ${id}\n`;
    this.write(`event: ${event}\ndata: ${json}\n${idLine}\n`);
  }

  end(): void {
    if (this.closed) return;
    this.stop();
    this.reply.raw.end();
  }

  private write(chunk: string): void {
    if (this.closed || this.reply.raw.writableEnded) return;
    this.reply.raw.write(chunk);
  }

  private stop(): void {
    if (this.closed) return;
    this.reply.server.deps.metrics.streamClosed();
    this.closed = true;
    clearInterval(this.heartbeat);
  }
}
