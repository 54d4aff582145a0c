/**
 * A real HTTP server on 127.0.0.1 standing in for a customer's webhook endpoint: it records every
 * delivery (raw body and headers, so signatures can be verified byte for byte) and answers with
 * scripted statuses.
 */
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

export interface ReceivedDelivery {
  path: string;
  headers: IncomingHttpHeaders;
  /** The body exactly as sent (what the signature covers). */
  raw: string;
  body: any;
  at: number;
}

export interface ScriptedAnswer {
  status: number;
  body?: string;
  headers?: Record<string, string>;
  /** Never answer (the sender's timeout applies). */
  hang?: boolean;
  /** Answer only after this long. */
  delayMs?: number;
}

export interface WebhookReceiver {
  /** http://127.0.0.1:PORT */
  url: string;
  received: ReceivedDelivery[];
  /** Answers for the next deliveries, in order; afterwards `fallback` (200 by default). */
  answers: ScriptedAnswer[];
  fallback: ScriptedAnswer;
  /** The most requests this receiver was answering at one time. */
  maxInFlight: number;
  /** Resolves once `count` deliveries (optionally matching) have arrived. */
  waitFor(
    count: number,
    options?: { timeoutMs?: number; match?: (d: ReceivedDelivery) => boolean },
  ): Promise<ReceivedDelivery[]>;
  close(): Promise<void>;
}

export async function startWebhookReceiver(): Promise<WebhookReceiver> {
  const received: ReceivedDelivery[] = [];
  const waiters = new Set<() => void>();
  const sockets = new Set<Socket>();
  const receiver: WebhookReceiver = {
    url: '',
    received,
    answers: [],
    fallback: { status: 200, body: 'ok' },
    maxInFlight: 0,
    async waitFor(count, options = {}) {
      const { timeoutMs = 15_000, match = () => true } = options;
      const matching = () => received.filter(match);
      if (matching().length >= count) return matching();
      return new Promise((resolve, reject) => {
        const check = () => {
          if (matching().length >= count) {
            waiters.delete(check);
            clearTimeout(timer);
            resolve(matching());
          }
        };
        const timer = setTimeout(() => {
          waiters.delete(check);
          reject(
            new Error(`webhook receiver: ${matching().length} of ${count} deliveries after ${timeoutMs} ms`),
          );
        }, timeoutMs);
        waiters.add(check);
      });
    },
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };

  let inFlight = 0;
  const server: Server = createServer((req, res) => {
    inFlight++;
    receiver.maxInFlight = Math.max(receiver.maxInFlight, inFlight);
    res.on('close', () => inFlight--);
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const raw = Buffer.concat(chunks).toString('utf8');
      let body: unknown = raw;
      try {
        body = JSON.parse(raw);
      } catch {
        // recorded as text
      }
      received.push({ path: req.url ?? '/', headers: req.headers, raw, body, at: Date.now() });
      const answer = receiver.answers.shift() ?? receiver.fallback;
      for (const waiter of [...waiters]) waiter();
      if (answer.hang) return;
      const send = () => {
        res.writeHead(answer.status, answer.headers ?? { 'content-type': 'text/plain' });
        res.end(answer.body ?? '');
      };
      if (answer.delayMs) setTimeout(send, answer.delayMs);
      else send();
    });
  });
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  receiver.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return receiver;
}
