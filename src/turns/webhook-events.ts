import type { Queryable } from '../db/client.js';
import { type OutboxEvent, recordEventIfSubscribed } from '../jobs/outbox.js';

export interface TurnRef {
  organizationId: number;
  projectId: number;
  chatId: number;
  /** The assistant message (the reply). */
  messageId: number;
}

/**
 * `chat_turn_completed`, in the transaction that records the turn's end: a turn that ended with a
 * reply (a cancel request's partial reply included), with what it cost.
 */
export function recordTurnCompleted(
  tx: Queryable,
  turn: TurnRef,
  usage: { inputTokens: number; outputTokens: number; credits: number },
) {
  return recordEventIfSubscribed(tx, turnCompletedEvent(turn, usage));
}

/** The `chat_turn_completed` event (also written by finish.ts's one-statement end). */
export function turnCompletedEvent(
  turn: TurnRef,
  usage: { inputTokens: number; outputTokens: number; credits: number },
): OutboxEvent {
  return {
    organizationId: turn.organizationId,
    projectId: turn.projectId,
    eventName: 'chat_turn_completed',
    eventData: {
      chat_id: turn.chatId,
      message_id: turn.messageId,
      project_id: turn.projectId,
      usage: { input_tokens: usage.inputTokens, output_tokens: usage.outputTokens, credits: usage.credits },
    },
  };
}

/**
 * `chat_turn_failed`: `code` is the stable identifier of the `error` event's cause (`model_error`,
 * `model_timeout`, `database_unavailable`, `turn_cancelled` on shutdown, `turn_interrupted`). A
 * provider's own text never leaves in a webhook: model errors get a generic message.
 */
export function recordTurnFailed(tx: Queryable, turn: TurnRef, error: { code: string; message: string }) {
  const message =
    error.code === 'model_error' ? 'The model provider failed while generating the reply' : error.message;
  return recordEventIfSubscribed(tx, {
    organizationId: turn.organizationId,
    projectId: turn.projectId,
    eventName: 'chat_turn_failed',
    eventData: {
      chat_id: turn.chatId,
      message_id: turn.messageId,
      project_id: turn.projectId,
      error: { code: error.code, message },
    },
  });
}

/**
 * `chat_approval_required`, in the transaction that stores the pending approval: a tool call of
 * the turn waits for POST /api/v2/chats/:id/approvals/:tool_call_id.
 */
export function recordApprovalRequired(
  tx: Queryable,
  turn: TurnRef,
  pending: {
    tool_call_id: string;
    tool_name: string;
    parameters: Record<string, unknown>;
    expires_at: string;
  },
) {
  return recordEventIfSubscribed(tx, {
    organizationId: turn.organizationId,
    projectId: turn.projectId,
    eventName: 'chat_approval_required',
    eventData: { chat_id: turn.chatId, message_id: turn.messageId, project_id: turn.projectId, ...pending },
  });
}
