import { and, eq, gt, sql } from 'drizzle-orm';
import type { ServiceContext } from '../core/context.js';
import { chatTurns } from '../db/schema/index.js';
import { ApiError, conflict } from '../http/errors.js';
import type { MessageView } from '../modules/chats/schemas.js';
import type { StreamHub } from '../streams/stream-hub.js';
import { asTurnEvent, turnStreamKey } from './events.js';

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

/**
 * Waits for a cancelled turn's last event, wherever it runs: `done` carries the message as far as
 * it got. A turn that failed meanwhile, or whose process stopped, is no longer running (409).
 */
export function awaitCancelledTurn(hub: StreamHub, turnId: number, timeoutMs: number): Promise<MessageView> {
  return new Promise((resolve, reject) => {
    let settled = false;
    let unsubscribe: (() => void) | null = null;
    const settle = (fn: () => void) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      unsubscribe?.();
      fn();
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
      timeoutMs,
    );
    unsubscribe = hub.subscribe(turnStreamKey(turnId), 0, {
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
        settle(() =>
          reject(
            conflict(
              'The turn stopped (its server went away) before it could be cancelled; the chat takes messages again once its lease expires',
              'turn_not_running',
            ),
          ),
        );
      },
    });
    if (settled) unsubscribe();
  });
}
