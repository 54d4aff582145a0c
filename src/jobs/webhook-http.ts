import http from 'node:http';
import https from 'node:https';
import { checkOutboundUrl, guardedLookup, OutboundUrlError } from '../net/outbound.js';

export interface PostOutcome {
  ok: boolean;
  /** The receiver's HTTP status; null when no response arrived. */
  statusCode: number | null;
  /** Why the attempt counts as failed; null on success. */
  error: string | null;
}

export interface PostOptions {
  allowPrivate: boolean;
  timeoutMs: number;
}

const MAX_ERROR_BODY = 512;

/**
 * POSTs one webhook body. The URL is checked again here and the resolved address at connection
 * time (a public name may resolve to a private address); redirects are never followed, so a 3xx
 * is a failed attempt like any other non-2xx. The whole exchange has one deadline.
 */
export function postWebhook(
  rawUrl: string,
  body: string,
  headers: Record<string, string>,
  options: PostOptions,
): Promise<PostOutcome> {
  let url: URL;
  try {
    url = checkOutboundUrl(rawUrl, options.allowPrivate);
  } catch (err) {
    return Promise.resolve({ ok: false, statusCode: null, error: `URL refused: ${messageOf(err)}` });
  }
  const transport = url.protocol === 'https:' ? https : http;
  return new Promise<PostOutcome>((resolve) => {
    let settled = false;
    const finish = (outcome: PostOutcome) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve(outcome);
    };
    const request = transport.request(url, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'user-agent': 'Scriptorium-Webhooks/1.0',
        'content-length': String(Buffer.byteLength(body)),
        ...headers,
      },
      // A fresh connection per attempt: the guarded lookup runs for every delivery.
      agent: false,
      lookup: guardedLookup(options.allowPrivate),
    });
    const timer = setTimeout(() => {
      request.destroy(new Error(`timed out after ${Math.round(options.timeoutMs / 1000)} s`));
    }, options.timeoutMs);
    request.on('error', (err) => {
      const refused =
        err instanceof OutboundUrlError || (err as { cause?: unknown }).cause instanceof OutboundUrlError;
      finish({
        ok: false,
        statusCode: null,
        error: refused ? `URL refused: ${err.message}` : messageOf(err),
      });
    });
    request.on('response', (response) => {
      const status = response.statusCode ?? 0;
      if (status >= 200 && status < 300) {
        finish({ ok: true, statusCode: status, error: null });
        response.destroy();
        return;
      }
      // Keep the start of a failure's body for the delivery log.
      const chunks: Buffer[] = [];
      let size = 0;
      const done = () => {
        const text = Buffer.concat(chunks).toString('utf8').slice(0, MAX_ERROR_BODY).trim();
        const reason =
          status >= 300 && status < 400
            ? `redirect (HTTP ${status}) not followed`
            : `receiver answered HTTP ${status}`;
        finish({ ok: false, statusCode: status, error: text ? `${reason}: ${text}` : reason });
        response.destroy();
      };
      response.on('data', (chunk: Buffer) => {
        chunks.push(chunk);
        size += chunk.length;
        if (size >= MAX_ERROR_BODY) done();
      });
      response.on('end', done);
      response.on('error', done);
    });
    request.end(body);
  });
}

function messageOf(err: unknown): string {
  if (err instanceof Error) {
    const code = (err as { code?: string }).code;
    return code && !err.message.includes(code) ? `${err.message} (${code})` : err.message;
  }
  return String(err);
}
