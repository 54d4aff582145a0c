/** Shared set-up of the stream tests: an SSE client that keeps ids, and a second "process" on the same database. */
import os from 'node:os';
import { createParser } from 'eventsource-parser';
import type { FastifyInstance } from 'fastify';
import { type Database, openDatabase } from '../src/db/client.js';
import type { AppDeps } from '../src/http/context.js';
import { startSibling } from './chats-support.js';
import type { TestApp } from './helpers/app.js';
import { backend } from './helpers/database.js';

export interface IdEvent {
  id: string | undefined;
  event: string;
  data: any;
}

export interface SseRead {
  status: number;
  headers: Headers;
  text: string;
  events: IdEvent[];
  /** A JSON body when the answer was not a stream. */
  body: any;
}

/**
 * Reads an SSE response over real HTTP with eventsource-parser, keeping each event's `id`.
 * `until` disconnects as soon as it returns true for the events so far.
 */
export async function readSse(
  url: string,
  options: {
    key: string;
    method?: 'GET' | 'POST';
    body?: unknown;
    headers?: Record<string, string>;
    until?: (events: IdEvent[]) => boolean;
    /** Called with the events so far after each read (to act mid-stream without disconnecting). */
    onProgress?: (events: IdEvent[]) => void;
  },
): Promise<SseRead> {
  const controller = new AbortController();
  const res = await fetch(url, {
    method: options.method ?? (options.body === undefined ? 'GET' : 'POST'),
    headers: {
      authorization: `Bearer ${options.key}`,
      ...(options.body === undefined ? {} : { 'content-type': 'application/json' }),
      ...options.headers,
    },
    body: options.body === undefined ? undefined : JSON.stringify(options.body),
    signal: controller.signal,
  });
  if (!String(res.headers.get('content-type')).startsWith('text/event-stream')) {
    const text = await res.text();
    return {
      status: res.status,
      headers: res.headers,
      text,
      events: [],
      body: text ? JSON.parse(text) : null,
    };
  }
  const events: IdEvent[] = [];
  let text = '';
  const parser = createParser({
    onEvent: (message) =>
      events.push({ id: message.id, event: message.event ?? 'message', data: JSON.parse(message.data) }),
  });
  const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      text += value;
      parser.feed(value);
      options.onProgress?.(events);
      if (options.until?.(events)) {
        controller.abort();
        break;
      }
    }
  } catch (err) {
    if (!controller.signal.aborted) throw err;
  }
  return { status: res.status, headers: res.headers, text, events, body: null };
}

export const idsOf = (events: IdEvent[]) => events.map((e) => Number(e.id));
export const range = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => from + i);

export interface SecondProcess {
  app: FastifyInstance;
  baseUrl: string;
  api: TestApp;
  close(): Promise<void>;
}

/**
 * Another app on the same database, standing in for a second process: on PostgreSQL with its own
 * connection pool (and its own LISTEN connection); on PGlite sharing the one embedded instance.
 * Either way it has its own stream hub and turn runner, so it knows nothing of the first app's
 * streams except what is in the database.
 */
export async function startSecondProcess(t: TestApp, deps: Partial<AppDeps> = {}): Promise<SecondProcess> {
  let own: Database | null = null;
  if (backend === 'postgres') {
    own = await openDatabase({ databaseUrl: t.testDb.url, dataDir: os.tmpdir(), poolSize: 4 });
  }
  const sibling = await startSibling(t, { database: own ?? t.deps.database, ...deps });
  return {
    ...sibling,
    async close() {
      await sibling.app.close();
      await own?.close();
    },
  };
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A promise and the function that resolves it. */
export function signal(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}
