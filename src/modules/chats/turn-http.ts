import { randomUUID } from 'node:crypto';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { AppDeps } from '../../core/deps.js';
import { ApiError, toApiError } from '../../http/errors.js';
import { releaseIdempotencyKey, setIdempotentStream } from '../../http/idempotency.js';
import { SseStream } from '../../http/sse.js';
import {
  ChatStreamEvents,
  chatDone,
  chatError,
  chatFailure,
  eventList,
  type TurnEvent,
} from '../../streams/protocol.js';
import { StreamPublisher } from '../../streams/publisher.js';
import { relayStream } from '../../streams/sse-relay.js';
import type { StreamHub } from '../../streams/stream-hub.js';
import { turnIdOfStreamKey, turnStreamKey } from '../../turns/events.js';
import { TURN_INTERRUPTED_MESSAGE } from '../../turns/failure.js';
import type { StartedTurn } from '../../turns/runner.js';
import type { TurnStopWatch } from '../../turns/turn-stops.js';
import type { ChatView, MessageView } from './schemas.js';

/** OpenAPI description of the streamed answers; the event list comes from src/streams/protocol.ts. */
export const STREAM_NOTE = `With \`stream: true\` the answer is HTTP 200 \`text/event-stream\` with the events ${eventList(ChatStreamEvents)} (spec 6.1), each with an \`id:\` line (its sequence number in the turn). A repeat with the same \`Idempotency-Key\` and body reattaches to the same stream from its start.`;

/** The `error` event of a turn whose process stopped before its end (spec 6.1 shape). */
const lostTurnEvent = (chat?: ChatView) => chatError(TURN_INTERRUPTED_MESSAGE, 500, chat);

/**
 * Relays a turn's events after `afterSeq`, each with its `seq` as the SSE `id:`: the one adapter
 * between a turn and its client. A reader in another process stops waiting as soon as the turn is
 * known dead or its stream orphaned (TurnRunner.isOrphaned), not only when its stream's liveness
 * lapses, and ends with `done` carrying the recorded reply when the turn ended with one (its
 * process stopped just before storing that event), else with the lost turn's `error`.
 */
export function relayTurn(
  sse: SseStream,
  deps: Pick<AppDeps, 'streams' | 'turns'>,
  turnId: number,
  afterSeq: number,
  options: { announceChat?: ChatView },
): Promise<void> {
  const lostEvent = async (): Promise<TurnEvent> => {
    const reply = await deps.turns.recordedReply(turnId).catch(() => null);
    return reply ? chatDone(reply, options.announceChat) : lostTurnEvent(options.announceChat);
  };
  return relayStream(
    sse,
    (listener) =>
      deps.streams.subscribe(turnStreamKey(turnId), afterSeq, listener, {
        abandoned: () => deps.turns.isOrphaned(turnId),
      }),
    { lostEvent, afterSeq },
  );
}

/**
 * A streamed turn (spec 4.1, 6.1). The request was checked already, so the answer is a 200 stream
 * from here on and every failure, including those of starting the turn (402, 409), is an `error`
 * event. A client leaving only stops the relay: the turn runs on.
 *
 * With an Idempotency-Key, the stream is recorded for repeats of the request: the turn's stream,
 * or, for a refusal, a one-event stream (unless a retry should run again: 409, 429, 5xx on a
 * message; a create always keeps its answer, since its chat exists).
 */
export async function streamTurn(
  request: FastifyRequest,
  reply: FastifyReply,
  deps: Pick<AppDeps, 'streams' | 'turns'>,
  start: () => Promise<StartedTurn>,
  options: { announceChat?: ChatView },
): Promise<void> {
  let turn: StartedTurn;
  try {
    turn = await start();
  } catch (err) {
    const error = toApiError('v2', err);
    if (error.status >= 500) reply.log.error({ err }, 'could not start a chat turn');
    const refusal = chatFailure(error, options.announceChat);
    await recordRefusal(
      request,
      deps.streams,
      refusal,
      !options.announceChat && retryRunsAgain(error.status),
    );
    const sse = new SseStream(reply);
    sse.send(refusal.name, refusal.data, 1);
    sse.end();
    return;
  }
  // The turn sends its model request within this tick's promise jobs; the response's headers wait
  // for the next turn of the event loop, so their write is not on the way to the first token.
  await new Promise<void>((resolve) => setImmediate(resolve));
  const sse = new SseStream(reply);

  const recorded = setIdempotentStream(request, turnStreamKey(turn.turnId)).catch((err) =>
    reply.log.error({ err }, 'could not record the stream of an idempotent request'),
  );
  // No reply timeout: a stream stays open until `done` or `error` however long the turn runs (spec
  // 4.1 and 7.1 limit non-streaming requests only); the turn's idle watchdog ends a silent model.
  await relayTurn(sse, deps, turn.turnId, 0, { announceChat: options.announceChat });
  await recorded;
}

const retryRunsAgain = (status: number) => status === 409 || status === 429 || status >= 500;

async function recordRefusal(
  request: FastifyRequest,
  streams: StreamHub,
  refusal: TurnEvent,
  release: boolean,
): Promise<void> {
  if (request.idempotencyId === null) return;
  try {
    if (release) {
      await releaseIdempotencyKey(request);
      return;
    }
    const publisher = new StreamPublisher<TurnEvent>(streams, `chat-refusal:${randomUUID()}`);
    await publisher.publish(refusal);
    await setIdempotentStream(request, publisher.key);
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
  deps: Pick<AppDeps, 'streams' | 'turns'>,
  ref: string,
  announceChat?: () => Promise<ChatView | undefined>,
  after = 0,
): Promise<void> {
  const chat = announceChat ? await announceChat() : undefined;
  const sse = new SseStream(reply);
  const turnId = turnIdOfStreamKey(ref);
  if (turnId !== null) {
    await relayTurn(sse, deps, turnId, after, { announceChat: chat });
    return;
  }
  await relayStream(sse, (listener) => deps.streams.subscribe(ref, after, listener), {
    lostEvent: () => lostTurnEvent(chat),
    afterSeq: after,
  });
}

/**
 * A repeat of a streamed request (same Idempotency-Key and body): answers it with its first
 * stream, from the client's Last-Event-ID, and says so. False for a first request.
 */
export async function reattachRepeat(
  request: FastifyRequest,
  reply: FastifyReply,
  deps: Pick<AppDeps, 'streams' | 'turns'>,
): Promise<boolean> {
  if (!request.idempotencyStream) return false;
  await reattachStream(reply, deps, request.idempotencyStream, undefined, request.idempotencyStreamAfter);
  return true;
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
 * into history). `extra` is added to every error body (`chat_id` on create, spec 4.1). The answer
 * carries the turn's `Server-Timing` (db, model, overhead, total). With `pauses` (an agent that
 * gates tools), a turn waiting for tool approvals answers at once with its reply so far
 * (`requires_action`).
 */
export async function awaitTurn(
  reply: FastifyReply,
  turn: StartedTurn,
  timeoutMs: number,
  extra: Record<string, unknown> = {},
  pauses?: TurnStopWatch,
): Promise<MessageView> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<'timeout'>((resolve) => {
    timer = setTimeout(() => resolve('timeout'), timeoutMs);
  });
  const paused = new Promise<{ status: 'paused'; message: MessageView }>((resolve) => {
    void pauses?.next.then((stop) => {
      if (stop.kind === 'paused') resolve({ status: 'paused', message: stop.message });
    });
  });
  const outcome = await Promise.race([turn.outcome, timeout, paused]).finally(() => pauses?.stop());
  clearTimeout(timer);
  if (outcome === 'timeout')
    throw new ApiError(504, 'reply_timeout', replyTimeoutMessage(timeoutMs), {}, extra);
  if (outcome.status === 'paused') {
    reply.header('server-timing', turn.timing.serverTiming());
    return { ...outcome.message, timing: turn.timing.view() };
  }
  reply.header('server-timing', outcome.timing.serverTiming());
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
