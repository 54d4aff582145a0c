import { and, desc, eq, gt, sql } from 'drizzle-orm';
import type { Queryable } from '../../db/client.js';
import { chats, chatTurns } from '../../db/schema/index.js';
import type { ServiceContext } from '../../http/context.js';
import { ApiError, conflict } from '../../http/errors.js';
import { presentChat } from './presenter.js';
import type { ChatView, MessageView } from './schemas.js';
import { turnIdOfStreamKey } from './stored-turn-events.js';
import type { TurnEventHub } from './turn-events.js';

/** How long after its end a turn's stream can still be reattached with GET /chats/:id/stream. */
export const REATTACH_WINDOW_MINUTES = 10;

export interface AttachableTurn {
  id: number;
  running: boolean;
}

/** The chat's turn in progress, or its last one if it ended less than 10 minutes ago. */
export async function attachableTurn(db: Queryable, chatId: number): Promise<AttachableTurn | null> {
  const [turn] = await db
    .select({
      id: chatTurns.id,
      running: sql<boolean>`${chatTurns.status} = 'running' and ${chatTurns.leaseExpiresAt} > now()`,
      recent: sql<boolean>`coalesce(${chatTurns.finishedAt} > now() - make_interval(mins => ${REATTACH_WINDOW_MINUTES}), false)`,
    })
    .from(chatTurns)
    .where(eq(chatTurns.chatId, chatId))
    .orderBy(desc(chatTurns.id))
    .limit(1);
  if (!turn || !(turn.running || turn.recent)) return null;
  return { id: turn.id, running: turn.running };
}

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
export function awaitCancelledTurn(
  hub: TurnEventHub,
  turnId: number,
  timeoutMs: number,
): Promise<MessageView> {
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
    unsubscribe = hub.subscribe(
      turnId,
      0,
      (event) => {
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
      (reason) => {
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
    );
    if (settled) unsubscribe();
  });
}

/** The chat a chat-turn stream belongs to (for the `chat` of a create's events). */
export async function chatOfStream(ctx: ServiceContext, ref: string): Promise<ChatView | undefined> {
  const turnId = turnIdOfStreamKey(ref);
  if (turnId === null) return undefined;
  const [row] = await ctx.db
    .select({ chat: chats })
    .from(chatTurns)
    .innerJoin(chats, eq(chats.id, chatTurns.chatId))
    .where(and(eq(chatTurns.id, turnId), eq(chats.organizationId, ctx.principal.organizationId)));
  return row ? presentChat(row.chat) : undefined;
}
