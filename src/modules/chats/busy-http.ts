import type { FastifyReply, FastifyRequest } from 'fastify';
import type { ServiceContext } from '../../core/context.js';
import type { AppDeps } from '../../core/deps.js';
import { ApiError } from '../../http/errors.js';
import { releaseIdempotencyKey, setIdempotentStream } from '../../http/idempotency.js';
import { SseStream } from '../../http/sse.js';
import { chatError, chatFailure } from '../../streams/protocol.js';
import type { TurnTiming } from '../../telemetry/turn-timing.js';
import { awaitCancelledTurn, CANCEL_ANSWER_MS, requestTurnCancel } from '../../turns/cancel.js';
import { turnStreamKey } from '../../turns/events.js';
import type { TurnPlan } from '../../turns/plan.js';
import { awaitTurnReply, type BusyPolicy } from '../../turns/queue.js';
import type { StartedTurn, TurnOutcome } from '../../turns/runner.js';
import { type TurnStopWatch, untilPaused, watchPauses } from '../../turns/turn-stops.js';
import { turnStops } from './approvals-routes.js';
import type { MessageView } from './schemas.js';
import { relayTurn, replyTimeoutMessage, streamTurn } from './turn-http.js';

type Deps = Pick<AppDeps, 'streams' | 'turns' | 'chatQueue' | 'config' | 'database'>;

export interface BusySend {
  ctx: ServiceContext;
  plan: TurnPlan;
  content: string;
  stream: boolean;
  policy: Exclude<BusyPolicy, 'reject'>;
  arrivedAt: number;
}

const isBusy = (err: unknown) => err instanceof ApiError && err.code === 'turn_in_progress';

/**
 * POST /chats/:id/messages with `if_busy: "enqueue"` or `"interrupt"` (issue 17). A free chat
 * runs the message at once, as `reject` does (an `enqueue` queues behind messages already
 * waiting). A busy one stores it in the chat's queue (src/turns/queue.ts); an interrupt goes
 * ahead of the queue and cancels the running turn. The client then waits for its own turn: a
 * stream (`queued` first, for an enqueue) or the reply (504 after REPLY_TIMEOUT_MS, counted from
 * the request's arrival). Returns the message of a blocking request; a stream was answered.
 */
export async function sendWhenBusy(
  request: FastifyRequest,
  reply: FastifyReply,
  deps: Deps,
  send: BusySend,
): Promise<MessageView | undefined> {
  const { ctx, plan, content, policy } = send;
  const deadline = Date.now() + deps.config.replyTimeoutMs;
  let started: StartedTurn | null = null;
  let refusal: unknown = null;
  if (policy === 'interrupt' || !(await deps.chatQueue.hasWaiting(plan.chat.id))) {
    try {
      started = await deps.turns.begin(ctx, plan, content, { arrivedAt: send.arrivedAt });
    } catch (err) {
      if (!isBusy(err)) refusal = err;
    }
  }
  if (started || refusal) {
    const run = async () => {
      if (refusal) throw refusal;
      return started!;
    };
    if (send.stream) {
      await streamTurn(request, reply, deps, run, {});
      return undefined;
    }
    const turn = await run();
    const pauses = watchPauses(turnStops(deps), plan, turn);
    return awaitOutcome(reply, turn.outcome, deadline, deps.config.replyTimeoutMs, pauses, turn.timing);
  }

  // The chat is busy: the message waits for it.
  let entry: { id: number; position: number };
  try {
    entry = await deps.chatQueue.accept(ctx, plan, content, policy === 'interrupt' ? 1 : 0);
  } catch (err) {
    if (!send.stream) throw err;
    await streamTurn(request, reply, deps, () => Promise.reject(err), {});
    return undefined;
  }
  if (policy === 'interrupt') await interruptRunningTurn(ctx, deps, plan.chat.id);

  if (!send.stream) {
    const fate = await deps.chatQueue.follow(entry.id, { deadline });
    if (fate === 'closing') throw shuttingDown();
    if (fate === 'timeout' || fate === 'aborted') throw replyTimeout(deps.config.replyTimeoutMs);
    if (fate.kind === 'refused') throw fate.error;
    // A turn waiting for tool approvals answers with its reply so far (requires_action).
    const pauses = watchPauses(turnStops(deps), plan, { turnId: fate.turnId });
    if (fate.outcome) return awaitOutcome(reply, fate.outcome, deadline, deps.config.replyTimeoutMs, pauses);
    const message = await untilPaused(
      awaitTurnReply(deps.streams, deps.turns, fate.turnId, deadline),
      pauses,
    );
    if (message === 'timeout') throw replyTimeout(deps.config.replyTimeoutMs);
    return message;
  }

  const sse = new SseStream(reply);
  if (policy === 'enqueue') sse.send('queued', { message_id: entry.id, position: entry.position });
  // A client that leaves stops waiting; its message stays queued and runs.
  const left = new AbortController();
  void sse.closedPromise().then(() => left.abort());
  const fate = await deps.chatQueue.follow(entry.id, { signal: left.signal }).catch((err: unknown) => {
    // The stream is open: a failure to read the message's state (the database) is an error event.
    reply.log.error({ err }, 'could not follow a queued message');
    sse.send('error', chatError('Could not follow the queued message; it stays queued', 500).data);
    return 'aborted' as const;
  });
  if (fate === 'timeout' || fate === 'aborted') {
    sse.end();
    return undefined;
  }
  if (fate === 'closing' || fate.kind === 'refused') {
    const error = fate === 'closing' ? shuttingDown() : fate.error;
    // A refused message may be sent again with the same key; one still queued (closing) may not.
    if (fate !== 'closing')
      await releaseIdempotencyKey(request).catch((err) =>
        request.log.error({ err }, 'could not release the Idempotency-Key of a refused message'),
      );
    const refusal = chatFailure(error);
    sse.send(refusal.name, refusal.data);
    sse.end();
    return undefined;
  }
  const recorded = setIdempotentStream(request, turnStreamKey(fate.turnId)).catch((err) =>
    reply.log.error({ err }, 'could not record the stream of an idempotent request'),
  );
  await relayTurn(sse, deps, fate.turnId, 0, {});
  await recorded;
  return undefined;
}

/**
 * Cancels the chat's running turn for an interrupt (its partial reply kept, as POST /cancel does,
 * including the take-over of a turn whose process died); the queue then starts the interrupting
 * message first. Nothing running any more: the queue starts it at once.
 */
async function interruptRunningTurn(ctx: ServiceContext, deps: Deps, chatId: number): Promise<void> {
  const { turns, streams, chatQueue } = deps;
  let turnId: number;
  try {
    turnId = await requestTurnCancel(ctx, chatId);
  } catch {
    chatQueue.kick(chatId);
    return;
  }
  const here = await turns.cancelAnywhere(turnId);
  void awaitCancelledTurn(ctx.db, streams, turnId, {
    timeoutMs: turns.settings.leaseMs + 5_000,
    answerMs: here ? null : CANCEL_ANSWER_MS,
    isDead: () => turns.isDead(turnId),
  })
    .catch((err) => ctx.log.warn({ err }, 'the interrupted turn did not confirm its cancellation'))
    .finally(() => chatQueue.kick(chatId));
}

/** A waiting client of a process that stops: its message stays queued and runs elsewhere. */
const shuttingDown = () =>
  new ApiError(
    503,
    'shutting_down',
    'This server is shutting down; the message stays queued and runs on another server process (GET /api/v2/chats/:id/stream follows it once started)',
  );

const replyTimeout = (timeoutMs: number) =>
  new ApiError(504, 'reply_timeout', replyTimeoutMessage(timeoutMs));

/** A turn of this process: its reply up to the deadline, with its Server-Timing. */
async function awaitOutcome(
  reply: FastifyReply,
  outcome: Promise<TurnOutcome>,
  deadline: number,
  timeoutMs: number,
  pauses?: TurnStopWatch,
  timing?: TurnTiming,
): Promise<MessageView> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<'timeout'>((resolve) => {
    timer = setTimeout(() => resolve('timeout'), Math.max(0, deadline - Date.now()));
  });
  const settled = await untilPaused(Promise.race([outcome, timeout]), pauses);
  clearTimeout(timer);
  if (settled === 'timeout') throw replyTimeout(timeoutMs);
  // A paused turn's reply so far (a message has a role; an outcome has none).
  if ('role' in settled) return timing ? { ...settled, timing: timing.view() } : settled;
  reply.header('server-timing', settled.timing.serverTiming());
  if (settled.status === 'failed') {
    const { error } = settled;
    throw new ApiError(error.status, error.code, error.message, {}, error.extra);
  }
  return settled.message;
}
