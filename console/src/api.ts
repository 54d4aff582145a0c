/**
 * The console's only way to the service: the public API with the signed-in key. Errors of both
 * API families become one `ApiError`; a key the service no longer accepts signs the console out.
 */
import { EventSourceParserStream } from 'eventsource-parser/stream';
import { currentKey, generation, signOut } from './session';

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly details: Record<string, string[]> = {},
  ) {
    super(message);
  }
}

/** A response for a key that was signed out meanwhile: never shown, never cached. */
export class StaleResponse extends Error {}

type Query = Record<string, string | number | boolean | undefined | null>;

export function withQuery(path: string, query?: Query): string {
  if (!query) return path;
  const params = new URLSearchParams();
  for (const [name, value] of Object.entries(query)) {
    if (value !== undefined && value !== null && value !== '') params.set(name, String(value));
  }
  const text = params.toString();
  return text ? `${path}?${text}` : path;
}

/** v1 `{error: {message, code, details}}`, v2 `{status: "error", response: {code, error, message}}`. */
export function errorFrom(status: number, body: unknown): ApiError {
  const b = body as any;
  if (b?.error && typeof b.error === 'object') {
    return new ApiError(
      status,
      String(b.error.code ?? status),
      String(b.error.message ?? ''),
      b.error.details,
    );
  }
  if (b?.status === 'error' && b.response) {
    return new ApiError(status, String(b.response.error ?? status), String(b.response.message ?? ''));
  }
  return new ApiError(status, `http_${status}`, `The service answered ${status}`);
}

/** An invalid or revoked key: 401 on v1, 403 on v2, both with this code (DESIGN.md 4). */
function keyRejected(error: ApiError): boolean {
  return error.code === 'invalid_api_key';
}

function headers(extra?: Record<string, string>): Record<string, string> {
  const key = currentKey();
  return { ...(key ? { authorization: `Bearer ${key}` } : {}), ...extra };
}

async function failure(res: Response, gen: number): Promise<ApiError> {
  const body = await res.json().catch(() => null);
  const error = errorFrom(res.status, body);
  if (keyRejected(error) && gen === generation()) {
    signOut('The service no longer accepts this key (revoked or invalid). Sign in again.');
  }
  return error;
}

export interface RequestOptions {
  query?: Query;
  body?: unknown;
  signal?: AbortSignal;
}

export async function api<T = any>(method: string, path: string, options: RequestOptions = {}): Promise<T> {
  const gen = generation();
  const res = await fetch(withQuery(path, options.query), {
    method,
    headers: headers(options.body === undefined ? undefined : { 'content-type': 'application/json' }),
    body: options.body === undefined ? undefined : JSON.stringify(options.body),
    signal: options.signal,
    cache: 'no-store',
  });
  if (gen !== generation()) throw new StaleResponse();
  if (!res.ok) throw await failure(res, gen);
  if (res.status === 204) return undefined as T;
  const body = await res.json();
  if (gen !== generation()) throw new StaleResponse();
  // v2 success envelope.
  return (body?.status === 'ok' && 'response' in body ? body.response : body) as T;
}

export const get = <T = any>(path: string, query?: Query, signal?: AbortSignal) =>
  api<T>('GET', path, { query, signal });

/** Status of a GET for this key, without signing out or throwing: what the key may see. */
export async function probe(path: string): Promise<number> {
  const res = await fetch(path, { headers: headers(), cache: 'no-store' }).catch(() => null);
  return res?.status ?? 0;
}

export interface SseEvent {
  event: string;
  data: any;
  id?: string;
}

/**
 * An event stream from a POST or GET with the key in a header (EventSource cannot send one).
 * Resolves when the stream ends; `false` when the service had nothing to stream (204).
 */
export async function stream(
  method: string,
  path: string,
  options: RequestOptions & { lastEventId?: string; onEvent: (event: SseEvent) => void },
): Promise<boolean> {
  const gen = generation();
  const extra: Record<string, string> = { accept: 'text/event-stream' };
  if (options.body !== undefined) extra['content-type'] = 'application/json';
  if (options.lastEventId) extra['last-event-id'] = options.lastEventId;
  const res = await fetch(withQuery(path, options.query), {
    method,
    headers: headers(extra),
    body: options.body === undefined ? undefined : JSON.stringify(options.body),
    signal: options.signal,
    cache: 'no-store',
  });
  if (gen !== generation()) throw new StaleResponse();
  if (!res.ok) throw await failure(res, gen);
  if (res.status === 204 || !res.body) return false;
  const reader = res.body
    .pipeThrough(new TextDecoderStream())
    .pipeThrough(new EventSourceParserStream())
    .getReader();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return true;
    if (gen !== generation()) {
      await reader.cancel().catch(() => {});
      throw new StaleResponse();
    }
    let data: unknown = value.data;
    try {
      data = JSON.parse(value.data);
    } catch {
      // Not JSON: handed over as text.
    }
    options.onEvent({ event: value.event ?? 'message', data, id: value.id });
  }
}

/** The message of an error event of either family's stream. */
export function streamErrorMessage(data: any): string {
  if (typeof data?.message === 'string') return data.message;
  if (typeof data?.error?.message === 'string') return data.error.message;
  return 'The stream ended with an error';
}

export interface UploadProgress {
  loaded: number;
  total: number;
}

/** Multipart upload through XMLHttpRequest, the one browser API that reports upload progress. */
export function upload<T = any>(
  path: string,
  form: FormData,
  onProgress: (progress: UploadProgress) => void,
): Promise<T> {
  const gen = generation();
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open('POST', path);
    const key = currentKey();
    if (key) xhr.setRequestHeader('authorization', `Bearer ${key}`);
    xhr.upload.onprogress = (e) => onProgress({ loaded: e.loaded, total: e.lengthComputable ? e.total : 0 });
    xhr.onerror = () => reject(new ApiError(0, 'network_error', 'The upload could not reach the service'));
    xhr.onload = () => {
      if (gen !== generation()) return reject(new StaleResponse());
      let body: unknown = null;
      try {
        body = JSON.parse(xhr.responseText);
      } catch {
        body = null;
      }
      if (xhr.status >= 200 && xhr.status < 300) return resolve(body as T);
      const error = errorFrom(xhr.status, body);
      if (keyRejected(error))
        signOut('The service no longer accepts this key (revoked or invalid). Sign in again.');
      reject(error);
    };
    xhr.send(form);
  });
}

export function describeError(error: unknown): string {
  if (error instanceof ApiError) {
    const fields = Object.entries(error.details ?? {})
      .map(([field, messages]) => `${field}: ${(messages ?? []).join(', ')}`)
      .join('; ');
    return fields && !error.message.includes(fields) ? `${error.message} (${fields})` : error.message;
  }
  if (error instanceof Error) return error.message;
  return String(error);
}
