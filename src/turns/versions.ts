import { eq, or } from 'drizzle-orm';
import type { Queryable } from '../db/client.js';
import { chatMessages } from '../db/schema/index.js';

/**
 * A regenerated reply takes the place of `replacedId` in history: that reply, and every older
 * version it had replaced, now point at `replyId` (listed by GET .../versions).
 */
export async function replaceReply(tx: Queryable, replacedId: number, replyId: number): Promise<void> {
  await tx
    .update(chatMessages)
    .set({ replacedById: replyId })
    .where(or(eq(chatMessages.id, replacedId), eq(chatMessages.replacedById, replacedId)));
}
