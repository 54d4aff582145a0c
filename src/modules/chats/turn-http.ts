import type { FastifyReply } from 'fastify';
import { ApiError, toApiError } from '../../http/errors.js';
import { SseStream } from '../../http/sse.js';
import type { ChatView, MessageView } from './schemas.js';
import { isTerminal, type TurnEventHub } from './turn-events.js';
import type { StartedTurn } from './turn-runner.js';

/**
 * A streamed turn (spec 4.1, 6.1). The request was checked already, so the answer is a 200 stream
 * from here on and every failure, including those of starting the turn (402, 409), is an `error`
 * event. Leaving early (client gone, reply timeout) only stops the relay: the turn runs on.
 */
export async function streamTurn(
  reply: FastifyReply,
  hub: TurnEventHub,
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
    sse.send('error', {
      message: error.message,
      code: error.status,
      ...(options.announceChat ? { chat: options.announceChat } : {}),
    });
    sse.end();
    return;
  }

  await new Promise<void>((resolve) => {
    let finished = false;
    let unsubscribe: (() => void) | null = null;
    const finish = () => {
      if (finished) return;
      finished = true;
      clearTimeout(timer);
      unsubscribe?.();
      sse.end();
      resolve();
    };
    const timer = setTimeout(() => {
      sse.send('error', {
        message: replyTimeoutMessage(options.replyTimeoutMs),
        code: 504,
        ...(options.announceChat ? { chat: options.announceChat } : {}),
      });
      finish();
    }, options.replyTimeoutMs);
    // Events already published are replayed synchronously inside subscribe().
    unsubscribe = hub.subscribe(turn.turnId, 0, (event) => {
      if (finished) return;
      sse.send(event.name, event.data);
      if (isTerminal(event)) finish();
    });
    if (finished) unsubscribe();
    void sse.closedPromise().then(finish);
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
