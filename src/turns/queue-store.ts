import { and, asc, count, desc, eq, gt, lte, or } from 'drizzle-orm';
import type { Queryable } from '../db/client.js';
import { chatQueuedMessages as queued } from '../db/schema/index.js';

/** Messages waiting per chat (`if_busy: "enqueue"`); an interrupt does not count. */
export const QUEUE_LIMIT = 10;

/** Where a queued message's state changes are announced between processes (payload: its id). */
export const QUEUE_CHANNEL = 'scriptorium_chat_queue';

/** Next first: interrupts (priority 1), then arrival order. */
export const queueOrder = [desc(queued.priority), asc(queued.id)] as const;

export const waitingIn = (chatId: number) => and(eq(queued.chatId, chatId), eq(queued.status, 'queued'));

/** 1 is next. */
export async function positionOf(
  db: Queryable,
  entry: { id: number; chatId: number; priority: number },
): Promise<number> {
  const [{ ahead }] = await db
    .select({ ahead: count() })
    .from(queued)
    .where(
      and(
        waitingIn(entry.chatId),
        or(
          gt(queued.priority, entry.priority),
          and(eq(queued.priority, entry.priority), lte(queued.id, entry.id)),
        ),
      ),
    );
  return ahead;
}

/**
 * Archiving a chat drops its queue (in the archiving transaction); the clients waiting on those
 * messages get 404 (they poll the state, see ChatQueue.follow).
 */
export async function dropChatQueue(tx: Queryable, chatId: number): Promise<void> {
  await tx.update(queued).set({ status: 'dropped' }).where(waitingIn(chatId));
}
