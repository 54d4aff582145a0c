import { and, desc, eq, sql } from 'drizzle-orm';
import { recordAudit } from '../../audit/record.js';
import type { ServiceContext } from '../../core/context.js';
import { chatTurns, toolApprovals } from '../../db/schema/index.js';
import { conflict, notFound } from '../../http/errors.js';

export interface Decision {
  approved: boolean;
  reason?: string;
}

export interface DecidedApproval {
  approvalId: number;
  turnId: number;
  /** The reply waiting on the call. */
  messageId: number;
}

/**
 * Records a decision on a pending tool call of the chat (whose ownership the caller checked),
 * with the deciding key and an audit record. 404 for a tool call the chat never asked about
 * (the newest one when a model reused an id across turns); 409 once it is no longer pending:
 * decided, expired, cancelled, or its turn no longer running (its process died).
 */
export async function decideApproval(
  ctx: ServiceContext,
  chatId: number,
  toolCallId: string,
  decision: Decision,
): Promise<DecidedApproval> {
  return ctx.db.transaction(async (tx) => {
    const [found] = await tx
      .select({
        approval: toolApprovals,
        expired: sql<boolean>`${toolApprovals.expiresAt} <= now()`,
        turnRunning: sql<boolean>`${chatTurns.status} = 'running' and ${chatTurns.leaseExpiresAt} > now()`,
      })
      .from(toolApprovals)
      .innerJoin(chatTurns, eq(chatTurns.id, toolApprovals.turnId))
      .where(
        and(
          eq(toolApprovals.organizationId, ctx.principal.organizationId),
          eq(toolApprovals.chatId, chatId),
          eq(toolApprovals.toolCallId, toolCallId),
        ),
      )
      .orderBy(desc(toolApprovals.id))
      .limit(1)
      .for('update', { of: toolApprovals });
    if (!found) throw notFound('Tool call', 'approval_not_found');
    const { approval } = found;
    if (approval.status !== 'pending') {
      throw conflict(
        `The tool call is not waiting for a decision (it is ${approval.status})`,
        'approval_not_pending',
      );
    }
    if (found.expired) {
      throw conflict(
        'The tool call is not waiting for a decision (it expired, which counts as a denial)',
        'approval_not_pending',
      );
    }
    if (!found.turnRunning) {
      throw conflict(
        'The tool call is not waiting for a decision: its turn is no longer running',
        'approval_not_pending',
      );
    }
    await tx
      .update(toolApprovals)
      .set({
        status: decision.approved ? 'approved' : 'denied',
        reason: decision.reason ?? null,
        decidedByApiKeyId: ctx.principal.keyId,
        decidedAt: sql`now()`,
      })
      .where(eq(toolApprovals.id, approval.id));
    await recordAudit(tx, ctx, {
      action: decision.approved ? 'tool_approval.approved' : 'tool_approval.denied',
      resource: { type: 'tool_approval', id: approval.id },
      changedFields: ['status', ...(decision.reason === undefined ? [] : ['reason'])],
    });
    return { approvalId: approval.id, turnId: approval.turnId, messageId: approval.messageId };
  });
}
