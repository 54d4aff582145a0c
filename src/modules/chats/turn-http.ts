import { randomUUID } from 'node:crypto';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { ApiError, toApiError } from '../../http/errors.js';
import { releaseIdempotencyKey, setIdempotentStream } from '../../http/idempotency.js';
import { SseStream } from '../../http/sse.js';
import { type RelayOptions, relayStream } from '../streams/sse-relay.js';
import type { StreamListener } from '../streams/stream-hub.js';
import type { ChatRuntime } from './runtime.js';
import type { ChatView, MessageView } from './schemas.js';
import { turnIdOfStreamKey, turnStreamKey } from './stored-turn-events.js';
import type { TurnEventHub } from './turn-events.js';
import type { StartedTurn } from './turn-runner.js';

export const LOST_TURN_MESSAGE =
  'The reply was interrupted: the server running it stopped. Send the message again.';

/** The `error` event of a turn whose process stopped before its end (spec 6.1 shape). */
export const lostTurnEvent = (chat?: ChatView) => ({
  name: 'error',
  data: { message: LOST_TURN_MESSAGE, code: 500, ...(chat ? { chat } : {}) },
});

/** Relays a turn's events after `afterSeq`, each with its `seq` as the SSE `id:`. */
export function relayTurn(
  sse: SseStream,
  hub: TurnEventHub,
  turnId: number,
  afterSeq: number,
  options: Omit<RelayOptions, 'afterSeq'>,
): Promise<void> {
  const subscribe = (listener: StreamListener) =>
    hub.subscribe(
      turnId,
      afterSeq,
      (event) => listener.onEvent(event),
      (reason) => listener.onEnd(reason),
    );
  return relayStream(sse, subscribe, { ...options, afterSeq });
}

/**
 * A streamed turn (spec 4.1, 6.1). The request was checked already, so the answer is a 200 stream
 * from here on and every failure, including those of starting the turn (402, 409), is an `error`
 * event. Leaving early (client gone, reply timeout) only stops the relay: the turn runs on.
 *
 * With an Idempotency-Key, the stream is recorded for repeats of the request: the turn's stream,
 * or, for a refusal, a one-event stream (unless a retry should run again: 409, 429, 5xx on a
 * message; a create always keeps its answer, since its chat exists).
 */
export async function streamTurn(
  request: FastifyRequest,
  reply: FastifyReply,
  runtime: ChatRuntime,
  start: () => Promise<StartedTurn>,
  options: { announceChat?: ChatView; replyTimeoutMs: number },
): Promise<void> {
  const sse = new SseStream(reply);
  let turn: StartedTurn;
  try {
    turn = await start();
  } catch (err) {
    const error = toApiError('v2', err);
    if (error.status >= 500) reply.log.error({ err }, 'could not start a chat turn');
    const data = {
      message: error.message,
      code: error.status,
      ...(options.announceChat ? { chat: options.announceChat } : {}),
    };
    await recordRefusal(request, runtime, data, !options.announceChat && retryRunsAgain(error.status));
    sse.send('error', data, 1);
    sse.end();
    return;
  }

  const recorded = setIdempotentStream(request, turnStreamKey(turn.turnId)).catch((err) =>
    reply.log.error({ err }, 'could not record the stream of an idempotent request'),
  );
  await relayTurn(sse, runtime.hub, turn.turnId, 0, {
    lostEvent: () => lostTurnEvent(options.announceChat),
    timeout: {
      ms: options.replyTimeoutMs,
      event: () => ({
        name: 'error',
        data: {
          message: replyTimeoutMessage(options.replyTimeoutMs),
          code: 504,
          ...(options.announceChat ? { chat: options.announceChat } : {}),
        },
      }),
    },
  });
  await recorded;
}

const retryRunsAgain = (status: number) => status === 409 || status === 429 || status >= 500;

async function recordRefusal(
  request: FastifyRequest,
  runtime: ChatRuntime,
  data: Record<string, unknown>,
  release: boolean,
): Promise<void> {
  if (request.idempotencyId === null) return;
  try {
    if (release) {
      await releaseIdempotencyKey(request);
      return;
    }
    const key = `chat-refusal:${randomUUID()}`;
    await runtime.streams.publish(key, 1, 'error', data);
    await setIdempotentStream(request, key);
  } catch (err) {
    request.log.error({ err }, 'could not record the refusal of an idempotent request');
  }
}

/**
 * A repeat of a streamed chat POST (same Idempotency-Key and body): the first request's stream
 * again, after `after` (its Last-Event-ID; 0: from its first event), live until its end; no
 * second chat or turn.
 */
export async function reattachStream(
  reply: FastifyReply,
  runtime: ChatRuntime,
  ref: string,
  announceChat?: () => Promise<ChatView | undefined>,
  after = 0,
): Promise<void> {
  const chat = announceChat ? await announceChat() : undefined;
  const sse = new SseStream(reply);
  const turnId = turnIdOfStreamKey(ref);
  const lostEvent = () => lostTurnEvent(chat);
  if (turnId !== null) {
    await relayTurn(sse, runtime.hub, turnId, after, { lostEvent });
    return;
  }
  await relayStream(sse, (listener) => runtime.streams.subscribe(ref, after, listener), {
    lostEvent,
    afterSeq: after,
  });
}

export function replyTimeoutMessage(timeoutMs: number): string {
  return `The reply took longer than ${formatDuration(timeoutMs)}; it continues, and the chat's history shows it once finished`;
}

function formatDuration(ms: number): string {
  if (ms % 60_000 === 0) return `${ms / 60_000} minute${ms === 60_000 ? '' : 's'}`;
  if (ms >= 1000) return `${Math.round(ms / 100) / 10} s`;
  return `${ms} ms`;
}

/**
 * A non-streamed turn: waits for the reply up to the reply timeout (504 after it, the turn going on
 * into history). `extra` is added to every error body (`chat_id` on create, spec 4.1).
 */
export async function awaitTurn(
  turn: StartedTurn,
  timeoutMs: number,
  extra: Record<string, unknown> = {},
): Promise<MessageView> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<'timeout'>((resolve) => {
    timer = setTimeout(() => resolve('timeout'), timeoutMs);
  });
  const outcome = await Promise.race([turn.outcome, timeout]);
  clearTimeout(timer);
  if (outcome === 'timeout')
    throw new ApiError(504, 'reply_timeout', replyTimeoutMessage(timeoutMs), {}, extra);
  if (outcome.status === 'failed') {
    const { error } = outcome;
    throw new ApiError(error.status, error.code, error.message, {}, { ...error.extra, ...extra });
  }
  return outcome.message;
}

/** Adds `extra` (e.g. `chat_id`) to an error thrown while starting a turn. */
export function withExtra(err: unknown, extra: Record<string, unknown>): ApiError {
  const error = toApiError('v2', err);
  return new ApiError(error.status, error.code, error.message, error.details, { ...error.extra, ...extra });
}
