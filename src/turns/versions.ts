import { eq, or, sql } from 'drizzle-orm';
import type { Queryable } from '../db/client.js';
import { chatMessages, chats } from '../db/schema/index.js';
import { acquireTurnLease } from './lease.js';
import type { TurnRows, TurnRowsInput } from './turn-start.js';

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

/**
 * A regeneration's rows, inside the caller's transaction: a new reply in `generating` state to the
 * user message answered again (`regenerates_id` naming the reply it is to replace), and the
 * chat's lease pointing at both (409 when a turn runs).
 */
export async function insertRegenerationRows(
  tx: Queryable,
  input: TurnRowsInput,
  regenerate: { userMessageId: number; replacedMessageId: number },
): Promise<TurnRows> {
  const [reply] = await tx
    .insert(chatMessages)
    .values({
      organizationId: input.organizationId,
      chatId: input.chatId,
      role: 'assistant',
      model: input.model,
      modelConfigurationId: input.modelConfigurationId,
      status: 'generating',
      regeneratesId: regenerate.replacedMessageId,
    })
    .returning({ id: chatMessages.id });
  const turnId = await acquireTurnLease(tx, {
    organizationId: input.organizationId,
    projectId: input.projectId,
    chatId: input.chatId,
    leaseMs: input.leaseMs,
    userMessageId: regenerate.userMessageId,
    assistantMessageId: reply.id,
  });
  await tx.update(chats).set({ updatedAt: sql`now()` }).where(eq(chats.id, input.chatId));
  return { turnId, userMessageId: regenerate.userMessageId, assistantMessageId: reply.id };
}
