import { eq, sql } from 'drizzle-orm';
import type { Queryable } from '../db/client.js';
import { chatMessages, type MessageRow } from '../db/schema/index.js';
import { chargeUsage, type Usage } from '../modules/credits/service.js';
import type { MessageAnnotations } from './additions.js';
import type { TurnFailure } from './failure.js';
import { releaseTurnLease } from './lease.js';
import { replaceReply } from './versions.js';
import { recordTurnCompleted, recordTurnFailed } from './webhook-events.js';

/**
 * How a turn ended. `completed` and `cancelled` (by a cancel request) keep the reply in history,
 * as far as it got, charged for what the model reported. `failed` (an error, or the server
 * stopping: `failure.cancelled`) marks both messages `failed`: shown in history as such, never
 * given to the model again; the reply keeps what was generated.
 */
export type TurnEnd =
  | { kind: 'completed' }
  | { kind: 'cancelled' }
  | { kind: 'failed'; failure: TurnFailure };

export interface TurnOutcomeRecord {
  turnId: number;
  chatId: number;
  projectId: number;
  userMessageId: number;
  assistantMessageId: number;
  /** The reply as far as it got. */
  text: string;
  /** Issue 18 fields of the reply (parsed, citations), when it completed. */
  annotations?: MessageAnnotations;
  usage: Usage;
  /** The ledger row's fields besides the usage. */
  charge: Omit<Parameters<typeof chargeUsage>[1], 'usage'>;
  end: TurnEnd;
}

/**
 * Writes a turn's result, inside the caller's transaction: the released lease (the chat takes
 * messages again), the assistant message and the charge. Returns the assistant message's row, or
 * null when the turn was no longer running: another process retired its expired lease, or a
 * cancel took over a turn whose process did not answer; their record stands.
 */
export async function finishTurn(tx: Queryable, outcome: TurnOutcomeRecord): Promise<MessageRow | null> {
  const { end, usage } = outcome;
  const failed = end.kind === 'failed';
  const status = end.kind === 'completed' ? 'completed' : end.kind === 'cancelled' ? 'cancelled' : 'failed';
  // The turn records who stopped it (a shutdown cancels it); its messages simply failed.
  const turnStatus = failed && end.failure.cancelled ? 'cancelled' : status;
  if (!(await releaseTurnLease(tx, outcome.turnId, turnStatus))) return null;
  // A failed turn is charged only when the model reported usage; a finished one always gets its ledger row.
  const spent = usage.inputTokens > 0 || usage.outputTokens > 0;
  const credits = !failed || spent ? await chargeUsage(tx, { ...outcome.charge, usage }) : 0;
  const [row] = await tx
    .update(chatMessages)
    .set({
      content: outcome.text,
      ...(end.kind === 'completed' ? outcome.annotations : {}),
      status,
      error: failed ? end.failure.message : null,
      inputTokens: usage.inputTokens,
      outputTokens: usage.outputTokens,
      credits,
      // A reply in history is created when it is complete; history order stays by id.
      ...(failed ? {} : { createdAt: sql`now()` }),
      completedAt: sql`now()`,
    })
    .where(eq(chatMessages.id, outcome.assistantMessageId))
    .returning();
  // A regeneration that failed leaves the user message answered by the reply it was to replace.
  if (failed && row?.regeneratesId == null)
    await tx
      .update(chatMessages)
      .set({ status, error: end.failure.message })
      .where(eq(chatMessages.id, outcome.userMessageId));
  if (!failed && row?.regeneratesId != null) await replaceReply(tx, row.regeneratesId, row.id);
  const turn = {
    organizationId: outcome.charge.organizationId,
    projectId: outcome.projectId,
    chatId: outcome.chatId,
    messageId: outcome.assistantMessageId,
  };
  if (failed) await recordTurnFailed(tx, turn, { code: end.failure.code, message: end.failure.message });
  else await recordTurnCompleted(tx, turn, { ...usage, credits });
  return row;
}
