import { and, eq, gt, sql } from 'drizzle-orm';
import type { ServiceContext } from '../core/context.js';
import type { Db } from '../db/client.js';
import { chatMessages, chats, chatTurns } from '../db/schema/index.js';
import { ApiError, conflict } from '../http/errors.js';
import type { MessageView } from '../modules/chats/schemas.js';
import { messageView } from '../modules/chats/service.js';
import { chatDone } from '../streams/protocol.js';
import type { StreamHub } from '../streams/stream-hub.js';
import { asTurnEvent, turnStreamKey } from './events.js';
import { partialReplySql } from './lease.js';
import { recordTurnCompleted } from './webhook-events.js';

/**
 * Marks the chat's live turn as to be cancelled (the process running it reads the mark at its
 * next lease renewal, or at once when notified). 409 when no turn runs.
 */
export async function requestTurnCancel(ctx: ServiceContext, chatId: number): Promise<number> {
  const [turn] = await ctx.db
    .update(chatTurns)
    .set({ cancelRequestedAt: sql`coalesce(${chatTurns.cancelRequestedAt}, now())` })
    .where(
      and(
        eq(chatTurns.chatId, chatId),
        eq(chatTurns.organizationId, ctx.principal.organizationId),
        eq(chatTurns.status, 'running'),
        gt(chatTurns.leaseExpiresAt, sql`now()`),
      ),
    )
    .returning({ id: chatTurns.id });
  if (!turn) throw conflict('No message is being processed for this chat', 'no_turn_in_progress');
  return turn.id;
}

/** How long a cancel waits for the process running the turn to answer before taking the turn over. */
export const CANCEL_ANSWER_MS = 3_000;

/**
 * Waits for a cancelled turn's last event, wherever it runs: `done` carries the message as far as
 * it got. A process that is alive stops the turn within milliseconds of the notification; when
 * the turn is known dead (`isDead`), or no answer came within `answerMs`, the cancel records the
 * turn itself (`takeOverTurn`). A turn that failed meanwhile is no longer running (409).
 */
export function awaitCancelledTurn(
  db: Db,
  hub: StreamHub,
  turnId: number,
  options: {
    timeoutMs: number;
    /** How long to wait for the turn's process before taking over; null when the turn runs here. */
    answerMs: number | null;
    isDead: () => Promise<boolean>;
  },
): Promise<MessageView> {
  return new Promise((resolve, reject) => {
    let settled = false;
    let takingOver = false;
    let unsubscribe: (() => void) | null = null;
    const settle = (fn: () => void) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      clearTimeout(unanswered);
      unsubscribe?.();
      fn();
    };
    const takeOver = () => {
      if (settled || takingOver) return;
      takingOver = true;
      takeOverTurn(db, hub, turnId).then(
        (message) => settle(() => resolve(message)),
        (err) => settle(() => reject(err)),
      );
    };
    const timer = setTimeout(
      () =>
        settle(() =>
          reject(
            new ApiError(
              504,
              'cancel_timeout',
              'The cancellation is recorded but the turn has not stopped yet; it stops at its next lease renewal',
            ),
          ),
        ),
      options.timeoutMs,
    );
    const unanswered = options.answerMs === null ? undefined : setTimeout(takeOver, options.answerMs);
    unsubscribe = hub.subscribe(
      turnStreamKey(turnId),
      0,
      {
        onEvent: (stored) => {
          const event = asTurnEvent(stored);
          if (event.name === 'done') settle(() => resolve(event.data.message));
          else if (event.name === 'error')
            settle(() =>
              reject(
                conflict(
                  `The turn ended with an error before it could be cancelled: ${event.data.message}`,
                  'turn_not_running',
                ),
              ),
            );
        },
        onEnd: (reason) => {
          if (reason === 'ended') return;
          if (reason === 'lost') {
            takeOver();
            return;
          }
          settle(() =>
            reject(
              conflict(
                'This server is shutting down; the cancellation is recorded and the turn stops at its next lease renewal',
                'turn_not_running',
              ),
            ),
          );
        },
      },
      { abandoned: options.isDead },
    );
    if (settled) unsubscribe();
  });
}

/**
 * Records the cancellation of a turn whose process did not answer (it died, or missed the
 * notification and is slow): the turn ends `cancelled`, its reply keeps what was streamed (the
 * stored `content` events), the chat takes messages again, and its stream ends with `done`. A
 * process still running it learns at its next lease renewal and stops, leaving this record. When
 * the turn had ended meanwhile, its own record is the answer (409 if it failed).
 */
export async function takeOverTurn(db: Db, hub: StreamHub, turnId: number): Promise<MessageView> {
  const taken = await db.transaction(async (tx) => {
    const [turn] = await tx
      .update(chatTurns)
      .set({ status: 'cancelled', finishedAt: sql`now()` })
      .where(and(eq(chatTurns.id, turnId), eq(chatTurns.status, 'running')))
      .returning({
        assistantMessageId: chatTurns.assistantMessageId,
        organizationId: chatTurns.organizationId,
        chatId: chatTurns.chatId,
      });
    if (!turn || turn.assistantMessageId === null) return null;
    const [chat] = await tx
      .select({ projectId: chats.projectId })
      .from(chats)
      .where(eq(chats.id, turn.chatId));
    // No usage is known for a turn whose process went away: nothing is charged.
    await recordTurnCompleted(
      tx,
      {
        organizationId: turn.organizationId,
        projectId: chat.projectId,
        chatId: turn.chatId,
        messageId: turn.assistantMessageId,
      },
      { inputTokens: 0, outputTokens: 0, credits: 0 },
    );
    await tx
      .update(chatMessages)
      .set({
        status: 'cancelled',
        content: partialReplySql(turnId),
        error: null,
        createdAt: sql`now()`,
        completedAt: sql`now()`,
      })
      .where(eq(chatMessages.id, turn.assistantMessageId));
    return turn.assistantMessageId;
  });
  if (taken !== null) {
    const message = await messageView(db, taken);
    await hub.endAbandoned(turnStreamKey(turnId), 'done', chatDone(message).data);
    return message;
  }
  const [turn] = await db
    .select({ status: chatTurns.status, assistantMessageId: chatTurns.assistantMessageId })
    .from(chatTurns)
    .where(eq(chatTurns.id, turnId));
  if (turn?.assistantMessageId && (turn.status === 'completed' || turn.status === 'cancelled')) {
    const message = await messageView(db, turn.assistantMessageId);
    if (message.status !== 'failed') return message;
  }
  throw conflict('The turn ended with an error before it could be cancelled', 'turn_not_running');
}
